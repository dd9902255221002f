# bench/: the GPU benchmark suite (make bench-gpu) and gmem_replay, the trace replay tool that
# needs no GPU. bench/pool_bench is built by pool/pool.mk; bench/trace_bench by the profiler's
# fragment.
#   make bench-build   build the benchmark programs (nvcc; no GPU needed)
#   make bench-gpu     run every part on this machine's GPU and write
#                      bench/results/<date>-<gpu>.{md,csv,json} (skips without a GPU)
#   make bench-report  rebuild the report from raw results: make bench-report RAW=dir
BENCH_CUDA_ARCH ?= sm_90
BENCH_NVCC_FLAGS := -arch=$(BENCH_CUDA_ARCH) -O2 -std=c++17 -I. -Xcompiler -Wall,-Wextra
BENCH_OUT ?= $(BUILD)/bench/out

# --- gmem_replay (CPU) -------------------------------------------------------------------
REPLAY_SRCS := bench/replay/alloc_trace.cpp bench/replay/replay_policy.cpp \
               bench/replay/torch_like_policy.cpp
REPLAY_OBJS := $(REPLAY_SRCS:%.cpp=$(BUILD)/%.o)
REPLAY_POOL :=
ifneq ($(POOL_LIB),)
REPLAY_OBJS += $(BUILD)/bench/replay/gmem_policy.o
REPLAY_POOL := $(POOL_LIB)
$(BUILD)/bench/replay/replay_policy.o: EXTRA_CPPFLAGS += -DGMEM_BENCH_WITH_POOL=1
$(BUILD)/bench/replay/replay_test.o: EXTRA_CPPFLAGS += -DGMEM_BENCH_WITH_POOL=1
endif
GMEM_REPLAY := $(BUILD)/bench/gmem_replay
$(GMEM_REPLAY): $(BUILD)/bench/replay/gmem_replay_main.o $(REPLAY_OBJS) $(REPLAY_POOL) \
                $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -lz -pthread
LIBS_ALL += $(GMEM_REPLAY)

BENCH_REPLAY_TEST := $(BUILD)/tests/bench_replay_test
$(BENCH_REPLAY_TEST): $(BUILD)/bench/replay/replay_test.o $(REPLAY_OBJS) $(REPLAY_POOL)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -lz $(GTEST_LIBS)
UNIT_TESTS += $(BENCH_REPLAY_TEST)
SAN_TESTS += $(BENCH_REPLAY_TEST)

# The harness's start gate (alloc_harness.h), which the multi-thread benchmarks time behind.
START_GATE_TEST := $(BUILD)/tests/start_gate_test
$(START_GATE_TEST): $(BUILD)/bench/start_gate_test.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl $(GTEST_LIBS)
UNIT_TESTS += $(START_GATE_TEST)
SAN_TESTS += $(START_GATE_TEST)

# --- GPU programs (nvcc, static runtime: see bench/alloc_bench.cu) ----------------------
$(BUILD)/bench/alloc_bench: bench/alloc_bench.cu bench/alloc_harness.h
	@mkdir -p $(@D)
	$(NVCC) $(BENCH_NVCC_FLAGS) $< -o $@ -L$(CUDA_HOME)/lib64/stubs -lcuda -ldl
$(BUILD)/bench/replay_gpu: bench/replay_gpu.cu
	@mkdir -p $(@D)
	$(NVCC) $(BENCH_NVCC_FLAGS) $< -o $@
$(BUILD)/bench/stream_alloc_bench: bench/stream_alloc_bench.cu bench/alloc_harness.h
	@mkdir -p $(@D)
	$(NVCC) $(BENCH_NVCC_FLAGS) $< -o $@
BENCH_GPU_PROGS := $(BUILD)/bench/alloc_bench $(BUILD)/bench/replay_gpu \
                   $(BUILD)/bench/stream_alloc_bench

.PHONY: bench-build bench-gpu bench-report
bench-build: $(BENCH_GPU_PROGS) $(GMEM_REPLAY)
bench-gpu: bench-build
	@$(MAKE) --no-print-directory $(BUILD)/lib/libgmem.so || \
	  echo "bench-gpu: $(BUILD)/lib/libgmem.so did not build; the gmem rows will be missing"
	BUILD=$(BUILD) bench/run_gpu.sh $(BENCH_OUT)
	@if [ -f $(BENCH_OUT)/env.json ]; then $(MAKE) --no-print-directory bench-report RAW=$(BENCH_OUT); fi
RAW ?= $(BENCH_OUT)
bench-report: $(GMEM_REPLAY)
	python3 bench/report.py --raw $(RAW) --replay $(GMEM_REPLAY) --gmem-tool $(BUILD)/bin/gmem \
	  --results bench/results

# --- hook_bench: the shim's hook path without the runtime (runs on the fake driver too) -----
HOOK_BENCH := $(BUILD)/bench/hook_bench
$(BUILD)/bench/hook_bench.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS) -Ibench
$(HOOK_BENCH): $(BUILD)/bench/hook_bench.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl -pthread
bench-build: $(HOOK_BENCH)
TEST_SCRIPTS += tests/bench/hook_rounds_test.sh
TEST_SCRIPT_DEPS += $(HOOK_BENCH)

# --- observe_bench: gmem's own ns per observed tensor event, stacks included (fake driver) ---
# Paired interleaved rounds of one or more builds of libgmem.so (bench/observe_bench.py, no GPU,
# no PyTorch), pinned to CPU OBSERVE_CPU (empty: not pinned):
#   make bench-observe [OBSERVE_LIBS="base/libgmem.so build/lib/libgmem.so"] [OBSERVE_ARGS=--split]
OBSERVE_LIBS ?= $(SHIM_LIB)
OBSERVE_CPU ?= 1
OBSERVE_ARGS ?=
.PHONY: bench-observe
bench-observe: $(SHIM_LIB) $(FAKE_CUDA_LIB)
	$(if $(OBSERVE_CPU),taskset -c $(OBSERVE_CPU)) python3 bench/observe_bench.py \
	  --fake-cuda $(dir $(FAKE_CUDA_LIB)) $(foreach l,$(OBSERVE_LIBS),--gmem-lib $(l)) $(OBSERVE_ARGS)

# --- host_costs: what clock reads and atomics on /dev/shm cost on this host (no GPU) -------
HOST_COSTS := $(BUILD)/bench/host_costs
$(HOST_COSTS): $(BUILD)/bench/probes/host_costs.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -static-libstdc++ -static-libgcc -o $@ $^ -pthread
LIBS_ALL += $(HOST_COSTS)

# --- page_prep_wait: what making a trace chunk's pages costs other threads' mmap (no GPU) ----
PAGE_PREP_WAIT := $(BUILD)/bench/page_prep_wait
$(PAGE_PREP_WAIT): $(BUILD)/bench/probes/page_prep_wait.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -static-libstdc++ -static-libgcc -o $@ $^ -pthread
LIBS_ALL += $(PAGE_PREP_WAIT)
TEST_SCRIPTS += tests/bench/page_prep_wait_test.sh
TEST_SCRIPT_DEPS += $(PAGE_PREP_WAIT)

# --- leak benchmark (bench/leaks/) -----------------------------------------------------------
# Programs with known verdicts and the runner that checks gmem's (bench/leaks/run_leaks.py).
# The native ones reach the driver through dlopen (examples/cuda_driver.h), so `make test` runs
# them on the fake driver (tests/tools/leak_bench_test.sh); the framework ones are GPU tests.
LEAK_BENCH_NATIVE := $(BUILD)/bench/leaks/native_programs
$(BUILD)/bench/leaks/native_programs.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(BUILD)/bench/leaks/native_programs.o: EXTRA_CXXFLAGS += -O1 -fno-inline -fno-omit-frame-pointer
$(LEAK_BENCH_NATIVE): $(BUILD)/bench/leaks/native_programs.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl
LIBS_ALL += $(LEAK_BENCH_NATIVE)
TEST_SCRIPT_DEPS += $(LEAK_BENCH_NATIVE)
