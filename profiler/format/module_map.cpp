#include "profiler/format/module_map.h"

#include <cstring>
#include <elf.h>
#include <link.h>
#include <unistd.h>

namespace gmem::trace {

namespace mw = layout::module_word;
using layout::load_word;
using layout::store_word;

namespace {

std::string build_id_of(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    std::size_t left = ph.p_memsz;
    while (left >= sizeof(ElfW(Nhdr))) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p, sizeof n);
      const std::size_t name = (n.n_namesz + 3) & ~std::size_t{3};
      const std::size_t desc = (n.n_descsz + 3) & ~std::size_t{3};
      if (sizeof n + name + desc > left) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 &&
          std::memcmp(p + sizeof n, "GNU", 4) == 0)
        return std::string(p + sizeof n + name, n.n_descsz);
      p += sizeof n + name + desc;
      left -= sizeof n + name + desc;
    }
  }
  return {};
}

int on_module(dl_phdr_info* info, std::size_t, void* arg) {
  auto* out = static_cast<std::vector<module_info>*>(arg);
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    lo = std::min<std::uintptr_t>(lo, ph.p_vaddr);
    hi = std::max<std::uintptr_t>(hi, ph.p_vaddr + ph.p_memsz);
  }
  if (hi <= lo) return 0;
  module_info m;
  m.load_bias = info->dlpi_addr;
  m.start = info->dlpi_addr + lo;
  m.size = hi - lo;
  if (info->dlpi_name && info->dlpi_name[0]) {
    m.path = info->dlpi_name;
  } else if (out->empty()) { // the main program
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) m.path.assign(buf, static_cast<std::size_t>(n));
  }
  m.build_id = build_id_of(info);
  out->push_back(std::move(m));
  return 0;
}

} // namespace

std::vector<module_info> scan_modules() {
  std::vector<module_info> out;
  dl_iterate_phdr(on_module, &out);
  return out;
}

void module_table::write(std::uint64_t index, const module_info& m, std::uint32_t path_id,
                         bool loaded) noexcept {
  std::uint64_t* r = records_ + index * mw::count;
  const std::uint64_t v = load_word(r + mw::version);
  store_word(r + mw::version, v + 1); // odd
  layout::store_release(r + mw::load_bias, m.load_bias);
  layout::store_release(r + mw::start, m.start);
  layout::store_release(r + mw::size, m.size);
  const std::size_t id_len = std::min<std::size_t>(m.build_id.size(), mw::k_max_build_id);
  layout::store_release(r + mw::path_info, path_id | static_cast<std::uint64_t>(id_len) << 32 |
                                               (loaded ? std::uint64_t{1} << 40 : 0));
  std::uint64_t id_words[3] = {};
  std::memcpy(id_words, m.build_id.data(), id_len);
  for (unsigned k = 0; k < 3; ++k)
    layout::store_release(r + mw::build_id + k, id_words[k]);
  layout::store_release(r + mw::version, v + 2);
}

void module_table::update(const std::vector<module_info>& now) noexcept {
  try {
    for (std::size_t i = 0; i < known_.size(); ++i) {
      bool present = false;
      for (const auto& m : now)
        present = present || (m.start == known_[i].start && m.path == known_[i].info.path);
      if (present != known_[i].loaded) {
        known_[i].loaded = present;
        write(i, known_[i].info, known_[i].path_id, present);
      }
    }
    for (const auto& m : now) {
      bool seen = false;
      for (const auto& k : known_)
        seen = seen || (k.start == m.start && k.info.path == m.path);
      if (seen) continue;
      if (known_.size() >= capacity_) {
        layout::fetch_add(overflow_, 1);
        continue;
      }
      const std::uint32_t path_id =
          m.path.empty() ? 0 : strings_->intern(m.path.data(), m.path.size());
      known_.push_back({m.start, path_id, true, m});
      write(known_.size() - 1, m, path_id, true);
      layout::store_release(count_, known_.size());
    }
  } catch (...) { // out of memory while tracking modules: keep the map we have
  }
}

std::uint64_t read_module_table(const std::uint64_t* records, std::uint64_t capacity,
                                std::uint64_t count,
                                const std::function<std::string(std::uint32_t)>& path_of,
                                std::vector<module>& out) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::uint64_t torn = 0;
  for (std::uint64_t i = 0; i < count && i < capacity && i < 65536; ++i) {
    const std::uint64_t* r = records + i * mw::count;
    std::uint64_t w[mw::count];
    bool done = false;
    for (int attempt = 0; attempt < 16 && !done; ++attempt) {
      w[0] = layout::load_acquire(r);
      if (w[0] & 1 || w[0] == 0) continue;
      for (unsigned k = 1; k < mw::count; ++k)
        w[k] = layout::load_acquire(r + k);
      done = load_word(r) == w[0];
    }
    if (!done) {
      ++torn;
      continue;
    }
    module m;
    m.load_bias = w[mw::load_bias];
    m.start = w[mw::start];
    m.size = w[mw::size];
    m.path = path_of(static_cast<std::uint32_t>(w[mw::path_info]));
    m.loaded = (w[mw::path_info] >> 40 & 1) != 0;
    const std::size_t id_len =
        std::min<std::size_t>((w[mw::path_info] >> 32) & 0xff, mw::k_max_build_id);
    unsigned char id[mw::k_max_build_id];
    std::memcpy(id, &w[mw::build_id], sizeof id);
    for (std::size_t k = 0; k < id_len; ++k) {
      m.build_id += k_hex[id[k] >> 4];
      m.build_id += k_hex[id[k] & 15];
    }
    out.push_back(std::move(m));
  }
  return torn;
}

module_load_counts module_loads_now() noexcept {
  module_load_counts c;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* out = static_cast<module_load_counts*>(data);
        out->adds = info->dlpi_adds;
        out->subs = info->dlpi_subs;
        return 1; // the counters are the same in every entry: stop after the first
      },
      &c);
  return c;
}

} // namespace gmem::trace
