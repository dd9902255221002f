# Examples and `make demo`. The examples reach the driver through
# dlopen("libcuda.so.1") and the gmem API through libgmem_client.so, so one binary runs on a
# GPU, on the simulated device (tests/fake_cuda) and under `gmem run`.
EXAMPLES_DIR := $(BUILD)/examples
EXAMPLES := $(EXAMPLES_DIR)/leaky_pipeline $(EXAMPLES_DIR)/voxelize
$(BUILD)/examples/%.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)

# The voxelize kernel as PTX text inside the program (empty without nvcc: host compute only).
VOXEL_PTX := $(EXAMPLES_DIR)/voxelize_kernel.ptx
$(VOXEL_PTX): examples/voxelize_kernel.cu
	@mkdir -p $(@D)
	@if [ -x "$(NVCC)" ]; then echo "$(NVCC) -ptx -arch=sm_90 $< -o $@"; $(NVCC) -ptx -arch=sm_90 $< -o $@; \
	 else echo "examples: $(NVCC) not found; voxelize will compute on the host only"; : > $@; fi
$(EXAMPLES_DIR)/voxelize_ptx.cpp: $(VOXEL_PTX)
	@{ printf '// Generated from examples/voxelize_kernel.cu by examples/examples.mk.\n'; \
	   printf 'extern const char k_voxelize_ptx[];\nconst char k_voxelize_ptx[] = R"gmemptx('; \
	   cat $<; printf ')gmemptx";\n'; } > $@
$(EXAMPLES_DIR)/voxelize_ptx.o: $(EXAMPLES_DIR)/voxelize_ptx.cpp
	$(CXX) -std=c++20 -O0 -fPIC -c $< -o $@

$(EXAMPLES_DIR)/leaky_pipeline: $(BUILD)/examples/leaky_pipeline.o $(CLIENT_LIB)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $< -L$(BUILD)/lib -lgmem_client -Wl,-rpath,'$$ORIGIN/../lib' -ldl
$(EXAMPLES_DIR)/voxelize: $(BUILD)/examples/voxelize.o $(BUILD)/examples/voxel_backend.o \
                          $(EXAMPLES_DIR)/voxelize_ptx.o $(CLIENT_LIB)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter %.o,$^) -L$(BUILD)/lib -lgmem_client \
	  -Wl,-rpath,'$$ORIGIN/../lib' -ldl

.PHONY: examples demo
examples: $(EXAMPLES)
LIBS_ALL += $(EXAMPLES)

# The README's main job: build what the demo needs, run the examples under `gmem run` (on the
# simulated device when there is no GPU), then show `gmem leaks` and `gmem frag`.
demo:
	@scripts/install-deps.sh demo
	@BUILD=$(BUILD) MAKE="$(MAKE)" scripts/demo.sh

# The same examples on a GPU, chunked vs unchunked (scripts/gpu-examples.sh); skips without one.
GPU_TESTS += scripts/gpu-examples.sh
GPU_TEST_DEPS += $(EXAMPLES)
