# tools/: the gmem command. Analyses, renderers, exports and the commands' helpers go into a
# static archive that the unit tests link; the command's entry points (commands/main.cpp,
# commands/cmd_*.cpp) only into the binary. tools/prometheus/ is gmem-exporter's, below.
TOOLS_CMD_SRCS  := tools/commands/main.cpp $(wildcard tools/commands/cmd_*.cpp)
TOOLS_CORE_SRCS := $(filter-out $(TOOLS_CMD_SRCS),$(wildcard tools/*.cpp tools/commands/*.cpp \
                     tools/analysis/*.cpp tools/render/*.cpp tools/export/*.cpp))
TOOLS_CORE_LIB  := $(BUILD)/lib/libgmem_tools.a
GMEM_TOOL       := $(BUILD)/bin/gmem
TOOLS_LIBS      := -ldw -lelf -lfmt -pthread

# `gmem --version` prints the release in VERSION.
$(BUILD)/tools/commands/main.o: EXTRA_CPPFLAGS += -DGMEM_VERSION=\"$(shell cat VERSION)\"
$(BUILD)/tools/commands/main.o: VERSION

# The reader of the profiler (trace bytes -> model); absent while the profiler is written.
TOOLS_READER := $(PROFILER_READER_LIB)

$(TOOLS_CORE_LIB): $(TOOLS_CORE_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

# Self-contained, so a build can be copied to a host without elfutils (a GPU machine with no
# package registry): libstdc++/libgcc linked in, elfutils' libraries copied into
# $(BUILD)/lib and found through the run path $ORIGIN/../lib.
TOOLS_BUNDLE := $(BUILD)/lib/libdw.so.1 $(BUILD)/lib/libelf.so.1 $(BUILD)/lib/libbz2.so.1.0
$(TOOLS_BUNDLE): | deps-build
	@mkdir -p $(@D)
	@src=$$(ls /usr/lib/*/$(@F) /lib/*/$(@F) 2>/dev/null | head -1); \
	 if [ -n "$$src" ]; then cp -L "$$src" $@; else echo "tools: no $(@F) to bundle" >&2; exit 1; fi
$(GMEM_TOOL): $(TOOLS_CMD_SRCS:%.cpp=$(BUILD)/%.o) $(TOOLS_CORE_LIB) $(TOOLS_READER) $(COMMON_LIB) \
              | $(TOOLS_BUNDLE)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(TOOLS_LIBS) -static-libstdc++ -static-libgcc \
	  -Wl,--disable-new-dtags,-rpath,'$$ORIGIN/../lib'
LIBS_ALL += $(GMEM_TOOL) $(TOOLS_BUNDLE)

# Unit tests: analyses over hand-built traces, printers against golden files, the pickle writer.
TOOLS_TEST_SRCS := $(wildcard tests/tools/*_test.cpp) tests/tools/sample_trace.cpp
TOOLS_TEST      := $(BUILD)/tests/tools_test
$(BUILD)/tests/tools/%.o: EXTRA_CPPFLAGS += -DGMEM_TOOLS_GOLDEN_DIR=\"$(abspath tests/tools/golden)\"
$(TOOLS_TEST): $(TOOLS_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(TOOLS_CORE_LIB) $(TOOLS_READER) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(TOOLS_LIBS) $(GTEST_LIBS)
UNIT_TESTS += $(TOOLS_TEST)
SAN_TESTS += $(TOOLS_TEST)

# End-to-end: a driver program with three known leak sites, run under `gmem run` against the
# fake driver (no GPU), and the scripts that check every subcommand on it.
LEAK_SITES := $(BUILD)/tests/tools/leak_sites
$(BUILD)/tests/tools/leak_sites.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(BUILD)/tests/tools/leak_sites.o: EXTRA_CXXFLAGS += -O1 -fno-inline -fno-omit-frame-pointer
$(LEAK_SITES): $(BUILD)/tests/tools/leak_sites.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl
TEST_SCRIPTS += $(wildcard tests/tools/*_test.sh)
TEST_SCRIPT_DEPS += $(GMEM_TOOL) $(LEAK_SITES) $(SHIM_LIB) $(FAKE_CUDA_LIB)

# The framework readers' end-to-end program and its stand-ins for PyTorch's and cuBLAS's
# libraries (same file and function names, built from one source: FAKE_LIB selects).
FRAMEWORK_SITES := $(BUILD)/tests/tools/framework_sites
FRAMEWORK_LIB_DIR := $(BUILD)/tests/tools/fw
FRAMEWORK_LIBS := $(FRAMEWORK_LIB_DIR)/libc10_cuda.so $(FRAMEWORK_LIB_DIR)/libtorch_cuda.so \
                  $(FRAMEWORK_LIB_DIR)/libcublas.so.13
$(BUILD)/tests/tools/framework_sites.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(FRAMEWORK_SITES): $(BUILD)/tests/tools/framework_sites.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl
$(FRAMEWORK_LIB_DIR)/libc10_cuda.so: FAKE_LIB := 1
$(FRAMEWORK_LIB_DIR)/libtorch_cuda.so: FAKE_LIB := 2
$(FRAMEWORK_LIB_DIR)/libcublas.so.13: FAKE_LIB := 3
$(FRAMEWORK_LIBS): tests/tools/fake_framework_libs.cpp | deps-build
	@mkdir -p $(@D)
	$(CXX) $(GMEM_CPPFLAGS) $(CUDA_CPPFLAGS) $(GMEM_CXXFLAGS) $(CXXFLAGS) -O1 -fno-inline \
	  -DFAKE_LIB=$(FAKE_LIB) -shared $(GMEM_LDFLAGS) -o $@ $< -ldl -pthread
TEST_SCRIPT_DEPS += $(FRAMEWORK_SITES) $(FRAMEWORK_LIBS)

# gmem-exporter, the Prometheus side of `gmem exporter` (tools/prometheus/): built when
# prometheus-cpp (Debian: prometheus-cpp-dev) is installed; without it `gmem exporter` says so
# and the exporter tests skip. Linked dynamically against the system's libraries: it runs on
# monitored hosts, which install prometheus-cpp's runtime package.
PROMETHEUS_CPP := $(shell pkg-config --exists prometheus-cpp-pull 2>/dev/null && echo yes)
GMEM_EXPORTER  := $(BUILD)/bin/gmem-exporter
ifeq ($(PROMETHEUS_CPP),yes)
EXPORTER_LIB  := $(BUILD)/lib/libgmem_exporter.a
EXPORTER_LIBS := -lprometheus-cpp-pull -lprometheus-cpp-core
$(EXPORTER_LIB): $(BUILD)/tools/prometheus/fleet_metrics.o $(BUILD)/tools/prometheus/fleet_collector.o
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
$(GMEM_EXPORTER): $(BUILD)/tools/prometheus/exporter_main.o $(EXPORTER_LIB) $(TOOLS_CORE_LIB) \
                  $(TOOLS_READER) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(EXPORTER_LIBS) $(TOOLS_LIBS)
LIBS_ALL += $(GMEM_EXPORTER)

# The metric set over hand-built traces, against golden exposition text.
EXPORTER_TEST := $(BUILD)/tests/exporter_test
$(EXPORTER_TEST): $(BUILD)/tests/exporter/fleet_metrics_test.o $(BUILD)/tests/tools/sample_trace.o \
                  $(EXPORTER_LIB) $(TOOLS_CORE_LIB) $(TOOLS_READER) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(EXPORTER_LIBS) $(TOOLS_LIBS) $(GTEST_LIBS)
UNIT_TESTS += $(EXPORTER_TEST)
SAN_TESTS += $(EXPORTER_TEST)
TEST_SCRIPT_DEPS += $(GMEM_EXPORTER)
endif
TEST_SCRIPTS += $(wildcard tests/exporter/*_test.sh)

# The exporter's end-to-end test programs: one service that leaks steadily, one that is stable.
STEADY_SERVICE := $(BUILD)/tests/exporter/steady_service
$(BUILD)/tests/exporter/steady_service.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(BUILD)/tests/exporter/steady_service.o: EXTRA_CXXFLAGS += -O1 -fno-inline -fno-omit-frame-pointer
$(STEADY_SERVICE): $(BUILD)/tests/exporter/steady_service.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl
TEST_SCRIPT_DEPS += $(STEADY_SERVICE)

# Fuzzing the exports (case R4 of docs/security.md): tests/fuzz/export_fuzz.cpp decodes each input
# and exports it to Chrome JSON and a PyTorch pickle. `make test` replays the reader's committed
# corpus through it (gcc); `make fuzz` also runs it under libFuzzer (clang, ASan+UBSan) for
# FUZZ_SECONDS with an RSS limit of FUZZ_RSS_MB, so an input that makes an export allocate beyond
# what the trace holds fails the run.
EXPORT_REPLAY := $(BUILD)/tests/export_replay
# With prometheus-cpp, the exporter's metric families too (fleet_metrics needs its headers only).
ifeq ($(PROMETHEUS_CPP),yes)
EXPORT_FUZZ_METRICS := -DGMEM_FUZZ_METRICS
$(BUILD)/tests/fuzz/export_fuzz.o: EXTRA_CPPFLAGS += $(EXPORT_FUZZ_METRICS)
EXPORT_METRICS_OBJ := $(BUILD)/tools/prometheus/fleet_metrics.o
FUZZ_METRICS_OBJ := $(FUZZ_OBJ)/tools/prometheus/fleet_metrics.o
endif
$(EXPORT_REPLAY): $(BUILD)/tests/fuzz/replay_main.o $(BUILD)/tests/fuzz/export_fuzz.o \
                  $(EXPORT_METRICS_OBJ) $(TOOLS_CORE_LIB) $(TOOLS_READER) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(TOOLS_LIBS)
UNIT_TESTS += $(EXPORT_REPLAY)
SAN_TESTS += $(EXPORT_REPLAY)
FUZZ_RSS_MB ?= 2048
EXPORT_FUZZ_BIN := build/fuzz/export_fuzz
FUZZ_TOOLS_LIB := $(FUZZ_OBJ)/libgmem_tools.a
$(FUZZ_TOOLS_LIB): $(TOOLS_CORE_SRCS:%.cpp=$(FUZZ_OBJ)/%.o) $(PROFILER_READER_SRCS:%.cpp=$(FUZZ_OBJ)/%.o) \
                   $(COMMON_SRCS:%.cpp=$(FUZZ_OBJ)/%.o)
	rm -f $@ && $(AR) rcs $@ $^
$(FUZZ_OBJ)/tests/fuzz/export_fuzz.o: FUZZ_CXXFLAGS += $(EXPORT_FUZZ_METRICS)
$(EXPORT_FUZZ_BIN): $(FUZZ_OBJ)/tests/fuzz/export_fuzz.o $(FUZZ_METRICS_OBJ) $(FUZZ_TOOLS_LIB)
	clang++ $(FUZZ_CXXFLAGS) -o $@ $^ $(TOOLS_LIBS)
.PHONY: fuzz-export
fuzz: fuzz-export
fuzz-export: $(EXPORT_FUZZ_BIN)
	@mkdir -p build/fuzz/export_corpus
	$(EXPORT_FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) $(FUZZ_RUNS) -max_len=65536 \
	  -rss_limit_mb=$(FUZZ_RSS_MB) build/fuzz/export_corpus $(FUZZ_CORPUS)
