// Time stamps. Events store raw ticks (the TSC on x86-64: ~7 ns to read versus ~20-30 ns for
// clock_gettime, which matters at two stamps per alloc+free pair); the header stores two
// (tick, monotonic ns) calibration points that readers use to convert. Elsewhere ticks are
// CLOCK_MONOTONIC nanoseconds.
#pragma once

#include <cstdint>
#include <ctime>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace gmem::trace {

inline std::uint64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}
inline std::uint64_t monotonic_ns() noexcept {
  return clock_ns(CLOCK_MONOTONIC);
}
inline std::uint64_t realtime_ns() noexcept {
  return clock_ns(CLOCK_REALTIME);
}

inline std::uint64_t now_ticks() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return monotonic_ns();
#endif
}

// Converts ticks to monotonic ns with two calibration points; identity when they coincide.
inline std::uint64_t ticks_to_monotonic_ns(std::uint64_t tick, std::uint64_t tick0,
                                           std::uint64_t mono0, std::uint64_t tick1,
                                           std::uint64_t mono1) noexcept {
  if (tick1 <= tick0 || mono1 <= mono0) return mono0 + (tick - tick0);
  const long double rate =
      static_cast<long double>(mono1 - mono0) / static_cast<long double>(tick1 - tick0);
  const long double delta = static_cast<long double>(static_cast<std::int64_t>(tick - tick0));
  const long double ns = static_cast<long double>(mono0) + delta * rate;
  if (!(ns > 0)) return 0;                                     // also NaN
  if (ns >= 18446744073709551615.0L) return ~std::uint64_t{0}; // hostile calibration
  return static_cast<std::uint64_t>(ns);
}

} // namespace gmem::trace
