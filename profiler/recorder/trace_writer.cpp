#include "profiler/recorder/trace_writer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/framework_env.h"
#include "profiler/format/trace_clock.h"
#include "profiler/recorder/per_thread.h"
#include "profiler/recorder/python_frames.h"
#include "profiler/recorder/stack_capture.h"
#include "profiler/recorder/stack_memo.h"

extern char** environ;

namespace gmem::trace {

namespace l = layout;

namespace {

thread_local std::uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;
std::uint32_t thread_id() noexcept {
  if (t_tid == 0) t_tid = static_cast<std::uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

// Writers of this process, numbered from 1 (stack_memo.h: ids are one writer's).
std::atomic<std::uint64_t> g_writer_serial{0};

std::uint64_t pow2_at_least(std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
  return std::bit_ceil(std::clamp(v, lo, hi));
}

constexpr const char* k_stat_names[] = {
#define GMEM_X_NAME(n, d) #n,
    GMEM_POOL_STATS(GMEM_X_NAME)
#undef GMEM_X_NAME
};
constexpr std::uint32_t k_stat_count = static_cast<std::uint32_t>(std::size(k_stat_names));
static_assert(k_stat_count <= l::k_max_stats);
constexpr std::uint32_t k_stat_slots = l::stat_slots_for(k_stat_count);
constexpr std::uint32_t k_stat_record_words = l::stat_word::values + k_stat_slots;

// First extents: a new trace is the header plus these (about 530 KiB with the defaults).
constexpr std::uint64_t k_first_live_slots = 256; // per shard
constexpr std::uint64_t k_first_segment_slots = 64;
constexpr std::uint64_t k_first_events = 512; // per lane
constexpr std::uint64_t k_first_samples = 64;
constexpr std::uint64_t k_first_stack_slots = 1024;
constexpr std::uint64_t k_first_stack_ips = 8192;
constexpr std::uint64_t k_first_string_slots = 256;
constexpr std::uint64_t k_first_string_bytes = 16384;

std::uint64_t align64(std::uint64_t v) {
  return (v + 63) & ~std::uint64_t{63};
}

std::uint64_t per_shard(std::uint64_t slots, std::uint32_t shards) {
  return std::bit_ceil(std::max<std::uint64_t>(slots / shards, 16));
}

// Event lanes: each up to all of `events`, from a first chunk small enough that a short run
// stays small and large enough that the chunk directory covers the lane; lane 0 (threads
// beyond the lanes) an eighth of it, outside the lanes' budget.
std::uint64_t first_event_chunk(std::uint64_t events) {
  return std::min(events, std::max(k_first_events, events >> (l::k_max_extents - 2)));
}
std::uint64_t shared_lane_capacity(std::uint64_t events) {
  return std::max(events / 8, first_event_chunk(events));
}

} // namespace

writer_config writer_config::normalized() const {
  writer_config c = *this;
  c.live_slots = pow2_at_least(live_slots, 64, std::uint64_t{1} << 28);
  c.live_shards = std::clamp<std::uint32_t>(
      live_shards, 1, static_cast<std::uint32_t>(std::min<std::uint64_t>(c.live_slots / 16, 24)));
  c.segment_slots = pow2_at_least(segment_slots, 64, std::uint64_t{1} << 24);
  c.events = pow2_at_least(events, 64, std::uint64_t{1} << 28);
  c.event_lanes = std::clamp<std::uint32_t>(event_lanes, 1, l::lane_word::k_max_lanes);
  c.samples = pow2_at_least(samples, 16, l::k_max_samples);
  c.stack_slots = pow2_at_least(stack_slots, 64, std::uint64_t{1} << 24);
  c.stack_ips = std::clamp<std::uint64_t>(stack_ips, 1024, std::uint64_t{1} << 31);
  c.string_slots = pow2_at_least(string_slots, 64, std::uint64_t{1} << 24);
  c.string_bytes = std::clamp<std::uint64_t>(string_bytes, 4096, std::uint64_t{1} << 31);
  c.module_slots = std::clamp<std::uint64_t>(module_slots, 16, 65536);
  c.device_slots = std::clamp<std::uint32_t>(device_slots, 1, l::k_max_device_slots);
  c.stack_depth = std::min(stack_depth, l::k_max_stack_depth);
  c.python_depth = std::min(python_depth, l::k_max_python_depth);
  return c;
}

std::uint64_t writer_config::map_bytes() const {
  const writer_config c = normalized();
  // Shards: the table in use, the one being filled by a rehash and retired ones kept for
  // reuse (each smaller than the next) stay under three times the largest table.
  std::uint64_t bytes = l::k_header_bytes + 64 * 16 * l::k_max_extents;
  bytes += align64(std::uint64_t{c.device_slots} * k_stat_record_words * 8);
  bytes += align64(c.module_slots * l::module_word::count * 8);
  bytes += 3 * c.live_shards * per_shard(c.live_slots, c.live_shards) * l::live_word::count * 8;
  bytes += 3 * c.segment_slots * l::live_word::count * 8;
  bytes += (c.events + shared_lane_capacity(c.events)) * l::event_word::count * 8 +
           align64(std::uint64_t{c.event_lanes} * l::lane_word::count * 8);
  bytes += c.samples * k_stat_record_words * 8;
  bytes += 2 * c.stack_slots * l::slot_word::count * 8 + c.stack_ips * 8;
  bytes += 2 * c.string_slots * l::slot_word::count * 8 + c.string_bytes;
  return (bytes + (std::uint64_t{1} << 20) - 1) & ~((std::uint64_t{1} << 20) - 1);
}

process_identity process_identity::current() {
  process_identity who;
  who.pid = static_cast<std::uint32_t>(getpid());
  who.start_realtime_ns = realtime_ns();
  who.start_monotonic_ns = monotonic_ns();
  try {
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren != std::string::npos) { // fields after "(comm)": state is field 3, starttime 22
      std::size_t pos = paren + 2;
      for (int field = 3; field < 22 && pos < text.size(); ++field) {
        pos = text.find(' ', pos);
        if (pos == std::string::npos) break;
        ++pos;
      }
      if (pos < text.size()) who.proc_start_ticks = std::stoull(text.substr(pos));
    }
    std::ifstream cmd("/proc/self/cmdline");
    std::string arg;
    while (std::getline(cmd, arg, '\0'))
      who.argv.push_back(arg);
    for (char** e = environ; e && *e; ++e)
      if (std::strncmp(*e, "GMEM_", 5) == 0 || gmem::is_recorded_framework_variable(*e))
        who.options += std::string(*e) + "\n";
  } catch (...) { // identity stays partial; the trace is still usable
  }
  return who;
}

trace_writer::trace_writer(void* memory, std::uint64_t map_bytes, const writer_config& config,
                           const process_identity& who, trace_backing* backing)
    : serial_(g_writer_serial.fetch_add(1, std::memory_order_relaxed) + 1),
      config_(config.normalized()), header_(static_cast<l::header*>(memory)),
      space_(static_cast<std::byte*>(memory), map_bytes, l::k_header_bytes, &header_->total_bytes,
             &header_->growth_refused, &header_->flags, backing) {
  l::header& h = *header_;
  h.format_version = k_format_version;
  h.header_bytes = l::k_header_bytes;
  h.limit_bytes = map_bytes;
  h.pid = who.pid;
  h.stack_depth = config_.stack_depth;
  h.python_depth = config_.python_depth;
  h.proc_start_ticks = who.proc_start_ticks;
  h.start_realtime_ns = who.start_realtime_ns;
  h.start_monotonic_ns = who.start_monotonic_ns;
  h.sample_interval_ns = config_.sample_interval_ns;
  h.stat_count = k_stat_count;
  h.stat_slots = k_stat_slots;
  h.section_count = l::k_section_count;
  const writer_config& c = config_;
  // Strings first: the header's names refer to them.
  ok_ = strings_.open(&space_, &h, l::k_string_slots, l::k_string_bytes, 1, k_first_string_slots,
                      c.string_slots, k_first_string_bytes, c.string_bytes, &h.string_count,
                      &h.string_overflow, &h.string_bytes_used) &&
        stacks_.open(&space_, &h, l::k_stack_slots, l::k_stack_ips, 8, k_first_stack_slots,
                     c.stack_slots, k_first_stack_ips, c.stack_ips, &h.stack_count,
                     &h.stack_overflow, &h.stack_ips_used) &&
        events_.open(&space_, &h, c.event_lanes, c.events, shared_lane_capacity(c.events),
                     first_event_chunk(c.events), c.events) &&
        samples_.open(&space_, &h, l::k_samples, c.samples, k_first_samples, k_stat_record_words,
                      &h.sample_head, &h.sample_dropped) &&
        live_.open(&space_, &h, l::k_live, c.live_shards, k_first_live_slots,
                   per_shard(c.live_slots, c.live_shards), &h.live_overflow, &h.unmatched_frees) &&
        segments_.open(&space_, &h, l::k_segments, 1, k_first_segment_slots, c.segment_slots,
                       &h.segment_overflow, &h.segment_unmatched);
  // Fixed sections.
  const std::uint64_t counters =
      ok_ ? space_.allocate(c.device_slots * k_stat_record_words * 8) : 0;
  const std::uint64_t modules =
      counters ? space_.allocate(c.module_slots * l::module_word::count * 8) : 0;
  ok_ = ok_ && counters != 0 && modules != 0;
  if (!ok_) return; // no magic: readers see "header not written yet"
  h.sections[l::k_counters] = {c.device_slots, k_stat_record_words * 8, 1, 0, 0};
  h.extents[l::k_counters][0] = {counters, c.device_slots};
  h.sections[l::k_modules] = {c.module_slots, l::module_word::count * 8, 1, 0, 0};
  h.extents[l::k_modules][0] = {modules, c.module_slots};
  counters_ = space_.words(counters);
  modules_ = module_table(space_.words(modules), c.module_slots, &h.module_count,
                          &h.module_overflow, &strings_);
  device_of_slot_.assign(c.device_slots, 0);
  for (std::uint32_t i = 0; i < k_stat_count; ++i)
    h.stat_names[i] = intern_string(k_stat_names[i]);
  std::string argv;
  for (const auto& a : who.argv)
    argv.append(a).push_back('\0');
  h.cmdline_string = intern_string(argv);
  h.options_string = intern_string(who.options);
  // Clock calibration: a second point ~200 us later; heartbeat() keeps refining it.
  h.tick0 = now_ticks();
  h.mono0 = monotonic_ns();
  while (monotonic_ns() - h.mono0 < 200'000)
    l::cpu_relax();
  h.tick1 = now_ticks();
  h.mono1 = monotonic_ns();
  h.heartbeat_realtime_ns = realtime_ns();
  std::uint64_t magic;
  std::memcpy(&magic, l::k_magic, sizeof magic);
  l::store_release(reinterpret_cast<std::uint64_t*>(h.magic), magic); // last: header complete
}

std::uint64_t trace_writer::total_bytes() const noexcept {
  return l::load_acquire(&header_->total_bytes);
}

void trace_writer::emit(event_type type, int device, alloc_kind kind, std::uintptr_t address,
                        std::uint64_t size, std::uint64_t size2, std::uintptr_t stream,
                        std::uint32_t ref) noexcept {
  emit(type, device, kind, address, size, size2, stream, ref, now_ticks(), thread_id());
}

void trace_writer::emit(event_type type, int device, alloc_kind kind, std::uintptr_t address,
                        std::uint64_t size, std::uint64_t size2, std::uintptr_t stream,
                        std::uint32_t ref, std::uint64_t tick, std::uint32_t thread) noexcept {
  namespace ew = l::event_word;
  std::uint64_t w[ew::count];
  w[ew::state] = 0;
  w[ew::tick] = tick;
  w[ew::address] = address;
  w[ew::size] = size;
  w[ew::size2] = size2;
  w[ew::stream] = stream;
  w[ew::thread_ref] = thread | static_cast<std::uint64_t>(ref) << 32;
  w[ew::device_type] = static_cast<std::uint32_t>(device) | static_cast<std::uint64_t>(type) << 32 |
                       static_cast<std::uint64_t>(kind) << 40;
  events_.append(w);
}

void trace_writer::alloc(std::uintptr_t addr, std::size_t requested, std::size_t rounded,
                         int device, std::uintptr_t stream, alloc_kind kind,
                         std::uint32_t stack) noexcept {
  live_entry e;
  e.address = addr;
  e.requested = requested;
  e.rounded = rounded;
  e.stream = stream;
  e.tick = now_ticks(); // one stamp and one thread id for the slot and the event
  e.thread = thread_id();
  e.stack_id = stack;
  e.device = device;
  e.kind = kind;
  live_.insert(e, live_key(addr, kind));
  emit(event_type::alloc, device, kind, addr, requested, rounded, stream, stack, e.tick, e.thread);
}

void trace_writer::free(std::uintptr_t addr, int device, std::uintptr_t stream,
                        alloc_kind kind) noexcept {
  events_.prefetch(); // the free event's line, loaded while the slot is erased
  live_entry gone;
  // After the program's code ended (Python's shutdown), a free releases what the program still
  // held: the slot stays, marked, so the exit report names it (live_table::hold).
  if (config_.python_depth > 0 && python_program_ended())
    live_.hold(live_key(addr, kind), &gone);
  else
    live_.erase(live_key(addr, kind), &gone);
  emit(event_type::free, device, kind, addr, gone.requested, gone.rounded, stream, 0);
}

void trace_writer::segment(bool mapped, std::uintptr_t base, std::size_t bytes, int device,
                           bool stitched) noexcept {
  const std::uint64_t flags = stitched ? k_segment_stitched : 0;
  if (mapped) {
    live_entry e;
    e.address = base;
    e.requested = e.rounded = bytes;
    e.stream = flags; // a segment's stream word holds its flags
    e.tick = now_ticks();
    e.thread = thread_id();
    e.device = device;
    segments_.insert(e);
  } else {
    segments_.erase(base, nullptr);
  }
  emit(mapped ? event_type::segment_map : event_type::segment_unmap, device, alloc_kind::device,
       base, bytes, flags, 0, 0);
}

void trace_writer::fence(int device, std::uint64_t duration_ns,
                         std::size_t released_bytes) noexcept {
  emit(event_type::fence, device, alloc_kind::device, 0, released_bytes, duration_ns, 0, 0);
}

void trace_writer::trim(int device, std::size_t released_bytes) noexcept {
  emit(event_type::trim, device, alloc_kind::device, 0, released_bytes, 0, 0, 0);
}

void trace_writer::oom(int device, std::size_t requested, const pool_stats& at_failure) noexcept {
  if (!l::valid_device(device)) return; // readers would refuse the trace
  std::uint64_t w[k_stat_record_words];
  write_stat_record(w, 0, device, sample_reason::oom, at_failure);
  const std::uint64_t seq = samples_.append(w);
  emit(event_type::oom, device, alloc_kind::device, 0, requested, seq, 0, 0);
}

void trace_writer::marker(std::string_view label) noexcept {
  emit(event_type::marker, 0, alloc_kind::device, 0, 0, 0, 0, intern_string(label));
}

void trace_writer::option(std::string_view name, std::string_view value) noexcept {
  char buf[1024];
  const std::size_t n = std::min(name.size(), sizeof buf / 2);
  const std::size_t m = std::min(value.size(), sizeof buf - n - 1);
  std::memcpy(buf, name.data(), n);
  buf[n] = '=';
  std::memcpy(buf + n + 1, value.data(), m);
  emit(event_type::option, 0, alloc_kind::device, 0, 0, 0, 0,
       intern_string(std::string_view(buf, n + 1 + m)));
}

std::uint32_t trace_writer::intern_stack(const std::uintptr_t* ips, unsigned count) noexcept {
  if (count == 0) return 0;
  stack_memo* memo = per_thread<stack_memo>::get(); // nullptr: no memory; intern every time
  if (memo != nullptr)
    if (const std::uint32_t id = memo->find_last(serial_, ips, count)) return id;
  const std::uint64_t hash = hash_bytes(ips, std::size_t{count} * sizeof *ips);
  if (memo != nullptr)
    if (const std::uint32_t id = memo->find(serial_, hash, ips, count)) return id;
  const std::uint32_t id = stacks_.intern(ips, count, hash);
  if (memo != nullptr) memo->store(serial_, hash, ips, count, id);
  return id;
}

std::uint32_t trace_writer::capture_stack(unsigned skip) noexcept {
  events_.prefetch(); // the alloc event's line, loaded while the stack is walked
  if (config_.stack_depth == 0 && config_.python_depth == 0) return 0;
  std::uintptr_t ips[l::k_max_stack_depth + l::k_max_python_depth + 1];
  unsigned n = capture_ips(ips, config_.stack_depth, skip + 1);
  if (config_.python_depth > 0) {
    static_assert(sizeof(std::uintptr_t) == sizeof(std::uint64_t));
    unsigned py = 0;
    const python_capture got = capture_python(
        reinterpret_cast<std::uint64_t*>(ips + n), config_.python_depth, &py,
        [](void* self, std::string_view text) noexcept {
          return static_cast<trace_writer*>(self)->intern_string(text);
        },
        this);
    n += py;
    unsigned lent = 0;
    if (__builtin_expect(process_waiting_frames().any(), 0) && got != python_capture::finalizing)
      lent = append_lent(reinterpret_cast<std::uint64_t*>(ips + n), config_.python_depth - py);
    n += lent;
    if (lent == 0 && (got == python_capture::no_gil || got == python_capture::finalizing))
      ips[n++] =
          l::python_word::note(got == python_capture::no_gil ? l::python_word::k_note_no_gil
                                                             : l::python_word::k_note_finalizing);
  }
  return intern_stack(ips, n);
}

unsigned trace_writer::append_lent(std::uint64_t* out, unsigned room) noexcept {
  if (room == 0 || !is_worker_thread(wait_kind::backward)) return 0;
  const waiting_frames::lent got = process_waiting_frames().lend(out + 1, room, this);
  if (got.words == 0) return 0;
  out[0] = l::python_word::lent_note(got.waiting);
  return got.words + 1;
}

std::uint32_t trace_writer::wait_begin(wait_kind kind, unsigned skip) noexcept {
  if (config_.python_depth == 0) return 0;
  std::uint64_t words[l::k_max_python_depth + 8];
  const unsigned want = std::min<unsigned>(config_.python_depth + skip, std::size(words));
  unsigned got = 0;
  (void)capture_python(
      words, want, &got,
      [](void* self, std::string_view text) noexcept {
        return static_cast<trace_writer*>(self)->intern_string(text);
      },
      this);
  if (got <= skip) return 0;
  unsigned n = std::min(got - skip, config_.python_depth);
  std::memmove(words, words + skip, n * sizeof *words);
  // A worker thread waiting in a reentrant backward(): what was lent to it is its caller too
  // (without the note: the whole is one waiter's stack, and the worker's allocations mark it).
  if (process_waiting_frames().any() && n < config_.python_depth &&
      is_worker_thread(wait_kind::backward))
    n += process_waiting_frames().lend(words + n, config_.python_depth - n, this).words;
  return process_waiting_frames().begin(kind, words, n, this);
}

void trace_writer::wait_end(std::uint32_t token) noexcept {
  process_waiting_frames().end(token);
}

std::uint32_t trace_writer::intern_string(std::string_view text) noexcept {
  if (text.empty()) return 0;
  return strings_.intern(text.data(), std::min<std::size_t>(text.size(), l::k_max_string_bytes));
}

void trace_writer::update_modules(const std::vector<module_info>& now) noexcept {
  std::lock_guard lock(mu_);
  modules_.update(now);
}

std::uint64_t trace_writer::write_stat_record(std::uint64_t* record, std::uint64_t state,
                                              int device, sample_reason reason,
                                              const pool_stats& stats) noexcept {
  namespace sw = l::stat_word;
  std::uint64_t w[k_stat_record_words] = {};
  w[sw::state] = state;
  w[sw::tick] = now_ticks();
  w[sw::device_reason] = static_cast<std::uint32_t>(device) | static_cast<std::uint64_t>(reason)
                                                                  << 32;
  w[sw::seq] = sample_updates_.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint32_t i = sw::values;
#define GMEM_X_VALUE(n, d) w[i++] = stats.n;
  GMEM_POOL_STATS(GMEM_X_VALUE)
#undef GMEM_X_VALUE
  for (std::uint32_t k = 1; k < k_stat_record_words; ++k)
    l::store_word(record + k, w[k]);
  return w[sw::tick];
}

void trace_writer::sample(const device_stats* stats, std::size_t n, sample_reason reason) noexcept {
  std::lock_guard lock(mu_);
  std::uint64_t* table = counters_;
  for (std::size_t d = 0; d < n; ++d) {
    if (!l::valid_device(stats[d].device)) continue; // readers would refuse the trace
    std::uint64_t w[k_stat_record_words];
    write_stat_record(w, 0, stats[d].device, reason, stats[d].stats);
    samples_.append(w);
    // The per-device counters table: one seqlocked record per device, found by device id.
    std::uint64_t slot = config_.device_slots;
    for (std::uint64_t s = 0; s < config_.device_slots && slot == config_.device_slots; ++s) {
      const std::uint64_t v = l::load_word(table + s * k_stat_record_words);
      if (v == 0 || device_of_slot_[s] == stats[d].device) slot = s;
    }
    if (slot == config_.device_slots) continue; // more devices than slots
    device_of_slot_[slot] = stats[d].device;
    std::uint64_t* r = table + slot * k_stat_record_words;
    const std::uint64_t v = l::load_word(r);
    l::store_word(r, v + 1); // odd; write_stat_record's release stores follow it
    write_stat_record(r, 0, stats[d].device, reason, stats[d].stats);
    l::store_release(r, v + 2);
  }
}

void trace_writer::heartbeat() noexcept {
  l::header& h = *header_;
  l::store_word(&h.live_count, live_.live_count());
  l::store_word(&h.segment_count, segments_.live_count());
  const std::uint64_t v = l::load_word(&h.clock_version);
  l::store_word(&h.clock_version, v + 1);
  l::store_release(&h.tick1, now_ticks());
  l::store_release(&h.mono1, monotonic_ns());
  l::store_release(&h.clock_version, v + 2);
  l::store_release(&h.heartbeat_realtime_ns, realtime_ns());
}

void trace_writer::mark_shutdown() noexcept {
  heartbeat();
  l::store_word(&header_->exit_live_count, live_.live_count());
  l::store_word(&header_->exit_realtime_ns, realtime_ns());
  __atomic_fetch_or(&header_->flags, l::k_flag_shutdown, __ATOMIC_RELEASE);
  space_.trim(); // a chunk announced and never reached: not left in /dev/shm
}

void trace_writer::mark_observed(observed_framework framework, bool observed) noexcept {
  const std::uint64_t bit = std::uint64_t{1}
                            << (l::k_flag_observed_shift + static_cast<unsigned>(framework));
  if (observed)
    __atomic_fetch_or(&header_->flags, bit, __ATOMIC_RELEASE);
  else
    __atomic_fetch_and(&header_->flags, ~bit, __ATOMIC_RELEASE);
}

observe_cost trace_writer::observed_cost() const noexcept {
  const event_lanes::observed_totals sum = events_.observed();
  const l::header& h = *header_;
  const std::uint64_t tick0 = l::load_word(&h.tick0), mono0 = l::load_word(&h.mono0);
  const std::uint64_t tick1 = l::load_word(&h.tick1), mono1 = l::load_word(&h.mono1);
  auto ns = [&](std::uint64_t ticks) {
    return ticks_to_monotonic_ns(tick0 + ticks, tick0, mono0, tick1, mono1) - mono0;
  };
  return {sum.allocs, ns(sum.alloc_ticks), sum.frees, ns(sum.free_ticks)};
}

bool trace_writer::is_valid() const {
  return live_.is_valid() && segments_.is_valid() && stacks_.is_valid() && strings_.is_valid();
}

} // namespace gmem::trace
