// Small ABI helpers shared by libgmem_client.so and libgmem.so (each compiles its copy):
// status names and the gmem_stats_t growth rule.
#pragma once

#include "gmem/gmem.h"

#include <cstddef>
#include <cstdint>

namespace gmem::client {

inline const char* status_name(gmem_status s) noexcept {
  switch (s) {
  case GMEM_OK:
    return "GMEM_OK";
  case GMEM_ERROR_INVALID_ARGUMENT:
    return "GMEM_ERROR_INVALID_ARGUMENT";
  case GMEM_ERROR_NO_DRIVER:
    return "GMEM_ERROR_NO_DRIVER";
  case GMEM_ERROR_NO_SHIM:
    return "GMEM_ERROR_NO_SHIM";
  case GMEM_ERROR_DRIVER:
    return "GMEM_ERROR_DRIVER";
  case GMEM_ERROR_TRUNCATED:
    return "GMEM_ERROR_TRUNCATED";
  case GMEM_ERROR_INTERNAL:
    return "GMEM_ERROR_INTERNAL";
  }
  return "GMEM_ERROR_UNKNOWN";
}

// Copies the first min(src.struct_size, dst->struct_size) bytes: the growth rule of
// gmem_stats_t. Returns INVALID_ARGUMENT when the caller's struct is shorter than the
// fixed header (it cannot even receive struct_size/version).
inline gmem_status copy_stats(const gmem_stats_t& src, gmem_stats_t* dst) noexcept {
  if (dst == nullptr || dst->struct_size < offsetof(gmem_stats_t, device_total_bytes))
    return GMEM_ERROR_INVALID_ARGUMENT;
  std::uint32_t n = dst->struct_size < sizeof(gmem_stats_t)
                        ? dst->struct_size
                        : static_cast<std::uint32_t>(sizeof(gmem_stats_t));
  n -= n % 8; // whole fields only
  gmem_stats_t tmp = src;
  tmp.struct_size = n;
  tmp.version = GMEM_STATS_VERSION;
  __builtin_memcpy(static_cast<void*>(dst), &tmp, n);
  return GMEM_OK;
}

} // namespace gmem::client
