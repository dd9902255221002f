// Where examples/voxelize computes: a PTX kernel on a GPU, or the host on the simulated
// device (which runs no modules). Both read the points from device memory and write the
// occupancy grids to device memory, so the surrounding driver calls (and gmem's view of
// them) are the same either way, and both produce identical grids.
#pragma once

#include "examples/cuda_driver.h"

#include <string>

namespace examples {

class voxel_backend {
public:
  // force_host: compute on the host even when kernels can run (to compare the two).
  voxel_backend(const cuda_driver& cu, bool force_host);
  const std::string& name() const { return name_; }
  // grids[c][z][y][x] = 1 for every point of cloud c (grids must be zeroed). points holds
  // clouds * points_per_cloud (x, y, z) floats in [0, 1).
  CUresult voxelize(CUdeviceptr points, std::size_t clouds, std::size_t points_per_cloud,
                    CUdeviceptr grids, int grid) const;

private:
  const cuda_driver& cu_;
  CUfunction kernel_ = nullptr;
  std::string name_;
};

// Host reference: the same arithmetic as examples/voxelize_kernel.cu.
void voxelize_host(const float* points, std::size_t clouds, std::size_t points_per_cloud,
                   unsigned char* grids, int grid);

} // namespace examples
