// Stub while the pool is being written: every allocation fails, no address is owned.
#include "pool/pool.h"

namespace gmem {

class pool_impl {
public:
  pool_options options;
};

pool::pool(upstream&, fences&, const pool_options& options, pool_observer*)
    : impl_(std::make_unique<pool_impl>()) {
  impl_->options = options;
}
pool::~pool() = default;
alloc_result pool::allocate(std::size_t, stream_handle) {
  return {0, pool_status::out_of_memory, 0};
}
pool_status pool::deallocate(std::uintptr_t, stream_handle) {
  return pool_status::not_owned;
}
std::optional<block_info> pool::find(std::uintptr_t) const {
  return std::nullopt;
}
bool pool::owns(std::uintptr_t) const {
  return false;
}
std::uint64_t pool::begin_external_fence() {
  return 0;
}
void pool::end_external_fence(std::uint64_t) {}
void pool::stream_synchronized(stream_handle) {}
std::uint64_t pool::begin_stream_sync() {
  return 0;
}
void pool::end_stream_sync(stream_handle, std::uint64_t) {}
std::size_t pool::trim(std::size_t) {
  return 0;
}
void pool::set_limit(std::size_t bytes) {
  impl_->options.limit_bytes = bytes;
}
void pool::abandon() {}
pool_stats pool::stats() const {
  return {};
}
void pool::reset_peaks() {}
void pool::for_each_segment(const std::function<void(const segment_view&)>&) const {}
bool pool::is_valid() const {
  return true;
}
const pool_options& pool::options() const {
  return impl_->options;
}

} // namespace gmem
