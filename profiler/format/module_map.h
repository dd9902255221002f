// The module map: which ELF file is loaded where, with its build id, so stacks (raw
// instruction pointers) can be symbolized after the process is gone. Kept current by
// modules_changed() after every dlopen/dlclose; entries of unloaded modules stay (old stacks
// point into them), marked not loaded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "profiler/format/intern_table.h"
#include "profiler/format/trace_model.h"

namespace gmem::trace {

struct module_info {
  std::string path;
  std::uintptr_t load_bias = 0;
  std::uintptr_t start = 0;
  std::uint64_t size = 0;
  std::string build_id; // raw bytes
};

// The modules loaded in this process now (dl_iterate_phdr); the main program by its
// /proc/self/exe path.
std::vector<module_info> scan_modules();

// How many times this process has loaded and unloaded a module so far (dl_iterate_phdr's
// dlpi_adds / dlpi_subs): a change says the module list changed.
struct module_load_counts {
  unsigned long long adds = 0;
  unsigned long long subs = 0;
};
module_load_counts module_loads_now() noexcept;

// Writer. Not thread-safe: the caller serializes update() (modules change rarely).
class module_table {
public:
  module_table() = default;
  module_table(std::uint64_t* records, std::uint64_t capacity, std::uint64_t* count,
               std::uint64_t* overflow, intern_table* strings) noexcept
      : records_(records), capacity_(capacity), count_(count), overflow_(overflow),
        strings_(strings) {}
  // Adds modules not yet recorded and marks recorded ones missing from `now` as unloaded.
  void update(const std::vector<module_info>& now) noexcept;

private:
  void write(std::uint64_t index, const module_info& m, std::uint32_t path_id,
             bool loaded) noexcept;
  std::uint64_t* records_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t* count_ = nullptr;
  std::uint64_t* overflow_ = nullptr;
  intern_table* strings_ = nullptr;
  struct known {
    std::uintptr_t start;
    std::uint32_t path_id;
    bool loaded;
    module_info info;
  };
  std::vector<known> known_;
};

// Reader: the first `count` records (count clamped to capacity); `path_of` maps a string id to
// its text. Returns the records that stayed mid-update (torn).
std::uint64_t read_module_table(const std::uint64_t* records, std::uint64_t capacity,
                                std::uint64_t count,
                                const std::function<std::string(std::uint32_t)>& path_of,
                                std::vector<module>& out);

} // namespace gmem::trace
