// The OOM notice (GMEM_OOM_REPORT): when a pooled allocation fails with out of memory, a few
// lines on stderr that explain it where people look first, the job's log: the request, the
// device's free memory and the pool's limit, the pool's state (reserved, live, cached,
// pending, fragmentation, largest free block) and the 5 call sites holding the most memory on
// that device. `gmem oom PID` shows every recorded OOM again, symbolized with file:line.
#pragma once

#include <cstddef>

#include "pool/stats.h"

namespace gmem::shim {

// Called by the pool's observer after a failed allocation, without the pool lock. Prints the
// first failure of the process, then at most one notice per k_oom_notice_interval_s (counting
// the ones it left out); never throws; does nothing with GMEM_OOM_REPORT=0.
void print_oom_notice(int device, std::size_t requested, const pool_stats& at_failure) noexcept;

inline constexpr unsigned k_oom_notice_interval_s = 60;

} // namespace gmem::shim
