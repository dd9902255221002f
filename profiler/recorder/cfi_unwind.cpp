#include "profiler/recorder/cfi_unwind.h"

#include <atomic>
#include <cstring>
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <link.h>
#include <mutex>
#include <new>
#include <pthread.h>
#include <string>
#include <sys/stat.h>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "profiler/format/module_map.h"
#include "profiler/format/trace_layout.h"
#include "profiler/recorder/stack_capture.h"

namespace gmem::trace {

namespace {

// libdw and libelf, reached through dlopen (never linked: most traced programs never need it).
struct libdw_api {
  decltype(&elf_version) version;
  decltype(&elf_begin) begin;
  decltype(&elf_end) end;
  decltype(&dwarf_getcfi_elf) getcfi_elf;
  decltype(&dwarf_cfi_end) cfi_end;
  decltype(&dwarf_cfi_addrframe) addrframe;
  decltype(&dwarf_frame_info) frame_info;
  decltype(&dwarf_frame_cfa) frame_cfa;
  decltype(&dwarf_frame_register) frame_register;
};

// A rule, packed in one word (0 = not cached):
//   bits 0-1  kind: 1 = a frame to step over, 2 = the outermost frame, 3 = not replayable
//   bit  2    CFA base: 0 = rsp, 1 = rbp
//   bits 3-4  caller's rbp: 0 = same value, 1 = saved at CFA + rbp offset, 2 = undefined
//   bits 16-31 rbp offset (int16), bits 32-63 CFA offset (int32)
enum : std::uint64_t { k_step = 1, k_outermost = 2, k_refused = 3 };
enum : std::uint64_t { k_bp_same = 0, k_bp_saved = 1, k_bp_undefined = 2 };

constexpr std::uint64_t pack(std::uint64_t kind, bool rbp_base, std::uint64_t bp_rule,
                             std::int32_t cfa_offset, std::int16_t bp_offset) {
  return kind | (rbp_base ? 4u : 0u) | bp_rule << 3 |
         static_cast<std::uint64_t>(static_cast<std::uint16_t>(bp_offset)) << 16 |
         static_cast<std::uint64_t>(static_cast<std::uint32_t>(cfa_offset)) << 32;
}

struct slot {
  std::atomic<std::uint64_t> key{0}; // the return address; 0 = empty
  std::atomic<std::uint64_t> rule{0};
};
constexpr unsigned k_table_bits = 15;
constexpr std::uint64_t k_table_size = std::uint64_t{1} << k_table_bits;
constexpr unsigned k_max_probe = 32;

struct module_cfi {
  std::uintptr_t bias = 0;
  std::string name;
  int fd = -1;
  Elf* elf = nullptr;
  Dwarf_CFI* cfi = nullptr; // null: the module has no usable CFI
};

// Process globals, leaked (hooks run during exit): set once by cfi_unwind_init().
std::atomic<slot*> g_table{nullptr};
std::mutex g_mu; // learning, resets and the modules below
libdw_api g_dw{};
std::vector<module_cfi>* g_modules = nullptr;
unsigned long long g_subs_seen = 0; // under g_mu
cfi_unwind_counters g_counts;       // under g_mu

// Each thread's copies of the rules its own walks used. A thread allocates from a few call
// sites, so its walks find their rules in a few lines it keeps in cache instead of in the shared
// 512 KiB table, whose lines a busy program (an interpreter between two allocations) evicts:
// one miss per frame was most of a walk's cost in a Python process. First the rule the last
// walk used at the same depth (a loop allocating from one call site walks the same addresses
// each time, and a match known from the depth alone lets the processor run ahead of the walk's
// chain of loads), then the 512 rules met last (direct-mapped; a training step's walks meet
// about 200 return addresses). Both are checked by address and emptied when the shared table
// is (g_generation).
constexpr unsigned k_thread_rule_bits = 9;
constexpr unsigned k_last_walk_depth = 32;
struct thread_rules { // all zero: empty
  struct entry {
    std::uintptr_t pc = 0;
    std::uint64_t rule = 0;
  };
  std::uint64_t generation = 0; // g_generation when filled; 0 = never
  entry entries[std::size_t{1} << k_thread_rule_bits];
  entry last_walk[k_last_walk_depth]; // by depth
};
static_assert(std::is_trivially_copyable_v<thread_rules>); // emptied with memset
std::atomic<std::uint64_t> g_generation{1}; // moves on each reset of the shared table

// On the heap, not in thread-local storage: a preloaded library's TLS is carved out of every
// thread's stack, and a program that makes threads with small stacks must not lose 8.5 KiB of
// each (or fail to create them). Freed at the thread's exit.
thread_local thread_rules* t_rules __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_key_t g_rules_key;
bool g_rules_key_made = false; // set once, under g_rules_key_once
std::once_flag g_rules_key_once;

__attribute__((noinline)) thread_rules* new_thread_rules() noexcept {
  std::call_once(g_rules_key_once, [] {
    g_rules_key_made = pthread_key_create(&g_rules_key, [](void* p) {
                         t_rules = nullptr;
                         delete static_cast<thread_rules*>(p);
                       }) == 0;
  });
  if (!g_rules_key_made) return nullptr; // copies could not be freed at exit: walk without
  auto* rules = new (std::nothrow) thread_rules();
  if (rules == nullptr) return nullptr;
  if (pthread_setspecific(g_rules_key, rules) != 0) {
    delete rules;
    return nullptr;
  }
  t_rules = rules;
  return rules;
}

// The calling thread's stack, [lo, hi): found once per thread.
struct stack_bounds {
  std::uintptr_t lo = 0, hi = 0;
  bool tried = false;
};
thread_local stack_bounds t_stack __attribute__((tls_model("initial-exec")));

bool find_stack(stack_bounds& s) noexcept {
  s.tried = true;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
  void* addr = nullptr;
  std::size_t size = 0;
  const bool ok = pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != nullptr && size > 0;
  pthread_attr_destroy(&attr);
  if (!ok) return false;
  s.lo = reinterpret_cast<std::uintptr_t>(addr);
  s.hi = s.lo + size;
  return true;
}

inline __attribute__((always_inline)) std::uint64_t lookup(const slot* table,
                                                           std::uintptr_t pc) noexcept {
  for (std::uint64_t i = layout::hash_index(pc, k_table_bits), n = 0; n < k_max_probe;
       ++n, i = (i + 1) & (k_table_size - 1)) {
    const std::uint64_t key = table[i].key.load(std::memory_order_acquire);
    if (key == pc) return table[i].rule.load(std::memory_order_relaxed);
    if (key == 0) return 0;
  }
  return 0;
}

// With g_mu held. A full neighbourhood leaves the address uncached (it is learned again).
void insert(slot* table, std::uintptr_t pc, std::uint64_t rule) noexcept {
  for (std::uint64_t i = layout::hash_index(pc, k_table_bits), n = 0; n < k_max_probe;
       ++n, i = (i + 1) & (k_table_size - 1)) {
    const std::uint64_t key = table[i].key.load(std::memory_order_relaxed);
    if (key != 0 && key != pc) continue;
    table[i].rule.store(rule, std::memory_order_relaxed);
    table[i].key.store(pc, std::memory_order_release); // readers see the rule with the key
    return;
  }
}

struct phdr_search {
  std::uintptr_t pc = 0;
  std::uintptr_t bias = 0;
  std::string name;
  bool found = false;
};

int find_module(dl_phdr_info* info, std::size_t, void* data) {
  auto* s = static_cast<phdr_search*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD || (p.p_flags & PF_X) == 0) continue;
    const std::uintptr_t start = info->dlpi_addr + p.p_vaddr;
    if (s->pc >= start && s->pc - start < p.p_memsz) {
      s->bias = info->dlpi_addr;
      s->name = info->dlpi_name ? info->dlpi_name : "";
      s->found = true;
      return 1;
    }
  }
  return 0;
}

// With g_mu held: the CFI of the module loaded at `bias` from `name`, opened once.
Dwarf_CFI* module_cfi_for(std::uintptr_t bias, const std::string& name) {
  for (const module_cfi& m : *g_modules)
    if (m.bias == bias && m.name == name) return m.cfi;
  module_cfi m;
  m.bias = bias;
  m.name = name;
  // The main program has no name; a name that is not an absolute path (the vDSO) is not a
  // file this process can be sure to find again.
  const char* path = name.empty() ? "/proc/self/exe" : name.c_str();
  // Never blocks (a FIFO put where a library was) and reads regular files only.
  if (name.empty() || name[0] == '/') m.fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (m.fd >= 0 && (::fstat(m.fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    ::close(m.fd);
    m.fd = -1;
  }
  if (m.fd >= 0) m.elf = g_dw.begin(m.fd, ELF_C_READ_MMAP, nullptr);
  if (m.elf != nullptr) m.cfi = g_dw.getcfi_elf(m.elf);
  g_modules->push_back(std::move(m));
  return g_modules->back().cfi;
}

// The offset N of a register rule "saved at CFA + N" as libdw spells it (DW_OP_plus_uconst
// carries negative offsets wrapped), or false.
bool cfa_offset(const Dwarf_Op* ops, std::size_t nops, std::int64_t* offset) {
  if (nops == 0 || ops[0].atom != DW_OP_call_frame_cfa) return false;
  if (nops == 1) {
    *offset = 0;
    return true;
  }
  if (nops == 2 && ops[1].atom == DW_OP_plus_uconst) {
    *offset = static_cast<std::int64_t>(ops[1].number);
    return true;
  }
  if (nops == 3 && ops[1].atom == DW_OP_consts && ops[2].atom == DW_OP_plus) {
    *offset = static_cast<std::int64_t>(ops[1].number);
    return true;
  }
  return false;
}

// "CFA = register + offset" as libdw spells it (DW_OP_bregN offset, or DW_OP_bregx N offset).
void cfa_register(const Dwarf_Op& op, int* reg, std::int64_t* offset) {
  if (op.atom >= DW_OP_breg0 && op.atom <= DW_OP_breg31) {
    *reg = op.atom - DW_OP_breg0;
    *offset = static_cast<std::int64_t>(op.number);
  } else if (op.atom == DW_OP_bregx && op.number < 32) {
    *reg = static_cast<int>(op.number);
    *offset = static_cast<std::int64_t>(op.number2);
  }
}

// With g_mu held: the rule for return address `pc` (the call is at pc - 1).
std::uint64_t compute_rule(std::uintptr_t pc) {
  phdr_search s;
  s.pc = pc;
  dl_iterate_phdr(&find_module, &s);
  if (!s.found) return k_refused;
  Dwarf_CFI* cfi = module_cfi_for(s.bias, s.name);
  if (cfi == nullptr) return k_refused;
  Dwarf_Frame* frame = nullptr;
  if (g_dw.addrframe(cfi, pc - 1 - s.bias, &frame) != 0 || frame == nullptr) return k_refused;
  std::uint64_t rule = k_refused;
  bool signal = false;
  Dwarf_Op* ops = nullptr;
  std::size_t nops = 0;
  Dwarf_Op mem[3];
  std::int64_t ra_offset = 0, bp_offset = 0;
  const int ra_reg = g_dw.frame_info(frame, nullptr, nullptr, &signal);
  int base_reg = -1;
  std::int64_t cfa_off = 0;
  if (ra_reg == 16 && !signal && g_dw.frame_cfa(frame, &ops, &nops) == 0 && nops == 1)
    cfa_register(ops[0], &base_reg, &cfa_off);
  if (base_reg == 6 || base_reg == 7) { // rbp, rsp
    const bool rbp_base = base_reg == 6;
    if (g_dw.frame_register(frame, 16, mem, &ops, &nops) == 0) {
      if (nops == 0 && ops == mem) {
        rule = k_outermost; // the return address is undefined: nothing called this frame
      } else if (cfa_offset(ops, nops, &ra_offset) && ra_offset == -8 && cfa_off > 0 &&
                 cfa_off < (std::int64_t{1} << 30) &&
                 g_dw.frame_register(frame, 6, mem, &ops, &nops) == 0) {
        if (nops == 0) {
          rule = pack(k_step, rbp_base, ops == nullptr ? k_bp_same : k_bp_undefined,
                      static_cast<std::int32_t>(cfa_off), 0);
        } else if (cfa_offset(ops, nops, &bp_offset) && bp_offset < 0 && bp_offset >= -32768 &&
                   bp_offset % 8 == 0) {
          rule = pack(k_step, rbp_base, k_bp_saved, static_cast<std::int32_t>(cfa_off),
                      static_cast<std::int16_t>(bp_offset));
        }
      }
    }
  }
  std::free(frame);
  return rule;
}

__attribute__((noinline)) std::uint64_t learn(std::uintptr_t pc) noexcept {
  slot* table = g_table.load(std::memory_order_acquire);
  std::lock_guard lock(g_mu);
  if (const std::uint64_t known = lookup(table, pc)) return known;
  std::uint64_t rule = k_refused;
  try {
    rule = compute_rule(pc);
  } catch (...) { // no memory for a module entry
  }
  ++(rule == k_refused ? g_counts.refused : g_counts.learned);
  insert(table, pc, rule);
  return rule;
}

// The rule for `pc` from the shared table (learned if new).
inline __attribute__((always_inline)) std::uint64_t shared_rule(const slot* table,
                                                                std::uintptr_t pc) noexcept {
  const std::uint64_t rule = lookup(table, pc);
  return rule != 0 ? rule : learn(pc);
}

// The rule for `pc`: the thread's copy, else the shared table's, copied.
inline __attribute__((always_inline)) std::uint64_t rule_for(thread_rules& mine, const slot* table,
                                                             std::uintptr_t pc) noexcept {
  thread_rules::entry& e = mine.entries[(pc * 0x9E3779B97F4A7C15ull) >> (64 - k_thread_rule_bits)];
  if (e.pc == pc) return e.rule;
  e = {pc, shared_rule(table, pc)};
  return e.rule;
}

bool load_libdw() {
  static const char* const k_deps[] = {"libelf.so.1", "liblzma.so.5", "libbz2.so.1.0"};
  void* dw = open_bundled_library("libdw.so.1", k_deps, std::size(k_deps));
  void* elf = dw ? open_bundled_library("libelf.so.1", nullptr, 0) : nullptr;
  if (dw == nullptr || elf == nullptr) return false;
  auto sym = [](void* h, const char* name, auto& out) {
    out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(dlsym(h, name));
    return out != nullptr;
  };
  libdw_api a{};
  if (!sym(elf, "elf_version", a.version) || !sym(elf, "elf_begin", a.begin) ||
      !sym(elf, "elf_end", a.end) || !sym(dw, "dwarf_getcfi_elf", a.getcfi_elf) ||
      !sym(dw, "dwarf_cfi_end", a.cfi_end) || !sym(dw, "dwarf_cfi_addrframe", a.addrframe) ||
      !sym(dw, "dwarf_frame_info", a.frame_info) || !sym(dw, "dwarf_frame_cfa", a.frame_cfa) ||
      !sym(dw, "dwarf_frame_register", a.frame_register))
    return false;
  if (a.version(EV_CURRENT) == EV_NONE) return false;
  g_dw = a;
  return true;
}

} // namespace

bool cfi_unwind_init() noexcept {
#if !defined(__x86_64__)
  return false; // the rules replayed here are x86-64's (rsp, rbp, return address at CFA - 8)
#endif
  std::lock_guard lock(g_mu);
  if (g_table.load() != nullptr) return true;
  try {
    if (!load_libdw()) return false;
    g_modules = new std::vector<module_cfi>();
    g_subs_seen = module_loads_now().subs;
    g_table.store(new slot[k_table_size], std::memory_order_release);
  } catch (...) {
    return false;
  }
  return true;
}

// Reads only the thread's own stack, between frames: ASan's view of those bytes (return
// addresses, saved registers) is not the program's objects.
__attribute__((noinline, no_sanitize_address)) int cfi_backtrace(std::uintptr_t* ips,
                                                                 unsigned max) noexcept {
  const slot* table = g_table.load(std::memory_order_acquire);
  if (table == nullptr) return -1;
  stack_bounds& st = t_stack;
  if (!st.tried) find_stack(st);
  // This function keeps a frame pointer (__builtin_frame_address): its saved rbp and return
  // address give the caller's registers exactly.
  const auto* fp = static_cast<const std::uintptr_t*>(__builtin_frame_address(0));
  std::uintptr_t sp = reinterpret_cast<std::uintptr_t>(fp + 2);
  if (sp <= st.lo || sp > st.hi) return -1; // another stack (sigaltstack, a coroutine)
  std::uintptr_t ip = fp[1];
  std::uintptr_t bp = fp[0];
  thread_rules* mine = t_rules;
  if (mine == nullptr) mine = new_thread_rules(); // null still: no memory, no copies
  if (const std::uint64_t generation = g_generation.load(std::memory_order_acquire);
      mine != nullptr && mine->generation != generation) {
    std::memset(static_cast<void*>(mine), 0, sizeof *mine); // no 8.5 KiB temporary on the stack
    mine->generation = generation;
  }
  unsigned n = 0;
  while (n < max && ip != 0) {
    ips[n++] = ip;
    if (n == max) break;
    std::uint64_t rule;
    if (mine == nullptr) {
      rule = shared_rule(table, ip);
    } else if (n <= k_last_walk_depth) {
      thread_rules::entry& last = mine->last_walk[n - 1];
      if (last.pc != ip) last = {ip, rule_for(*mine, table, ip)};
      rule = last.rule;
    } else {
      rule = rule_for(*mine, table, ip);
    }
    const std::uint64_t kind = rule & 3;
    if (kind == k_outermost) break;
    if (kind != k_step) return -1;
    const std::uintptr_t base = (rule & 4) != 0 ? bp : sp;
    const std::uintptr_t cfa = base + static_cast<std::int32_t>(rule >> 32);
    if (cfa <= sp || cfa > st.hi || (cfa & 7) != 0) return -1;
    const std::uintptr_t ra = *reinterpret_cast<const std::uintptr_t*>(cfa - 8);
    switch ((rule >> 3) & 3) {
    case k_bp_saved: {
      const std::uintptr_t at = cfa + static_cast<std::int16_t>(rule >> 16);
      if (at < sp) return -1; // offsets are negative and multiples of 8: at + 8 <= cfa
      bp = *reinterpret_cast<const std::uintptr_t*>(at);
      break;
    }
    case k_bp_undefined:
      bp = 0;
      break;
    default:
      break;
    }
    sp = cfa;
    ip = ra;
  }
  return static_cast<int>(n);
}

void cfi_unwind_modules_changed() noexcept {
  slot* table = g_table.load(std::memory_order_acquire);
  if (table == nullptr) return;
  const unsigned long long subs = module_loads_now().subs;
  std::lock_guard lock(g_mu);
  if (subs == g_subs_seen) return; // only loads: every cached address still holds its code
  g_subs_seen = subs;
  for (std::uint64_t i = 0; i < k_table_size; ++i)
    table[i].key.store(0, std::memory_order_relaxed);
  g_generation.fetch_add(1, std::memory_order_acq_rel); // the threads' copies go too
  for (module_cfi& m : *g_modules) {
    if (m.cfi != nullptr) g_dw.cfi_end(m.cfi);
    if (m.elf != nullptr) g_dw.end(m.elf);
    if (m.fd >= 0) ::close(m.fd);
  }
  g_modules->clear();
  ++g_counts.resets;
}

cfi_unwind_counters cfi_unwind_stats() noexcept {
  std::lock_guard lock(g_mu);
  return g_counts;
}

} // namespace gmem::trace
