#include "profiler/trace_writer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/syscall.h>
#include <unistd.h>

#include "profiler/stack_capture.h"
#include "profiler/trace_clock.h"

extern char** environ;

namespace gmem::trace {

namespace l = layout;

namespace {

thread_local std::uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;
std::uint32_t thread_id() noexcept {
  if (t_tid == 0) t_tid = static_cast<std::uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

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

struct section_plan {
  std::uint64_t capacity;
  std::uint32_t record_bytes;
};

std::array<section_plan, l::k_section_count> plan(const writer_config& c) {
  std::array<section_plan, l::k_section_count> p{};
  p[l::k_counters] = {c.device_slots, k_stat_record_words * 8};
  p[l::k_live] = {c.live_slots, l::live_word::count * 8};
  p[l::k_segments] = {c.segment_slots, l::live_word::count * 8};
  p[l::k_events] = {c.events, l::event_word::count * 8};
  p[l::k_samples] = {c.samples, k_stat_record_words * 8};
  p[l::k_stack_slots] = {c.stack_slots, l::slot_word::count * 8};
  p[l::k_stack_ips] = {c.stack_ips, 8};
  p[l::k_string_slots] = {c.string_slots, l::slot_word::count * 8};
  p[l::k_string_bytes] = {c.string_bytes, 1};
  p[l::k_modules] = {c.module_slots, l::module_word::count * 8};
  return p;
}

std::uint64_t align64(std::uint64_t v) {
  return (v + 63) & ~std::uint64_t{63};
}

} // namespace

writer_config writer_config::normalized() const {
  writer_config c = *this;
  c.live_slots = pow2_at_least(live_slots, 64, std::uint64_t{1} << 28);
  c.segment_slots = pow2_at_least(segment_slots, 64, std::uint64_t{1} << 24);
  c.events = pow2_at_least(events, 64, std::uint64_t{1} << 28);
  c.samples = pow2_at_least(samples, 16, std::uint64_t{1} << 24);
  c.stack_slots = pow2_at_least(stack_slots, 64, std::uint64_t{1} << 24);
  c.stack_ips = align64(std::clamp<std::uint64_t>(stack_ips, 1024, std::uint64_t{1} << 31));
  c.string_slots = pow2_at_least(string_slots, 64, std::uint64_t{1} << 24);
  c.string_bytes = align64(std::clamp<std::uint64_t>(string_bytes, 4096, std::uint64_t{1} << 31));
  c.module_slots = std::clamp<std::uint64_t>(module_slots, 16, 65536);
  c.device_slots = std::clamp<std::uint32_t>(device_slots, 1, 1024);
  c.stack_depth = std::min(stack_depth, l::k_max_stack_depth);
  return c;
}

writer_config writer_config::halved() const {
  writer_config c = normalized();
  c.live_slots /= 2;
  c.events /= 2;
  c.stack_slots /= 2;
  c.stack_ips /= 2;
  c.samples /= 2;
  return c.normalized();
}

std::uint64_t writer_config::total_bytes() const {
  std::uint64_t total = l::k_header_bytes;
  for (const auto& s : plan(normalized()))
    total += align64(s.capacity * s.record_bytes);
  return total;
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
      if (std::strncmp(*e, "GMEM_", 5) == 0) who.options += std::string(*e) + "\n";
  } catch (...) { // identity stays partial; the trace is still usable
  }
  return who;
}

trace_writer::trace_writer(void* memory, const writer_config& config, const process_identity& who)
    : config_(config.normalized()), total_bytes_(config_.total_bytes()),
      header_(static_cast<l::header*>(memory)) {
  l::header& h = *header_;
  h.format_version = k_format_version;
  h.header_bytes = l::k_header_bytes;
  h.total_bytes = total_bytes_;
  h.pid = who.pid;
  h.stack_depth = config_.stack_depth;
  h.proc_start_ticks = who.proc_start_ticks;
  h.start_realtime_ns = who.start_realtime_ns;
  h.start_monotonic_ns = who.start_monotonic_ns;
  h.sample_interval_ns = config_.sample_interval_ns;
  h.stat_count = k_stat_count;
  h.stat_slots = k_stat_slots;
  h.section_count = l::k_section_count;
  std::uint64_t offset = l::k_header_bytes;
  const auto p = plan(config_);
  for (std::uint32_t i = 0; i < l::k_section_count; ++i) {
    h.sections[i] = {offset, p[i].capacity * p[i].record_bytes, p[i].capacity, p[i].record_bytes,
                     0};
    offset += align64(h.sections[i].bytes);
  }
  auto* base = reinterpret_cast<std::byte*>(header_);
  events_ = seq_ring(section_words(l::k_events), config_.events, l::event_word::count,
                     &h.event_head, &h.event_dropped);
  samples_ = seq_ring(section_words(l::k_samples), config_.samples, k_stat_record_words,
                      &h.sample_head, &h.sample_dropped);
  live_ = live_table(section_words(l::k_live), config_.live_slots, &h.live_overflow,
                     &h.unmatched_frees);
  segments_ = live_table(section_words(l::k_segments), config_.segment_slots, &h.segment_overflow,
                         &h.segment_unmatched);
  stacks_ = intern_table(section_words(l::k_stack_slots), config_.stack_slots,
                         base + h.sections[l::k_stack_ips].offset, config_.stack_ips * 8, 8,
                         &h.stack_count, &h.stack_overflow, &h.stack_ips_used);
  strings_ = intern_table(section_words(l::k_string_slots), config_.string_slots,
                          base + h.sections[l::k_string_bytes].offset, config_.string_bytes, 1,
                          &h.string_count, &h.string_overflow, &h.string_bytes_used);
  modules_ = module_table(section_words(l::k_modules), config_.module_slots, &h.module_count,
                          &h.module_overflow, &strings_);
  device_of_slot_.assign(config_.device_slots, 0);
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

std::uint64_t* trace_writer::section_words(l::section_id id) const noexcept {
  return reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::byte*>(header_) +
                                          header_->sections[id].offset);
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
  live_.insert(e);
  emit(event_type::alloc, device, kind, addr, requested, rounded, stream, stack, e.tick, e.thread);
}

void trace_writer::free(std::uintptr_t addr, int device, std::uintptr_t stream,
                        alloc_kind kind) noexcept {
  live_entry gone;
  live_.erase(addr, &gone);
  emit(event_type::free, device, kind, addr, gone.requested, gone.rounded, stream, 0);
}

void trace_writer::segment(bool mapped, std::uintptr_t base, std::size_t bytes,
                           int device) noexcept {
  if (mapped) {
    live_entry e;
    e.address = base;
    e.requested = e.rounded = bytes;
    e.tick = now_ticks();
    e.thread = thread_id();
    e.device = device;
    segments_.insert(e);
  } else {
    segments_.erase(base, nullptr);
  }
  emit(mapped ? event_type::segment_map : event_type::segment_unmap, device, alloc_kind::device,
       base, bytes, 0, 0, 0);
}

void trace_writer::fence(int device, std::uint64_t duration_ns,
                         std::size_t released_bytes) noexcept {
  emit(event_type::fence, device, alloc_kind::device, 0, released_bytes, duration_ns, 0, 0);
}

void trace_writer::trim(int device, std::size_t released_bytes) noexcept {
  emit(event_type::trim, device, alloc_kind::device, 0, released_bytes, 0, 0, 0);
}

void trace_writer::oom(int device, std::size_t requested, const pool_stats& at_failure) noexcept {
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
  return count == 0 ? 0 : stacks_.intern(ips, count);
}

std::uint32_t trace_writer::capture_stack(unsigned skip) noexcept {
  if (config_.stack_depth == 0) return 0;
  std::uintptr_t ips[l::k_max_stack_depth];
  const unsigned n = capture_ips(ips, config_.stack_depth, skip + 1);
  return intern_stack(ips, n);
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
  std::uint64_t* table = section_words(l::k_counters);
  for (std::size_t d = 0; d < n; ++d) {
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
  const std::uint64_t v = l::load_word(&h.clock_version);
  l::store_word(&h.clock_version, v + 1);
  l::store_release(&h.tick1, now_ticks());
  l::store_release(&h.mono1, monotonic_ns());
  l::store_release(&h.clock_version, v + 2);
  l::store_release(&h.heartbeat_realtime_ns, realtime_ns());
}

void trace_writer::mark_shutdown() noexcept {
  heartbeat();
  l::store_word(&header_->exit_realtime_ns, realtime_ns());
  __atomic_fetch_or(&header_->flags, l::k_flag_shutdown, __ATOMIC_RELEASE);
}

bool trace_writer::is_valid() const {
  return live_.is_valid() && segments_.is_valid() && stacks_.is_valid() && strings_.is_valid();
}

} // namespace gmem::trace
