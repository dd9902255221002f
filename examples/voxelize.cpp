// Batch job: voxelize a batch of point clouds into occupancy grids, a batch several times
// larger than the memory it may use, by processing it in chunks with gmem/chunking.hpp.
//
//   voxelize [--clouds B] [--points N] [--grid G] [--unchunked] [--chunk K] [--safety F]
//            [--host]   (compute on the host even on a GPU, to compare with the kernel)
//            [--stream] (clouds arrive from a source of unknown length: for_each_batch)
//            [--measure] (--stream, with the cost per cloud measured by gmem, not declared)
//
// Each cloud needs N*12 bytes of points and G^3 bytes of grid on the device. The default
// plans chunks from gmem_allocatable_bytes() (GMEM_LIMIT under `gmem run`); --chunk K starts
// from K clouds per chunk instead (too many: watch it halve on out of memory and grow back);
// --unchunked processes everything at once (the reference run, on a large enough limit).
// Clouds are generated from their index, so no chunk ever needs the whole batch on the host,
// and the checksum does not depend on how the batch was cut.
#include "examples/cuda_driver.h"
#include "examples/voxel_backend.h"
#include "gmem/chunking.hpp"
#include "gmem/gmem.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <vector>

namespace {

struct job {
  std::size_t clouds = 64;
  std::size_t points = 65536;
  int grid = 96;
  bool unchunked = false;
  bool host = false;
  bool stream = false;
  bool measure = false;
  std::size_t chunk = 0;
  double safety = 0.7;
};

std::uint64_t mix(std::uint64_t x) { // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

float unit(std::uint64_t& state) { // [0, 1)
  state = mix(state);
  return static_cast<float>(state >> 40) / static_cast<float>(1ull << 24);
}

// Cloud c: a noisy spherical shell whose centre and radius depend on c.
void make_cloud(std::size_t c, std::size_t points, float* out) {
  std::uint64_t s = mix(c * 7919 + 17);
  const float cx = 0.3f + 0.4f * unit(s), cy = 0.3f + 0.4f * unit(s), cz = 0.3f + 0.4f * unit(s);
  const float r = 0.05f + 0.2f * unit(s);
  for (std::size_t i = 0; i < points; ++i) {
    float d[3], n2 = 0;
    for (float& v : d) {
      v = unit(s) * 2 - 1;
      n2 += v * v;
    }
    const float k = n2 > 0 ? r / __builtin_sqrtf(n2) * (0.9f + 0.2f * unit(s)) : 0;
    out[3 * i] = cx + d[0] * k;
    out[3 * i + 1] = cy + d[1] * k;
    out[3 * i + 2] = cz + d[2] * k;
  }
}

std::uint64_t fnv1a(const unsigned char* p, std::size_t n,
                    std::uint64_t h = 1469598103934665603ull) {
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Cloud ids 0, 1, ... produced one at a time; only the source knows where it ends.
struct cloud_source {
  std::size_t remaining;
  std::size_t next = 0;
  struct iterator {
    using iterator_category = std::input_iterator_tag;
    using value_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using pointer = const std::size_t*;
    using reference = std::size_t;
    cloud_source* s = nullptr;
    std::size_t operator*() const { return s->next; }
    iterator& operator++() {
      ++s->next;
      --s->remaining;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) {
      return it.s->remaining == 0;
    }
  };
};

std::size_t parse_count(const char* s, const char* flag) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || v == 0) {
    std::fprintf(stderr, "voxelize: %s '%s' is not a positive number; exiting\n", flag, s);
    std::exit(2);
  }
  return static_cast<std::size_t>(v);
}

} // namespace

int main(int argc, char** argv) {
  job j;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(a, "--unchunked") == 0) {
      j.unchunked = true;
    } else if (std::strcmp(a, "--host") == 0) {
      j.host = true;
    } else if (std::strcmp(a, "--stream") == 0) {
      j.stream = true;
    } else if (std::strcmp(a, "--measure") == 0) {
      j.stream = j.measure = true;
    } else if (v != nullptr && std::strcmp(a, "--clouds") == 0) {
      j.clouds = parse_count(v, a), ++i;
    } else if (v != nullptr && std::strcmp(a, "--points") == 0) {
      j.points = parse_count(v, a), ++i;
    } else if (v != nullptr && std::strcmp(a, "--grid") == 0) {
      j.grid = static_cast<int>(parse_count(v, a)), ++i;
    } else if (v != nullptr && std::strcmp(a, "--chunk") == 0) {
      j.chunk = parse_count(v, a), ++i;
    } else if (v != nullptr && std::strcmp(a, "--safety") == 0) {
      j.safety = std::atof(v), ++i;
    } else {
      std::fprintf(stderr, "usage: voxelize [--clouds B] [--points N] [--grid G] [--unchunked] "
                           "[--chunk K] [--safety F] [--host] [--stream] [--measure]\n");
      return 2;
    }
  }
  const examples::cuda_driver cu = examples::cuda_driver::open();
  const examples::voxel_backend backend(cu, j.host);
  const std::size_t cells = static_cast<std::size_t>(j.grid) * static_cast<std::size_t>(j.grid) *
                            static_cast<std::size_t>(j.grid);
  const std::uint64_t per_cloud = j.points * 3 * sizeof(float) + cells;
  std::printf("voxelize: %zu clouds x %zu points -> %d^3 grids on %s; compute: %s\n", j.clouds,
              j.points, j.grid, cu.device_name, backend.name().c_str());
  std::printf("voxelize: %.1f MiB per cloud, %.1f MiB for the whole batch; gmem pool %s\n",
              static_cast<double>(per_cloud) / (1 << 20),
              static_cast<double>(per_cloud * j.clouds) / (1 << 20),
              gmem_available() ? "active" : "not preloaded");

  std::vector<std::uint64_t> cloud_hash(j.clouds, 0);
  std::vector<std::uint64_t> cloud_occupied(j.clouds, 0);
  // One chunk: allocate, upload, voxelize, download, free. Returns the CUresult, so
  // CUDA_ERROR_OUT_OF_MEMORY (2) makes for_each_chunk halve the chunk and retry.
  auto process = [&](std::size_t begin, std::size_t end) -> int {
    const std::size_t n = end - begin;
    CUdeviceptr points = 0, grids = 0;
    CUresult rc = cu.mem_alloc(&points, n * j.points * 3 * sizeof(float));
    if (rc != CUDA_SUCCESS) return rc;
    rc = cu.mem_alloc(&grids, n * cells);
    if (rc != CUDA_SUCCESS) {
      cu.mem_free(points);
      return rc;
    }
    std::vector<float> host(n * j.points * 3);
    for (std::size_t c = 0; c < n; ++c)
      make_cloud(begin + c, j.points, &host[c * j.points * 3]);
    std::vector<unsigned char> out(n * cells);
    if ((rc = cu.memcpy_htod(points, host.data(), host.size() * sizeof(float))) == CUDA_SUCCESS &&
        (rc = cu.memset_d8(grids, 0, n * cells)) == CUDA_SUCCESS &&
        (rc = backend.voxelize(points, n, j.points, grids, j.grid)) == CUDA_SUCCESS)
      rc = cu.memcpy_dtoh(out.data(), grids, out.size());
    cu.mem_free(grids);
    cu.mem_free(points);
    if (rc != CUDA_SUCCESS) return rc;
    for (std::size_t c = 0; c < n; ++c) {
      const unsigned char* g = &out[c * cells];
      cloud_hash[begin + c] = fnv1a(g, cells);
      std::uint64_t occ = 0;
      for (std::size_t k = 0; k < cells; ++k)
        occ += g[k];
      cloud_occupied[begin + c] = occ;
    }
    return 0;
  };

  gmem_mark(j.unchunked ? "voxelize: unchunked" : "voxelize: chunked");
  if (j.stream) {
    // The clouds' ids come from a source that cannot say how many there are (a sensor, a
    // queue); for_each_batch samples their cost, plans batches and holds one at a time.
    cloud_source source{j.clouds};
    gmem::chunk_options co;
    co.safety_fraction = j.safety;
    auto batch = [&](std::span<const std::size_t> ids, std::size_t first) {
      return process(first, first + ids.size());
    };
    gmem::stream_options so;
    so.sample_items = 8;
    const gmem::chunk_result r =
        j.measure ? gmem::for_each_batch(cloud_source::iterator{&source}, std::default_sentinel,
                                         gmem::measured, batch, co, {}, so)
                  : gmem::for_each_batch(cloud_source::iterator{&source}, std::default_sentinel,
                                         per_cloud, batch, co, {}, so);
    std::printf("voxelize: streamed %zu clouds in %zu batches, %zu out-of-memory retries; cost "
                "%s %.2f MiB per cloud\n",
                r.items_done, r.chunks_run, r.ooms, j.measure ? "measured" : "declared",
                static_cast<double>(r.bytes_per_item) / (1 << 20));
    if (!r) {
      std::fprintf(stderr, "%s\n", r.message.c_str());
      return 1;
    }
  } else if (j.unchunked) {
    const int rc = process(0, j.clouds);
    if (rc != 0) {
      std::fprintf(stderr, "voxelize: the unchunked batch failed with CUresult %d%s; exiting\n", rc,
                   rc == gmem::k_cuda_out_of_memory ? " (out of memory: raise GMEM_LIMIT)" : "");
      return 1;
    }
  } else {
    gmem::chunk_options co;
    co.safety_fraction = j.safety;
    gmem::chunk_plan plan = gmem::plan_chunks(j.clouds, per_cloud, co);
    std::printf("voxelize: plan: %.1f MiB allocatable x %.2f safety -> %zu chunks of %zu clouds "
                "(last %zu), %.1f MiB per chunk%s\n",
                static_cast<double>(plan.available_bytes) / (1 << 20), j.safety, plan.chunk_count,
                plan.chunk_items, plan.last_chunk_items,
                static_cast<double>(plan.bytes_per_chunk) / (1 << 20),
                plan.fits ? "" : " (does not fit: retries will adapt)");
    if (j.chunk != 0) {
      plan.chunk_items = j.chunk;
      std::printf("voxelize: --chunk: starting from %zu clouds per chunk instead\n", j.chunk);
    }
    gmem::retry_options ro;
    ro.on_progress = [](const gmem::chunk_progress& p) {
      std::printf("voxelize:   clouds [%zu, %zu) done (%zu/%zu); next chunk %zu clouds; %zu OOMs "
                  "so far\n",
                  p.begin, p.end, p.items_done, p.total_items, p.chunk_items, p.ooms);
    };
    const gmem::chunk_result r = gmem::for_each_chunk(j.clouds, plan, process, ro);
    std::printf("voxelize: %zu chunks run, %zu out-of-memory retries, %zu halvings, %zu growths\n",
                r.chunks_run, r.ooms, r.halvings, r.growths);
    if (!r) {
      std::fprintf(stderr, "%s\n", r.message.c_str());
      return 1;
    }
  }
  std::uint64_t checksum = 1469598103934665603ull, occupied = 0;
  for (std::size_t c = 0; c < j.clouds; ++c) {
    checksum = fnv1a(reinterpret_cast<const unsigned char*>(&cloud_hash[c]), 8, checksum);
    occupied += cloud_occupied[c];
  }
  std::printf("voxelize: checksum=%016" PRIx64 " occupied_voxels=%" PRIu64 "\n", checksum,
              occupied);
  char report[8192];
  if (gmem_memory_report(report, sizeof report) == GMEM_OK) std::fputs(report, stdout);
  return 0;
}
