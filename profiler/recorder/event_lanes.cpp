#include "profiler/recorder/event_lanes.h"

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

namespace gmem::trace {

namespace lw = layout::lane_word;

constinit thread_local std::uint64_t t_lane_owner = 0;
constinit thread_local seq_ring* t_lane_ring = nullptr;
constinit thread_local std::uint64_t* t_lane_words = nullptr;

namespace {
std::atomic<std::uint64_t> g_lanes_serial{0};
// A thread that found no free lane in the event_lanes numbered t_missed_serial, and the
// release count then: it looks again once a lane was given back.
thread_local std::uint64_t t_missed_serial = 0, t_missed_releases = 0;
thread_local bool t_lanes_exiting = false; // its lanes were given back: lane 0 from now on
} // namespace

struct lane_registry {
  std::mutex mu; // claims and releases (once per thread), never the hot path
  std::uint32_t count = 0;
  std::unique_ptr<seq_ring[]> rings;
  std::unique_ptr<bool[]> opened; // under mu: the lane's ring has its first chunk
  std::unique_ptr<bool[]> taken;  // under mu: a thread holds the lane
  std::atomic<std::uint64_t> releases{0};
  bool no_room = false; // under mu: a lane's first chunk was refused: no more lanes
  trace_space* space = nullptr;
  std::uint64_t* table = nullptr;
  std::uint64_t capacity = 0, first_chunk = 0;
  std::atomic<std::int64_t> budget{0};

  std::uint64_t* descriptor(std::uint32_t lane) const { return table + lane * lw::count; }
  bool open_ring(std::uint32_t lane, std::uint64_t ring_capacity, std::uint64_t c0, bool owned) {
    std::uint64_t* d = descriptor(lane);
    return rings[lane].open(space, reinterpret_cast<layout::extent*>(d + lw::dir), ring_capacity,
                            c0, layout::event_word::count, d + lw::head, d + lw::dropped, owned,
                            d + lw::capacity, owned ? &budget : nullptr);
  }
  void release(std::uint32_t lane) {
    std::lock_guard lock(mu);
    taken[lane] = false;
    releases.fetch_add(1, std::memory_order_relaxed);
  }
};

namespace {

// The lanes the calling thread holds, given back when it exits (if their trace still exists).
struct lane_claims {
  struct claim {
    std::uint64_t serial;
    std::weak_ptr<lane_registry> registry;
    std::uint32_t lane;
  };
  std::vector<claim> list;
  ~lane_claims() {
    t_lane_owner = 0;
    t_lane_ring = nullptr;
    t_lane_words = nullptr;
    t_lanes_exiting = true; // later events (other TLS destructors) go to lane 0
    for (auto& c : list)
      if (auto r = c.registry.lock()) r->release(c.lane);
  }
};
thread_local lane_claims t_lane_claims;

} // namespace

event_lanes::event_lanes() : serial_(g_lanes_serial.fetch_add(1, std::memory_order_relaxed) + 1) {}

event_lanes::~event_lanes() = default;

bool event_lanes::open(trace_space* space, layout::header* h, std::uint32_t lanes,
                       std::uint64_t capacity, std::uint64_t shared_capacity,
                       std::uint64_t first_chunk, std::uint64_t budget) noexcept {
  try {
    registry_ = std::make_shared<lane_registry>();
    lane_registry& r = *registry_;
    r.count = std::clamp<std::uint32_t>(lanes, 1, lw::k_max_lanes);
    r.rings = std::make_unique<seq_ring[]>(r.count);
    r.opened = std::make_unique<bool[]>(r.count);
    r.taken = std::make_unique<bool[]>(r.count);
  } catch (const std::bad_alloc&) {
    registry_.reset();
    return false;
  }
  lane_registry& r = *registry_;
  const std::uint64_t table = space->allocate(std::uint64_t{r.count} * lw::count * 8);
  if (table == 0) return false;
  r.space = space;
  r.table = space->words(table);
  r.capacity = capacity;
  r.first_chunk = std::min(first_chunk, capacity);
  r.budget.store(static_cast<std::int64_t>(budget), std::memory_order_relaxed);
  h->sections[layout::k_events] = {capacity, layout::event_word::count * 8, 1, 0, 0};
  h->extents[layout::k_events][0] = {table, r.count};
  layout::store_word(r.descriptor(0) + lw::flags, lw::k_shared);
  r.opened[0] = r.taken[0] = true;
  return r.open_ring(0, shared_capacity, std::min(first_chunk, shared_capacity), false);
}

std::uint64_t event_lanes::append_slow(const std::uint64_t* words) noexcept {
  if (!registry_) return 0;
  lane_registry& r = *registry_;
  if (t_lanes_exiting) return r.rings[0].append(words);
  // A lane this thread holds already (it wrote another trace since), or a new one; a thread
  // that found none tries again only once some thread has given one back.
  for (const auto& c : t_lane_claims.list)
    if (c.serial == serial_) {
      t_lane_owner = serial_;
      t_lane_ring = &r.rings[c.lane];
      t_lane_words = r.descriptor(c.lane);
      return t_lane_ring->append_owned(words);
    }
  const std::uint64_t releases = r.releases.load(std::memory_order_relaxed);
  if ((t_missed_serial != serial_ || t_missed_releases != releases) && claim())
    return t_lane_ring->append_owned(words);
  t_missed_serial = serial_;
  t_missed_releases = releases;
  return r.rings[0].append(words);
}

bool event_lanes::claim() noexcept {
  lane_registry& r = *registry_;
  std::lock_guard lock(r.mu);
  // A lane given back by a thread that exited first, else one never used while there is room.
  std::uint32_t lane = 1;
  while (lane < r.count && (r.taken[lane] || !r.opened[lane]))
    ++lane;
  if (lane == r.count) {
    lane = 1;
    while (lane < r.count && r.opened[lane])
      ++lane;
    if (lane == r.count || r.no_room) return false;
  }
  if (!r.opened[lane]) {
    if (!r.open_ring(lane, r.capacity, r.first_chunk, true)) {
      r.no_room = true; // the budget or the trace is spent: new threads share lane 0
      return false;
    }
    r.opened[lane] = true;
  }
  try {
    t_lane_claims.list.push_back({serial_, registry_, lane});
  } catch (const std::bad_alloc&) {
    return false;
  }
  r.taken[lane] = true;
  t_lane_owner = serial_;
  t_lane_ring = &r.rings[lane];
  t_lane_words = r.descriptor(lane);
  return true;
}

void event_lanes::add_observed_shared(unsigned at, std::uint64_t ticks) noexcept {
  if (!registry_) return;
  std::uint64_t* d = registry_->descriptor(0);
  layout::fetch_add(d + at, 1);
  layout::fetch_add(d + at + 1, ticks);
}

event_lanes::observed_totals event_lanes::observed() const noexcept {
  observed_totals sum;
  if (!registry_) return sum;
  for (std::uint32_t i = 0; i < registry_->count; ++i) {
    const std::uint64_t* d = registry_->descriptor(i);
    sum.allocs += layout::load_word(d + lw::observed_allocs);
    sum.alloc_ticks += layout::load_word(d + lw::observed_alloc_ticks);
    sum.frees += layout::load_word(d + lw::observed_frees);
    sum.free_ticks += layout::load_word(d + lw::observed_free_ticks);
  }
  return sum;
}

std::uint32_t event_lanes::lanes_claimed() const noexcept {
  if (!registry_) return 0;
  std::lock_guard lock(registry_->mu);
  std::uint32_t n = 0;
  for (std::uint32_t i = 1; i < registry_->count; ++i)
    n += registry_->taken[i];
  return n;
}

} // namespace gmem::trace
