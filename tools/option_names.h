// Names of the GMEM_* options the tools' advice and `gmem run` refer to. They must match rows
// of the options table in common/options.h; tools_option_names_test checks that they do.
#pragma once

namespace gmem::tools {

inline constexpr const char* k_opt_limit = "GMEM_LIMIT";
inline constexpr const char* k_opt_max_cached = "GMEM_MAX_CACHED";
inline constexpr const char* k_opt_large_segment = "GMEM_LARGE_SEGMENT";
inline constexpr const char* k_opt_oversize = "GMEM_OVERSIZE";
inline constexpr const char* k_opt_arena = "GMEM_ARENA";
inline constexpr const char* k_opt_arena_page_mb = "GMEM_ARENA_PAGE_MB";
inline constexpr const char* k_opt_stitch = "GMEM_STITCH";

} // namespace gmem::tools
