# interpose/: libgmem.so, the LD_PRELOAD shim (docs/design.md "Interception"), its fake driver and
# its tests. Never linked with -lcuda: the shim dlopen()s libcuda.so.1 itself.
#   SHIM_LIB       $(BUILD)/lib/libgmem.so
#   FAKE_CUDA_LIB  $(BUILD)/tests/fake_cuda/libcuda.so.1 (the driver subset on host memory)
SHIM_SRCS := $(wildcard interpose/*.cpp interpose/*/*.cpp)
SHIM_OBJS := $(SHIM_SRCS:%.cpp=$(BUILD)/%.o)
SHIM_LIB  := $(BUILD)/lib/libgmem.so
SHIM_MAP  := interpose/libgmem.map
SHIM_LINK_LIBS := $(POOL_LIB) $(if $(PROFILER_LIB),$(PROFILER_LIB)) $(COMMON_LIB)

$(BUILD)/interpose/%.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(BUILD)/tests/fake_cuda/%.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(BUILD)/tests/interpose/%.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)

# shim_link OBJECTS: the link line of the shim and of its test build below. Self-contained:
# libstdc++/libgcc linked in, everything but the hooks hidden (version script), $ORIGIN in the
# run path for what the recorder loads from beside the library.
shim_link = $(CXX) -shared -o $@ $(1) $(SHIM_LINK_LIBS) $(GMEM_LDFLAGS) \
  -Wl,-soname,libgmem.so -Wl,--version-script=$(SHIM_MAP) -Wl,--no-undefined \
  -Wl,-z,nodelete -Wl,-rpath,'$$ORIGIN' -static-libstdc++ -static-libgcc \
  $(PROFILER_LDLIBS) -ldl -pthread
$(SHIM_LIB): $(SHIM_OBJS) $(SHIM_LINK_LIBS) $(SHIM_MAP)
	@mkdir -p $(@D)
	$(call shim_link,$(SHIM_OBJS))
LIBS_ALL += $(SHIM_LIB)

# A test build of the shim whose context barrier orders nothing (GMEM_TEST_NOOP_BARRIER in
# interpose/upstream/stream_registry.cpp): tests/gpu/noop_barrier_test.sh shows the GPU's
# reuse-safety tests fail with it. Built by `make test-gpu`, never installed.
SHIM_NOOP_DIR := $(BUILD)/tests/gpu/noop_barrier
SHIM_NOOP_LIB := $(SHIM_NOOP_DIR)/libgmem.so
SHIM_NOOP_OBJS := $(filter-out $(BUILD)/interpose/upstream/stream_registry.o,$(SHIM_OBJS)) \
                  $(SHIM_NOOP_DIR)/stream_registry.o
$(SHIM_NOOP_DIR)/stream_registry.o: interpose/upstream/stream_registry.cpp | deps-build
	@mkdir -p $(@D)
	$(CXX) $(GMEM_CPPFLAGS) $(CUDA_CPPFLAGS) $(GMEM_CXXFLAGS) $(CXXFLAGS) \
	  -DGMEM_TEST_NOOP_BARRIER -c $< -o $@
$(SHIM_NOOP_LIB): $(SHIM_NOOP_OBJS) $(SHIM_LINK_LIBS) $(SHIM_MAP)
	$(call shim_link,$(SHIM_NOOP_OBJS))
GPU_TEST_DEPS += $(SHIM_NOOP_LIB)

# The Python bootstrap the shim puts on PYTHONPATH (interpose/python_bootstrap.h): beside the
# library in every layout, never group- or world-writable (the shim refuses it then).
SHIM_BOOTSTRAP := $(BUILD)/lib/gmem/bootstrap/sitecustomize.py
$(SHIM_BOOTSTRAP): python/gmem_bootstrap/sitecustomize.py
	@mkdir -p $(@D) && chmod 755 $(BUILD)/lib/gmem $(@D)
	install -m 644 $< $@
LIBS_ALL += $(SHIM_BOOTSTRAP)

# The fake driver. -Bsymbolic: like the real libcuda, its cuGetProcAddress hands out its own
# functions, not the preloaded shim's symbols of the same name.
FAKE_CUDA_SRCS := $(wildcard tests/fake_cuda/*.cpp)
FAKE_CUDA_LIB  := $(BUILD)/tests/fake_cuda/libcuda.so.1
$(FAKE_CUDA_LIB): $(FAKE_CUDA_SRCS:%.cpp=$(BUILD)/%.o) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) -shared -o $@ $^ $(GMEM_LDFLAGS) -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic -pthread

# Probes the gtest driver runs under LD_PRELOAD: shim_probe reaches the driver by dlopen
# (routes dlsym and runtime), shim_probe_linked is linked against the fake (route exported).
PROBE_SRCS := tests/interpose/shim_probe.cpp tests/interpose/probe_memory.cpp \
              tests/interpose/probe_barrier.cpp tests/interpose/probe_vmm.cpp \
              tests/interpose/probe_arena.cpp tests/interpose/probe_driver.cpp \
              tests/interpose/probe_strict.cpp tests/interpose/probe_threads.cpp
SHIM_PROBE := $(BUILD)/tests/interpose/shim_probe
SHIM_PROBE_LINKED := $(BUILD)/tests/interpose/shim_probe_linked
$(SHIM_PROBE): $(PROBE_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl -pthread
$(BUILD)/tests/interpose/linked/%.o: tests/interpose/%.cpp | deps-build
	@mkdir -p $(@D)
	$(CXX) $(GMEM_CPPFLAGS) $(CUDA_CPPFLAGS) -DGMEM_PROBE_LINKED=1 $(GMEM_CXXFLAGS) -c $< -o $@
$(SHIM_PROBE_LINKED): $(PROBE_SRCS:tests/interpose/%.cpp=$(BUILD)/tests/interpose/linked/%.o) $(FAKE_CUDA_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter %.o,$^) $(FAKE_CUDA_LIB) -Wl,-rpath,'$$ORIGIN/../fake_cuda' -ldl -pthread
# Two processes sharing pooled blocks by CUDA IPC (ipc_probe exports, a child imports).
IPC_PROBE := $(BUILD)/tests/interpose/ipc_probe
$(IPC_PROBE): $(BUILD)/tests/interpose/ipc_probe.o $(FAKE_CUDA_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter %.o,$^) $(FAKE_CUDA_LIB) -Wl,-rpath,'$$ORIGIN/../fake_cuda'
# Graph memory nodes through the driver API (graph_test.sh).
GRAPH_PROBE := $(BUILD)/tests/interpose/graph_probe
$(GRAPH_PROBE): $(BUILD)/tests/interpose/graph_probe.o $(FAKE_CUDA_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter %.o,$^) $(FAKE_CUDA_LIB) -Wl,-rpath,'$$ORIGIN/../fake_cuda'
OTHER_INTERPOSER := $(BUILD)/tests/interpose/libother_interposer.so
$(OTHER_INTERPOSER): $(BUILD)/tests/interpose/other_interposer.o
	@mkdir -p $(@D)
	$(CXX) -shared -o $@ $^ $(GMEM_LDFLAGS) -ldl

INTERPOSE_TEST := $(BUILD)/tests/interpose_test
INTERPOSE_TEST_DEPS := $(SHIM_LIB) $(FAKE_CUDA_LIB) $(SHIM_PROBE) $(SHIM_PROBE_LINKED) $(OTHER_INTERPOSER) \
                       $(IPC_PROBE)
$(INTERPOSE_TEST): $(BUILD)/tests/interpose/interpose_test.o $(BUILD)/tests/interpose/child_process.o \
                   $(COMMON_LIB) | $(INTERPOSE_TEST_DEPS)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter-out $(INTERPOSE_TEST_DEPS),$^) $(GTEST_LIBS)
UNIT_TESTS += $(INTERPOSE_TEST)

# vmm_upstream's arena against the fake driver, without the hooks: the upstream objects, the
# pool library (pool::stats) and the fake, linked like shim_probe_linked.
VMM_ARENA_TEST := $(BUILD)/tests/vmm_arena_test
$(VMM_ARENA_TEST): $(BUILD)/tests/interpose/vmm_arena_test.o $(BUILD)/interpose/upstream/vmm_upstream.o \
                   $(BUILD)/interpose/upstream/vmm_pages.o $(BUILD)/interpose/upstream/vmm_retire.o \
                   $(BUILD)/interpose/upstream/device_upstream.o $(POOL_LIB) $(FAKE_CUDA_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter-out $(FAKE_CUDA_LIB),$^) $(FAKE_CUDA_LIB) \
	  -Wl,-rpath,'$$ORIGIN/fake_cuda' $(GTEST_LIBS)
UNIT_TESTS += $(VMM_ARENA_TEST)

# The fake driver's events keep the driver's rules (waits and later records), linked like the
# arena's test.
FAKE_EVENT_TEST := $(BUILD)/tests/fake_event_test
$(FAKE_EVENT_TEST): $(BUILD)/tests/interpose/fake_event_test.o $(FAKE_CUDA_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter-out $(FAKE_CUDA_LIB),$^) $(FAKE_CUDA_LIB) \
	  -Wl,-rpath,'$$ORIGIN/fake_cuda' $(GTEST_LIBS)
UNIT_TESTS += $(FAKE_EVENT_TEST)

OPTIONS_TEST := $(BUILD)/tests/options_test
$(OPTIONS_TEST): $(BUILD)/tests/interpose/options_test.o $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(GTEST_LIBS)
UNIT_TESTS += $(OPTIONS_TEST)
SAN_TESTS += $(OPTIONS_TEST)

TEST_SCRIPTS += tests/interpose/exports_test.sh tests/interpose/contexts_test.sh \
                tests/interpose/strict_run_test.sh tests/interpose/graph_test.sh
TEST_SCRIPT_DEPS += $(SHIM_LIB) $(SHIM_PROBE_LINKED) $(GMEM_TOOL) $(FAKE_CUDA_LIB) $(GRAPH_PROBE)

# GPU tests (tests/gpu/): built on the GPU machine by the scripts themselves with nvcc.
GPU_TESTS += $(wildcard tests/gpu/*_test.sh)
