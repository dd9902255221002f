#include "examples/voxel_backend.h"

#include <vector>

extern const char k_voxelize_ptx[]; // generated from examples/voxelize_kernel.cu (may be "")

namespace examples {

void voxelize_host(const float* points, std::size_t clouds, std::size_t points_per_cloud,
                   unsigned char* grids, int grid) {
  const std::size_t cells = static_cast<std::size_t>(grid) * static_cast<std::size_t>(grid) *
                            static_cast<std::size_t>(grid);
  const std::size_t g = static_cast<std::size_t>(grid);
  for (std::size_t i = 0; i < clouds * points_per_cloud; ++i) {
    std::size_t v[3];
    for (int a = 0; a < 3; ++a) {
      const int c =
          static_cast<int>(points[3 * i + static_cast<std::size_t>(a)] * static_cast<float>(grid));
      v[a] = static_cast<std::size_t>(c < 0 ? 0 : (c >= grid ? grid - 1 : c));
    }
    grids[(i / points_per_cloud) * cells + (v[2] * g + v[1]) * g + v[0]] = 1;
  }
}

voxel_backend::voxel_backend(const cuda_driver& cu, bool force_host) : cu_(cu) {
  if (force_host) {
    name_ = "host (--host)";
    return;
  }
  if (!cu.has_modules()) {
    name_ = "host (the simulated device runs no kernels)";
    return;
  }
  if (k_voxelize_ptx[0] == '\0') {
    name_ = "host (built without nvcc: no PTX)";
    return;
  }
  CUmodule module = nullptr;
  const CUresult rc = cu.module_load_data(&module, k_voxelize_ptx);
  if (rc != CUDA_SUCCESS || cu.module_get_function(&kernel_, module, "voxelize") != CUDA_SUCCESS) {
    kernel_ = nullptr;
    name_ =
        "host (cuModuleLoadData failed with CUresult " + std::to_string(static_cast<int>(rc)) + ")";
    return;
  }
  name_ = "GPU kernel (PTX, cuLaunchKernel)";
}

CUresult voxel_backend::voxelize(CUdeviceptr points, std::size_t clouds,
                                 std::size_t points_per_cloud, CUdeviceptr grids, int grid) const {
  const std::size_t total = clouds * points_per_cloud;
  if (kernel_ != nullptr) {
    unsigned long long ppc = points_per_cloud, n = total;
    int g = grid;
    void* params[] = {&points, &ppc, &n, &grids, &g};
    const unsigned threads = 256;
    const auto blocks = static_cast<unsigned>((total + threads - 1) / threads);
    const CUresult rc =
        cu_.launch_kernel(kernel_, blocks, 1, 1, threads, 1, 1, 0, nullptr, params, nullptr);
    return rc != CUDA_SUCCESS ? rc : cu_.ctx_synchronize();
  }
  const std::size_t cells = static_cast<std::size_t>(grid) * static_cast<std::size_t>(grid) *
                            static_cast<std::size_t>(grid);
  std::vector<float> host_points(total * 3);
  std::vector<unsigned char> host_grids(clouds * cells, 0);
  CUresult rc = cu_.memcpy_dtoh(host_points.data(), points, host_points.size() * sizeof(float));
  if (rc != CUDA_SUCCESS) return rc;
  voxelize_host(host_points.data(), clouds, points_per_cloud, host_grids.data(), grid);
  return cu_.memcpy_htod(grids, host_grids.data(), host_grids.size());
}

} // namespace examples
