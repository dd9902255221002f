// Decoding a trace image into the model. Layer one of three (bytes -> records); analysis and
// printing live in tools/. Every check names the byte offset it is about.
#include "profiler/reader/trace_reader.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>

#include "profiler/format/intern_table.h"
#include "profiler/format/live_table.h"
#include "profiler/format/module_map.h"
#include "profiler/format/seq_ring.h"
#include "profiler/format/trace_clock.h"
#include "profiler/format/trace_layout.h"

namespace gmem::trace {

namespace l = layout;

std::string read_error::to_string() const {
  return "byte " + std::to_string(offset) + ": " + message;
}

const char* to_string(trace_state state) noexcept {
  switch (state) {
  case trace_state::running:
    return "running";
  case trace_state::exited:
    return "exited";
  case trace_state::crashed:
    return "crashed";
  }
  return "unknown";
}

namespace {

namespace pw = l::python_word;

constexpr const char* k_stat_names[] = {
#define GMEM_X_NAME(n, d) #n,
    GMEM_POOL_STATS(GMEM_X_NAME)
#undef GMEM_X_NAME
};
constexpr std::size_t k_known_stats = std::size(k_stat_names);
constexpr std::size_t k_max_label_bytes = 256;  // marker and option labels in the model
constexpr std::size_t k_max_python_text = 4096; // a Python file name or function name

struct failure {
  std::uint64_t offset;
  std::string message;
};

class decoder {
public:
  decoder(const std::byte* base, std::uint64_t size, const read_options& options)
      : base_(base), size_(size), options_(options) {}

  std::optional<failure> run(trace& t);

private:
  const std::uint64_t* words(std::uint64_t offset) const {
    return reinterpret_cast<const std::uint64_t*>(base_ + offset);
  }
  std::uint32_t u32(std::uint64_t offset) const {
    std::uint32_t v;
    std::memcpy(&v, base_ + offset, 4);
    return v;
  }
  std::uint64_t u64(std::uint64_t offset) const { return l::load_word(words(offset)); }
  std::uint64_t hdr_word(std::size_t field_offset) const { return u64(field_offset); }

  std::optional<failure> check_header();
  std::optional<failure> check_sections();
  // A duration in ticks as ns (saturating: the words are the writer's, never trusted).
  std::uint64_t ticks_as_ns(std::uint64_t ticks) const {
    const std::uint64_t from = ticks_to_monotonic_ns(tick0_, tick0_, mono0_, tick1_, mono1_);
    const std::uint64_t to = ticks_to_monotonic_ns(tick0_ + std::min(ticks, std::uint64_t{1} << 62),
                                                   tick0_, mono0_, tick1_, mono1_);
    return to > from ? to - from : 0;
  }
  void read_observe_cost(trace& t) const;
  std::uint64_t to_ns(std::uint64_t tick) const {
    const std::uint64_t mono = ticks_to_monotonic_ns(tick, tick0_, mono0_, tick1_, mono1_);
    return mono > start_mono_ ? mono - start_mono_ : 0;
  }
  // At most `max` bytes: labels and paths are copied once per record that names them, so a
  // hostile trace whose records all name one huge string must not multiply it.
  std::string string_of(std::uint32_t id, std::size_t max = l::k_max_string_bytes) const {
    auto it = strings_.find(id);
    return it == strings_.end() ? std::string() : it->second.substr(0, max);
  }
  // "file\0function" strings named by Python frames, decoded once each.
  void add_location(trace& t, std::uint32_t id) const {
    if (t.python_locations.count(id) != 0) return;
    auto it = strings_.find(id);
    if (it == strings_.end()) return;
    const std::string& s = it->second;
    const auto nul = s.find('\0');
    python_location loc;
    loc.file = s.substr(0, std::min<std::size_t>(nul, k_max_python_text));
    loc.function = nul == std::string::npos ? "?" : s.substr(nul + 1, k_max_python_text);
    t.python_locations.emplace(id, std::move(loc));
  }
  std::optional<failure> read_counters(trace& t);
  std::optional<failure> read_live(trace& t);
  std::optional<failure> read_events(trace& t);
  std::optional<failure> read_event_ring(trace& t);
  // One event record: not there (lapped, torn, dropped), decoded, or malformed.
  struct event_read {
    enum { absent, decoded, malformed } what = absent;
    event value;
    failure problem;
  };
  event_read read_event_record(const ring_view& ring, std::uint64_t seq, const trace& t);
  std::optional<failure> read_samples(trace& t);
  void read_stat_values(const std::uint64_t* w, pool_stats& out,
                        std::vector<std::pair<std::string, std::uint64_t>>* unknown) const;

  const std::byte* base_;
  std::uint64_t size_;
  read_options options_;
  l::section sections_[l::k_section_count] = {};
  const l::extent* dirs_[l::k_section_count] = {};
  std::uint64_t fixed_[l::k_section_count] = {}; // offsets of the fixed sections' extents
  std::uint32_t stat_count_ = 0, stat_slots_ = 0;
  std::vector<int> stat_field_; // writer's stat index -> our field index, -1 unknown
  std::vector<std::string> stat_name_;
  std::unordered_map<std::uint32_t, std::string> strings_;
  std::uint32_t version_ = 0;
  std::uint64_t tick0_ = 0, mono0_ = 0, tick1_ = 0, mono1_ = 0, start_mono_ = 0;
  std::uint32_t lane_count_ = 0; // format 4: event lanes
  std::uint64_t tick_ = 0;       // the raw stamp of the last event record decoded
};

std::optional<failure> decoder::check_header() {
  if (size_ < l::k_header_bytes)
    return failure{size_, "trace is " + std::to_string(size_) + " bytes, shorter than its " +
                              std::to_string(l::k_header_bytes) + "-byte header"};
  static constexpr char k_zero[8] = {};
  if (std::memcmp(base_, k_zero, 8) == 0)
    return failure{0, "trace header not written yet (the writer is starting, or died while "
                      "starting)"};
  if (std::memcmp(base_, l::k_magic, 8) != 0) return failure{0, "not a gmem trace (bad magic)"};
  const std::uint32_t version = u32(offsetof(l::header, format_version));
  if (version < k_oldest_format_version || version > k_format_version)
    return failure{offsetof(l::header, format_version),
                   "trace format version " + std::to_string(version) +
                       ", this gmem reads versions " + std::to_string(k_oldest_format_version) +
                       " to " + std::to_string(k_format_version)};
  version_ = version;
  if (u32(offsetof(l::header, header_bytes)) != l::k_header_bytes)
    return failure{offsetof(l::header, header_bytes),
                   "header size is not " + std::to_string(l::k_header_bytes)};
  const std::uint64_t total = l::load_acquire(words(offsetof(l::header, total_bytes)));
  if (total < l::k_header_bytes)
    return failure{offsetof(l::header, total_bytes), "header says the trace is " +
                                                         std::to_string(total) +
                                                         " bytes, less than its header"};
  if (total > size_)
    return failure{offsetof(l::header, total_bytes),
                   "header says the trace is " + std::to_string(total) + " bytes, but only " +
                       std::to_string(size_) + " are there (truncated?)"};
  size_ = total; // never look past the writer's end
  if (u32(offsetof(l::header, section_count)) != l::k_section_count)
    return failure{offsetof(l::header, section_count), "section count is not 10"};
  stat_count_ = u32(offsetof(l::header, stat_count));
  stat_slots_ = u32(offsetof(l::header, stat_slots));
  if (stat_count_ > l::k_max_stats || stat_slots_ < stat_count_ || stat_slots_ > 1024)
    return failure{offsetof(l::header, stat_count), "stat count " + std::to_string(stat_count_) +
                                                        " / slots " + std::to_string(stat_slots_) +
                                                        " out of range"};
  return std::nullopt;
}

std::optional<failure> decoder::check_sections() {
  const std::uint32_t stat_record = (l::stat_word::values + stat_slots_) * 8;
  const std::uint32_t expected[l::k_section_count] = {stat_record,
                                                      l::live_word::count * 8,
                                                      l::live_word::count * 8,
                                                      l::event_word::count * 8,
                                                      stat_record,
                                                      l::slot_word::count * 8,
                                                      8,
                                                      l::slot_word::count * 8,
                                                      1,
                                                      l::module_word::count * 8};
  for (std::uint32_t i = 0; i < l::k_section_count; ++i) {
    const std::uint64_t at = offsetof(l::header, sections) + i * sizeof(l::section);
    l::section s;
    std::memcpy(&s, base_ + at, sizeof s);
    s.extent_count = __atomic_load_n(
        reinterpret_cast<const std::uint32_t*>(base_ + at + offsetof(l::section, extent_count)),
        __ATOMIC_ACQUIRE);
    const std::string name = "section " + std::to_string(i) + " ";
    if (s.record_bytes != expected[i])
      return failure{at + 8, name + "record size " + std::to_string(s.record_bytes) +
                                 ", expected " + std::to_string(expected[i])};
    if (s.capacity == 0 || s.capacity > (std::uint64_t{1} << 40))
      return failure{at, name + "capacity " + std::to_string(s.capacity) + " is out of range"};
    // The sections whose records each become a decoded record (and, in the exporter, a series
    // per device): no larger than a writer makes them.
    const std::uint64_t most = i == l::k_counters  ? l::k_max_device_slots
                               : i == l::k_samples ? l::k_max_samples
                                                   : s.capacity;
    if (s.capacity > most)
      return failure{at, name + "capacity " + std::to_string(s.capacity) + " is over the " +
                             std::to_string(most) + " records a writer makes"};
    if (s.extent_count == 0 || s.extent_count > l::k_max_extents)
      return failure{at + 12, name + "extent count " + std::to_string(s.extent_count) +
                                  " is out of range (1.." + std::to_string(l::k_max_extents) + ")"};
    sections_[i] = s;
    dirs_[i] = reinterpret_cast<const l::extent*>(base_ + offsetof(l::header, extents) +
                                                  i * l::k_max_extents * sizeof(l::extent));
    const std::uint64_t dir_at =
        offsetof(l::header, extents) + i * l::k_max_extents * sizeof(l::extent);
    const l::extent e{u64(dir_at), u64(dir_at + 8)};
    if (i == l::k_events && version_ >= 4) { // lanes: one extent of lane descriptors
      constexpr std::uint64_t k_lane_bytes = l::lane_word::count * 8;
      if (s.extent_count != 1 || e.capacity == 0 || e.capacity > l::lane_word::k_max_lanes)
        return failure{dir_at + 8, name + "must be one extent of 1.." +
                                       std::to_string(l::lane_word::k_max_lanes) + " lanes"};
      if (e.offset % l::k_section_align != 0 || e.offset < l::k_header_bytes || e.offset > size_ ||
          e.capacity > (size_ - e.offset) / k_lane_bytes)
        return failure{dir_at, name + "lane table at " + std::to_string(e.offset) + " of " +
                                   std::to_string(e.capacity) + " lanes is not inside the trace"};
      fixed_[i] = e.offset;
      lane_count_ = static_cast<std::uint32_t>(e.capacity);
      continue;
    }
    if (l::kind_of(i) != l::section_kind::fixed) continue;
    if (s.extent_count != 1 || e.capacity != s.capacity)
      return failure{dir_at + 8, name + "must be one extent of its capacity"};
    if (e.offset % l::k_section_align != 0 || e.offset < l::k_header_bytes || e.offset > size_ ||
        e.capacity > (size_ - e.offset) / s.record_bytes)
      return failure{dir_at, name + "extent at " + std::to_string(e.offset) + " of " +
                                 std::to_string(e.capacity) + " records is not inside the trace"};
    fixed_[i] = e.offset;
  }
  return std::nullopt;
}

void decoder::read_stat_values(const std::uint64_t* w, pool_stats& out,
                               std::vector<std::pair<std::string, std::uint64_t>>* unknown) const {
  std::uint64_t* fields = reinterpret_cast<std::uint64_t*>(&out);
  static_assert(sizeof(pool_stats) == k_known_stats * sizeof(std::uint64_t));
  for (std::uint32_t i = 0; i < stat_count_; ++i) {
    const std::uint64_t v = w[l::stat_word::values + i];
    if (stat_field_[i] >= 0) {
      fields[stat_field_[i]] = v;
    } else if (unknown) {
      unknown->emplace_back(stat_name_[i], v);
    }
  }
}

// Copies one seqlocked record (word 0 = version, odd while writing, 0 = unused).
bool read_seqlocked(const std::uint64_t* r, std::uint32_t n, std::uint64_t* out) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    out[0] = l::load_acquire(r);
    if (out[0] & 1) continue;
    for (std::uint32_t k = 1; k < n; ++k)
      out[k] = l::load_acquire(r + k);
    if (l::load_word(r) == out[0]) return true;
  }
  return false;
}

std::optional<failure> decoder::read_counters(trace& t) {
  const auto& s = sections_[l::k_counters];
  const std::uint32_t n = s.record_bytes / 8;
  std::vector<std::uint64_t> w(n);
  for (std::uint64_t i = 0; i < s.capacity; ++i) {
    if (!read_seqlocked(words(fixed_[l::k_counters] + i * s.record_bytes), n, w.data())) {
      ++t.losses.torn_records;
      continue;
    }
    if (w[0] == 0) continue;
    device_counters d;
    d.device =
        static_cast<std::int32_t>(static_cast<std::uint32_t>(w[l::stat_word::device_reason]));
    // One record per device, as the writer keeps them: anything else is forged or damaged, and
    // would repeat a series (or make one per made-up device) in every report and scrape.
    const std::uint64_t at =
        fixed_[l::k_counters] + i * s.record_bytes + 8 * l::stat_word::device_reason;
    if (!l::valid_device(d.device))
      return failure{at, "counter record " + std::to_string(i) + " names device " +
                             std::to_string(d.device) + ", which no writer records"};
    for (const auto& other : t.devices)
      if (other.device == d.device)
        return failure{at, "counter record " + std::to_string(i) + " repeats device " +
                               std::to_string(d.device)};
    d.time_ns = to_ns(w[l::stat_word::tick]);
    read_stat_values(w.data(), d.stats, &d.unknown);
    for (std::size_t k = 0; k < k_known_stats; ++k)
      if (std::find(stat_field_.begin(), stat_field_.end(), static_cast<int>(k)) ==
          stat_field_.end())
        d.missing.emplace_back(k_stat_names[k]);
    t.devices.push_back(std::move(d));
  }
  std::sort(t.devices.begin(), t.devices.end(),
            [](const auto& a, const auto& b) { return a.device < b.device; });
  return std::nullopt;
}

std::optional<failure> decoder::read_live(trace& t) {
  std::optional<failure> bad;
  auto version_of = [&](std::uint32_t id) {
    return words(offsetof(l::header, sections) + id * sizeof(l::section) +
                 offsetof(l::section, dir_version));
  };
  t.losses.torn_records += read_live_table(
      base_, size_, sections_[l::k_live], dirs_[l::k_live], version_of(l::k_live),
      [&](const live_entry& e) {
        if (bad) return;
        if (static_cast<std::uint8_t>(e.kind) >= k_alloc_kind_count) {
          bad = failure{offsetof(l::header, extents) + l::k_live * l::k_max_extents * 16,
                        "live allocation at " + std::to_string(e.address) + " has unknown kind " +
                            std::to_string(static_cast<unsigned>(e.kind))};
          return;
        }
        live_allocation a;
        a.address = e.address;
        a.requested = e.requested;
        a.rounded = e.rounded;
        a.device = e.device;
        a.stream = e.stream;
        a.kind = e.kind;
        a.thread = e.thread;
        a.time_ns = to_ns(e.tick);
        a.stack_id = t.stack(e.stack_id) ? e.stack_id : 0;
        a.held = e.held;
        t.live.push_back(a);
      },
      &t.losses.torn_records);
  if (bad) return bad;
  t.losses.torn_records += read_live_table(
      base_, size_, sections_[l::k_segments], dirs_[l::k_segments], version_of(l::k_segments),
      [&](const live_entry& e) {
        t.segments.push_back({e.address, e.requested, e.device, to_ns(e.tick),
                              (e.stream & k_segment_stitched) != 0});
      },
      &t.losses.torn_records);
  std::sort(t.live.begin(), t.live.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  std::sort(t.segments.begin(), t.segments.end(),
            [](const auto& a, const auto& b) { return a.base < b.base; });
  return std::nullopt;
}

// The lanes' observed_* words (format 5; 0 in older traces), added up. Read whatever the
// options: a handful of words per lane.
void decoder::read_observe_cost(trace& t) const {
  if (version_ < 4) return;
  namespace lw = l::lane_word;
  std::uint64_t alloc_ticks = 0, free_ticks = 0;
  auto add = [](std::uint64_t& sum, std::uint64_t v) { // saturating: a hostile trace's words
    sum = v > ~std::uint64_t{0} - sum ? ~std::uint64_t{0} : sum + v;
  };
  for (std::uint32_t lane = 0; lane < lane_count_; ++lane) {
    const std::uint64_t* d = words(fixed_[l::k_events] + std::uint64_t{lane} * lw::count * 8);
    add(t.observed.allocs, l::load_word(d + lw::observed_allocs));
    add(alloc_ticks, l::load_word(d + lw::observed_alloc_ticks));
    add(t.observed.frees, l::load_word(d + lw::observed_frees));
    add(free_ticks, l::load_word(d + lw::observed_free_ticks));
  }
  t.observed.alloc_ns = ticks_as_ns(alloc_ticks);
  t.observed.free_ns = ticks_as_ns(free_ticks);
}

std::optional<failure> decoder::read_events(trace& t) {
  if (version_ < 4) return read_event_ring(t);
  // Format 4: lanes. Each is read like a ring from its own descriptor; the events are then
  // merged by time stamp (a lane's are in order already; lanes are in no order between them).
  namespace lw = l::lane_word;
  std::vector<std::uint64_t> ticks;
  std::uint64_t oldest_after_lap = 0; // the newest "oldest kept event" of the lanes that lapped
  bool lapped = false;
  std::uint64_t lane_bytes = 0; // chunk bytes of the lanes read so far
  const std::uint64_t table = fixed_[l::k_events];
  for (std::uint32_t lane = 0; lane < lane_count_; ++lane) {
    const std::uint64_t at = table + std::uint64_t{lane} * lw::count * 8;
    const std::uint64_t* d = words(at);
    const std::uint64_t head = l::load_acquire(d + lw::head);
    const std::uint64_t capacity = l::load_acquire(d + lw::capacity);
    t.losses.dropped_events += l::load_word(d + lw::dropped);
    if (capacity == 0) {
      if (head != 0)
        return failure{at, "event lane " + std::to_string(lane) + " is unused but has a head"};
      continue;
    }
    const auto* dir = reinterpret_cast<const l::extent*>(d + lw::dir);
    const std::uint64_t c0 = l::load_acquire(&dir[0].capacity);
    l::section shape{capacity, l::event_word::count * 8, 0, 0, 0};
    if (c0 != 0 && (c0 & (c0 - 1)) == 0 && c0 <= capacity && (capacity & (capacity - 1)) == 0)
      shape.extent_count = l::ring_chunk_count(capacity, c0);
    ring_view ring;
    const char* problem = nullptr;
    if (!ring.open(base_, size_, shape, dir, l::event_word::count, &t.losses.torn_records,
                   &problem))
      return failure{at, "event lane " + std::to_string(lane) + ": " + problem};
    if (head > ~std::uint64_t{0} - t.losses.last_seq)
      return failure{at, "event lane " + std::to_string(lane) + " head overflows the count"};
    t.losses.last_seq += head;
    // All lanes' chunks together fit in the image, as one lane's do: lanes that name the same
    // bytes over and over cost the reader no more than the image holds.
    if (ring.bytes() > size_ - lane_bytes) {
      ++t.losses.torn_records;
      t.losses.lost_events += head;
      continue;
    }
    lane_bytes += ring.bytes();
    const std::uint64_t first = head > capacity ? head - capacity + 1 : 1;
    std::uint64_t decoded = 0;
    for (const std::uint64_t seq : ring.seqs_present(first, head)) {
      event_read e = read_event_record(ring, seq, t);
      if (e.what == event_read::absent) continue;
      if (e.what == event_read::malformed) return e.problem;
      if (decoded++ == 0 && first > 1) {
        lapped = true;
        oldest_after_lap = std::max(oldest_after_lap, e.value.time_ns);
      }
      ticks.push_back(tick_);
      t.events.push_back(std::move(e.value));
    }
    t.losses.lost_events += head - decoded;
  }
  t.losses.history_from_ns = lapped ? std::max<std::uint64_t>(oldest_after_lap, 1) : 0;
  // By stamp; among equal stamps lane order, then seq order (a stable sort of what is in lane
  // order already). One lane, or lanes that took turns, are in order already.
  if (!std::is_sorted(ticks.begin(), ticks.end())) {
    std::vector<std::uint32_t> order(t.events.size());
    for (std::uint32_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return ticks[a] < ticks[b]; });
    std::vector<event> merged;
    merged.reserve(order.size());
    for (std::uint32_t i : order)
      merged.push_back(std::move(t.events[i]));
    t.events = std::move(merged);
  }
  for (std::size_t i = 0; i < t.events.size(); ++i)
    t.events[i].seq = i + 1;
  return std::nullopt;
}

// Decodes the event record `seq` of `ring`; leaves its raw stamp in tick_.
decoder::event_read decoder::read_event_record(const ring_view& ring, std::uint64_t seq,
                                               const trace& t) {
  namespace ew = l::event_word;
  event_read r;
  std::uint64_t w[ew::count];
  if (!ring.read(seq, w)) return r;
  const std::uint64_t at = ring.offset_of(seq);
  const auto type = static_cast<std::uint8_t>(w[ew::device_type] >> 32);
  const auto kind = static_cast<std::uint8_t>(w[ew::device_type] >> 40);
  const bool bad_type = type == 0 || type > k_event_type_max;
  if (bad_type || kind >= k_alloc_kind_count) {
    r.what = event_read::malformed;
    r.problem = {at + ew::device_type * 8,
                 "event " + std::to_string(seq) + " has unknown " +
                     (bad_type ? "type " + std::to_string(type) : "kind " + std::to_string(kind))};
    return r;
  }
  r.what = event_read::decoded;
  event& e = r.value;
  e.seq = seq;
  e.type = static_cast<event_type>(type);
  e.kind = static_cast<alloc_kind>(kind);
  tick_ = w[ew::tick];
  e.time_ns = to_ns(w[ew::tick]);
  e.thread = static_cast<std::uint32_t>(w[ew::thread_ref]);
  e.device = static_cast<std::int32_t>(static_cast<std::uint32_t>(w[ew::device_type]));
  e.address = w[ew::address];
  e.size = w[ew::size];
  e.size2 = w[ew::size2];
  e.stream = w[ew::stream];
  const auto ref = static_cast<std::uint32_t>(w[ew::thread_ref] >> 32);
  if (e.type == event_type::alloc) e.stack_id = t.stack(ref) ? ref : 0;
  if (e.type == event_type::marker || e.type == event_type::option)
    e.label = string_of(ref, k_max_label_bytes);
  return r;
}

// Formats 2 and 3: one ring, in seq order.
std::optional<failure> decoder::read_event_ring(trace& t) {
  ring_view ring;
  const char* problem = nullptr;
  if (!ring.open(base_, size_, sections_[l::k_events], dirs_[l::k_events], l::event_word::count,
                 &t.losses.torn_records, &problem))
    return failure{offsetof(l::header, sections) + l::k_events * sizeof(l::section),
                   std::string("event ring: ") + problem};
  const std::uint64_t head = hdr_word(offsetof(l::header, event_head));
  t.losses.last_seq = head;
  const std::uint64_t first = head > ring.capacity() ? head - ring.capacity() + 1 : 1;
  for (const std::uint64_t seq : ring.seqs_present(first, head)) {
    event_read e = read_event_record(ring, seq, t);
    if (e.what == event_read::absent) continue;
    if (e.what == event_read::malformed) return e.problem;
    t.events.push_back(std::move(e.value));
  }
  t.losses.lost_events = head - t.events.size();
  t.losses.dropped_events = hdr_word(offsetof(l::header, event_dropped));
  if (!t.events.empty() && t.events.front().seq != 1)
    t.losses.history_from_ns = t.events.front().time_ns;
  return std::nullopt;
}

std::optional<failure> decoder::read_samples(trace& t) {
  const std::uint32_t n = sections_[l::k_samples].record_bytes / 8;
  ring_view ring;
  const char* problem = nullptr;
  if (!ring.open(base_, size_, sections_[l::k_samples], dirs_[l::k_samples], n,
                 &t.losses.torn_records, &problem))
    return failure{offsetof(l::header, sections) + l::k_samples * sizeof(l::section),
                   std::string("sample ring: ") + problem};
  const std::uint64_t head = hdr_word(offsetof(l::header, sample_head));
  const std::uint64_t held = head > ring.capacity() ? head - ring.capacity() + 1 : 1;
  std::uint64_t first = held; // the newest max_samples only: older ones are not counted lost
  if (options_.max_samples != 0 && head >= options_.max_samples)
    first = std::max(first, head - options_.max_samples + 1);
  // Decoded, a sample takes sizeof(stat_sample) whatever its record holds: no more of them than
  // the ring's bytes would hold, the newest kept. A writer's records are at least that large
  // (a value slot per stat the model knows, and four words more), so this drops none of a
  // writer's; a forged ring of short records cannot decode to several times its size.
  const std::uint64_t most = std::max<std::uint64_t>(ring.bytes() / sizeof(stat_sample), 1);
  if (head >= most) first = std::max(first, head - most + 1);
  std::vector<std::uint64_t> w(n);
  std::uint64_t got = 0;
  for (const std::uint64_t seq : ring.seqs_present(first, head)) {
    if (!ring.read(seq, w.data())) continue;
    const auto reason = static_cast<std::uint8_t>(w[l::stat_word::device_reason] >> 32);
    if (reason > k_sample_reason_max)
      return failure{ring.offset_of(seq) + 16, "sample " + std::to_string(seq) +
                                                   " has unknown reason " + std::to_string(reason)};
    stat_sample x;
    x.seq = seq;
    x.time_ns = to_ns(w[l::stat_word::tick]);
    x.device =
        static_cast<std::int32_t>(static_cast<std::uint32_t>(w[l::stat_word::device_reason]));
    if (!l::valid_device(x.device))
      return failure{ring.offset_of(seq) + 8 * l::stat_word::device_reason,
                     "sample " + std::to_string(seq) + " names device " + std::to_string(x.device) +
                         ", which no writer records"};
    x.reason = static_cast<sample_reason>(reason);
    read_stat_values(w.data(), x.stats, nullptr);
    t.samples.push_back(x);
    ++got;
  }
  t.losses.lost_samples = head - got - (first - held);
  return std::nullopt;
}

std::optional<failure> decoder::run(trace& t) {
  if (auto f = check_header()) return f;
  if (auto f = check_sections()) return f;
  // Strings first: stat names, command line, labels and module paths refer to them.
  {
    t.losses.torn_records += read_intern_table(
        base_, size_, sections_[l::k_string_slots], dirs_[l::k_string_slots],
        sections_[l::k_string_bytes], dirs_[l::k_string_bytes], 1,
        [&](std::uint32_t id, std::span<const std::byte> bytes) {
          strings_.emplace(id,
                           std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
        });
  }
  for (std::uint32_t i = 0; i < stat_count_; ++i) {
    const std::string name = string_of(u32(offsetof(l::header, stat_names) + 4 * i));
    int field = -1;
    for (std::size_t k = 0; k < k_known_stats; ++k)
      if (name == k_stat_names[k]) field = static_cast<int>(k);
    stat_field_.push_back(field);
    stat_name_.push_back(name.empty() ? "stat" + std::to_string(i) : name);
  }
  trace_info& info = t.info;
  info.format_version = version_;
  info.pid = u32(offsetof(l::header, pid));
  info.stack_depth = u32(offsetof(l::header, stack_depth));
  info.python_depth = version_ >= 3 ? u32(offsetof(l::header, python_depth)) : 0;
  info.proc_start_ticks = u64(offsetof(l::header, proc_start_ticks));
  info.start_realtime_ns = u64(offsetof(l::header, start_realtime_ns));
  start_mono_ = u64(offsetof(l::header, start_monotonic_ns));
  info.sample_interval_ns = u64(offsetof(l::header, sample_interval_ns));
  info.heartbeat_realtime_ns = u64(offsetof(l::header, heartbeat_realtime_ns));
  info.exit_realtime_ns = u64(offsetof(l::header, exit_realtime_ns));
  info.total_bytes = size_;
  info.live_capacity = sections_[l::k_live].capacity;
  info.event_capacity = sections_[l::k_events].capacity;
  info.sample_capacity = sections_[l::k_samples].capacity;
  info.limit_bytes = u64(offsetof(l::header, limit_bytes));
  info.full = (u64(offsetof(l::header, flags)) & l::k_flag_full) != 0;
  info.observed_frameworks =
      static_cast<std::uint32_t>(u64(offsetof(l::header, flags)) >> l::k_flag_observed_shift) &
      ((1u << k_observed_framework_count) - 1);
  info.exit_live_count = u64(offsetof(l::header, exit_live_count));
  const std::string argv = string_of(u32(offsetof(l::header, cmdline_string)));
  for (std::size_t pos = 0; pos < argv.size();) {
    std::size_t end = argv.find('\0', pos);
    if (end == std::string::npos) end = argv.size();
    info.argv.push_back(argv.substr(pos, end - pos));
    if (!info.command_line.empty()) info.command_line += ' ';
    info.command_line += info.argv.back();
    pos = end + 1;
  }
  const std::string options = string_of(u32(offsetof(l::header, options_string)));
  for (std::size_t pos = 0; pos < options.size();) {
    std::size_t end = options.find('\n', pos);
    if (end == std::string::npos) end = options.size();
    const std::string line = options.substr(pos, end - pos);
    const auto eq = line.find('=');
    if (eq != std::string::npos) info.options.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    pos = end + 1;
  }
  const std::uint64_t flags = u64(offsetof(l::header, flags));
  info.state = flags & l::k_flag_shutdown   ? trace_state::exited
               : flags & l::k_flag_snapshot ? trace_state::running
                                            : trace_state::crashed;
  {
    std::uint64_t c[5];
    if (!read_seqlocked(words(offsetof(l::header, clock_version)), 5, c)) ++t.losses.torn_records;
    tick0_ = c[1], mono0_ = c[2], tick1_ = c[3], mono1_ = c[4];
  }
  {
    t.losses.torn_records += read_intern_table(
        base_, size_, sections_[l::k_stack_slots], dirs_[l::k_stack_slots],
        sections_[l::k_stack_ips], dirs_[l::k_stack_ips], 8,
        [&](std::uint32_t id, std::span<const std::byte> bytes) {
          std::vector<std::uintptr_t> ips;
          ips.reserve(bytes.size() / 8);
          python_stack py;
          bool python = false;
          for (std::size_t k = 0; k < bytes.size() / 8; ++k) {
            const std::uint64_t w =
                l::load_word(reinterpret_cast<const std::uint64_t*>(bytes.data()) + k);
            if (version_ >= 3 && pw::tag_of(w) == pw::k_frame_tag) {
              python = true;
              py.frames.push_back({pw::location_of(w), pw::line_of(w)});
              add_location(t, pw::location_of(w));
            } else if (version_ >= 3 && pw::tag_of(w) == pw::k_note_tag) {
              python = true;
              const std::uint64_t what = w & 0xffffffffu;
              py.note = what == pw::k_note_no_gil       ? python_note::no_gil
                        : what == pw::k_note_finalizing ? python_note::finalizing
                                                        : py.note;
              if (what == pw::k_note_lent_backward && py.lender == python_lender::none) {
                py.lender = python_lender::backward;
                py.lent_from = static_cast<std::uint32_t>(py.frames.size());
                py.waiting = pw::line_of(w);
              }
            } else {
              ips.push_back(w); // an unknown tag reads as an address in no module
            }
          }
          t.stacks.emplace(id, std::move(ips));
          if (python) t.python_stacks.emplace(id, std::move(py));
        });
  }
  if (auto f = read_counters(t)) return f;
  read_observe_cost(t);
  if (options_.live)
    if (auto f = read_live(t)) return f;
  if (options_.events)
    if (auto f = read_events(t)) return f;
  if (options_.samples)
    if (auto f = read_samples(t)) return f;
  const auto& m = sections_[l::k_modules];
  t.losses.torn_records += read_module_table(
      words(fixed_[l::k_modules]), m.capacity, u64(offsetof(l::header, module_count)),
      [&](std::uint32_t id) { return string_of(id, 4096); }, t.modules);
  t.losses.live_overflow = u64(offsetof(l::header, live_overflow));
  t.losses.unmatched_frees = u64(offsetof(l::header, unmatched_frees));
  t.losses.stack_overflow = u64(offsetof(l::header, stack_overflow));
  t.losses.string_overflow = u64(offsetof(l::header, string_overflow));
  t.losses.module_overflow = u64(offsetof(l::header, module_overflow));
  t.losses.segment_overflow = u64(offsetof(l::header, segment_overflow));
  t.losses.growth_refused = u64(offsetof(l::header, growth_refused));
  return std::nullopt;
}

} // namespace

read_result decode(std::span<const std::byte> bytes, const read_options& options) {
  read_result r;
  std::vector<std::uint64_t> aligned; // words must be 8-byte aligned for atomic loads
  const std::byte* base = bytes.data();
  if (reinterpret_cast<std::uintptr_t>(base) % 8 != 0) {
    aligned.resize(bytes.size() / 8 + 1);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    base = reinterpret_cast<const std::byte*>(aligned.data());
  }
  try {
    decoder d(base, bytes.size(), options);
    if (auto f = d.run(r.value)) {
      r.error = {f->offset, std::move(f->message)};
      r.value = trace{};
      return r;
    }
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = {0, std::string("cannot decode the trace: ") + e.what()};
  }
  return r;
}

} // namespace gmem::trace
