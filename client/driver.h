// The CUDA driver as libgmem_client.so sees it when libgmem.so is not preloaded: libcuda.so.1
// opened at run time (so programs need no CUDA at link time and the same binary runs on the
// real driver and on the fake one in tests/fake_cuda), and the few queries the fallbacks use.
#pragma once

#include "gmem/gmem.h"

#include <cstdint>
#include <string>

namespace gmem::client {

struct device_memory {
  int device = 0; // resolved ordinal
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::string name;
};

class driver {
public:
  // The process-wide instance; opens libcuda.so.1 and calls cuInit(0) once, thread-safely.
  static const driver& get() noexcept;

  bool loaded() const noexcept { return loaded_; }
  const std::string& error() const noexcept { return error_; } // why !loaded()
  int device_count() const noexcept;
  // -1 -> the current context's device, or 0 when the calling thread has none.
  int resolve(int device) const noexcept;
  // total and free memory of `device` (already resolved). Uses the calling thread's context
  // when it is on that device; otherwise retains the device's primary context for the query.
  gmem_status query(int device, device_memory* out) const noexcept;

private:
  driver() noexcept;
  bool loaded_ = false;
  std::string error_;
  void* handle_ = nullptr;
  struct table;
  const table* fn_ = nullptr;
};

} // namespace gmem::client
