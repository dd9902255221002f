// The GPU half of examples/voxelize: one thread per point marks its voxel. Compiled to PTX
// (nvcc -ptx -arch=sm_90), embedded in the example and loaded with cuModuleLoadData, so the
// example itself needs no CUDA runtime. Must agree bit for bit with voxelize_host() in
// examples/voxel_backend.cpp: one float multiply per axis, truncation, clamp.
extern "C" __global__ void voxelize(const float* points, unsigned long long points_per_cloud,
                                    unsigned long long total_points, unsigned char* grids,
                                    int grid) {
  const unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i >= total_points) return;
  const unsigned long long cloud = i / points_per_cloud;
  int v[3];
  for (int a = 0; a < 3; ++a) {
    int c = (int)(points[3 * i + a] * (float)grid);
    v[a] = c < 0 ? 0 : (c >= grid ? grid - 1 : c);
  }
  const unsigned long long cells = (unsigned long long)grid * grid * grid;
  grids[cloud * cells + ((unsigned long long)v[2] * grid + v[1]) * grid + v[0]] = 1;
}
