// The interposer's recorder glue. For now every hook is a no-op so the shim links; the
// recorder (profiler/trace_writer.h) is wired in behind these same signatures.
#include "interpose/trace_hooks.h"

namespace gmem::trace {

void init(int) noexcept {}
void set_stats_source(stats_source) noexcept {}
std::uint32_t capture_stack() noexcept {
  return 0;
}
void alloc(std::uintptr_t, std::size_t, std::size_t, int, std::uintptr_t, alloc_kind,
           std::uint32_t) noexcept {}
void free(std::uintptr_t, int, std::uintptr_t, alloc_kind) noexcept {}
void segment(bool, std::uintptr_t, std::size_t, int) noexcept {}
void fence(int, std::uint64_t, std::size_t) noexcept {}
void trim(int, std::size_t) noexcept {}
void oom(int, std::size_t, const pool_stats&) noexcept {}
void marker(const char*) noexcept {}
void modules_changed() noexcept {}
void option_changed(const char*, const char*) noexcept {}
void shutdown() noexcept {}

} // namespace gmem::trace
