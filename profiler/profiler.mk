# profiler/: the trace, in three folders (docs/design.md, "Layout"):
#   format/    what writer and reader agree on byte by byte: the layout, the records, the
#              shared-memory structures (live table, intern table, rings, module map)
#   recorder/  the writer libgmem.so links: event lanes, stacks, Python frames, tensor observer
#   reader/    decoding, opening, and the object store: names, listing, retention, pid lookup,
#              save/remove
#   PROFILER_READER_LIB  format/ + reader/ (no writer, no libunwind): for tools
#   PROFILER_LIB         format/ + recorder/ + reader/ (the recorder names its object and runs
#                        retention): for libgmem.so
#   PROFILER_LDLIBS      what a program or .so linking PROFILER_LIB needs next
# Stacks: Debian's libunwind.a is not PIC, so it cannot go into libgmem.so. The recorder
# dlopen()s libunwind.so.8 at init (first the copy in $(BUILD)/lib next to libgmem.so, then the
# system's) and falls back to libgcc's unwinder when there is none (slower: see
# docs/trace-format.md, "Stacks").
PROFILER_FORMAT_SRCS := $(wildcard profiler/format/*.cpp)
PROFILER_READER_SRCS := $(PROFILER_FORMAT_SRCS) $(wildcard profiler/reader/*.cpp)
PROFILER_WRITER_SRCS := $(wildcard profiler/recorder/*.cpp)
PROFILER_READER_LIB := $(BUILD)/lib/libgmem_trace_reader.a
PROFILER_LIB := $(BUILD)/lib/libgmem_profiler.a
PROFILER_LDLIBS := -ldl -pthread  # (needs $(COMMON_LIB) too: options, units)
# Bundled unwinder for machines without libunwind (copied, never linked).
PROFILER_UNWIND_COPY := $(BUILD)/lib/libunwind.so.8 $(BUILD)/lib/liblzma.so.5

$(PROFILER_READER_LIB): $(PROFILER_READER_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
$(PROFILER_LIB): $(PROFILER_READER_SRCS:%.cpp=$(BUILD)/%.o) $(PROFILER_WRITER_SRCS:%.cpp=$(BUILD)/%.o)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
define profiler_bundle
	@mkdir -p $(@D)
	@src=$$(ls /usr/lib/*/$(@F) /usr/lib/$(@F) 2>/dev/null | head -1); \
	 if [ -n "$$src" ]; then cp -L "$$src" $@; else echo "profiler: no $(@F) to bundle; stacks use libgcc's unwinder" >&2; touch $@; fi
endef
$(BUILD)/lib/libunwind.so.8: | deps-build
	$(profiler_bundle)
$(BUILD)/lib/liblzma.so.5: | deps-build
	$(profiler_bundle)
LIBS_ALL += $(PROFILER_READER_LIB) $(PROFILER_LIB) $(PROFILER_UNWIND_COPY)

# Unit tests that need no shared memory and no other process: also under ASan and TSan.
PROFILER_TEST_SRCS := $(filter-out tests/profiler/shm_%,$(wildcard tests/profiler/*_test.cpp))
PROFILER_TEST := $(BUILD)/tests/profiler_test
$(PROFILER_TEST): $(PROFILER_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(PROFILER_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(GTEST_LIBS) $(PROFILER_LDLIBS)
UNIT_TESTS += $(PROFILER_TEST)
SAN_TESTS += $(PROFILER_TEST)

# Tests with real /dev/shm objects and child processes (fork, SIGKILL, setuid): make test only.
PROFILER_SHM_TEST := $(BUILD)/tests/profiler_shm_test
$(PROFILER_SHM_TEST): $(BUILD)/tests/profiler/shm_trace_test.o $(BUILD)/tests/profiler/shm_e2e_test.o \
                      $(BUILD)/tests/profiler/shm_security_test.o \
                      $(PROFILER_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(GTEST_LIBS) $(PROFILER_LDLIBS)
UNIT_TESTS += $(PROFILER_SHM_TEST)
# The end-to-end program (shm_e2e_test.cpp runs it under libgmem.so and the fake driver).
TRACE_E2E_PROGRAM := $(BUILD)/tests/trace_e2e_program
$(BUILD)/tests/profiler/trace_e2e_program.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(TRACE_E2E_PROGRAM): $(BUILD)/tests/profiler/trace_e2e_program.o $(BUILD)/tests/interpose/probe_driver.o
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -ldl -pthread
TEST_SCRIPT_DEPS += $(TRACE_E2E_PROGRAM) $(SHIM_LIB) $(FAKE_CUDA_LIB)
# A real full /dev/shm: a 1 MiB tmpfs in a private mount namespace (root only; else skipped);
# another user's files there (foreign_shm_test.sh, root and setpriv; else skipped).
TEST_SCRIPTS += tests/profiler/full_shm_test.sh tests/profiler/foreign_shm_test.sh \
                tests/python/python_frames_test.sh tests/python/held_to_exit_test.sh \
                tests/python/pytest_plugin_test.sh tests/python/observe_cost_test.sh

# Fuzzing the reader. `make fuzz` (clang, libFuzzer, ASan+UBSan) runs FUZZ_SECONDS (60) from
# the committed corpus; `make test` replays the corpus with a gcc-built runner.
FUZZ_CORPUS := tests/fuzz/corpus/trace_reader
TRACE_REPLAY := $(BUILD)/tests/trace_reader_replay
$(BUILD)/tests/fuzz/replay_main.o: EXTRA_CPPFLAGS += -DGMEM_FUZZ_CORPUS='"$(abspath $(FUZZ_CORPUS))"'
$(TRACE_REPLAY): $(BUILD)/tests/fuzz/replay_main.o $(BUILD)/tests/fuzz/trace_reader_fuzz.o $(PROFILER_READER_LIB) \
                 $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ -pthread
UNIT_TESTS += $(TRACE_REPLAY)
SAN_TESTS += $(TRACE_REPLAY)
MAKE_CORPUS := $(BUILD)/tests/make_corpus
$(MAKE_CORPUS): $(BUILD)/tests/fuzz/make_corpus.o $(PROFILER_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(PROFILER_LDLIBS)
FUZZ_SECONDS ?= 60
# The fuzz targets are built from objects of their own (clang, ASan+UBSan everywhere) linked
# through an archive, so a target pulls only the code it reaches. Coverage, which guides
# libFuzzer and costs a callback per comparison, is left out of the standard library, fmt and
# nlohmann (tests/fuzz/coverage_ignore.txt): their comparisons are not the code under test
# and were most of the time of each input. Sanitizer checks stay on in all of it.
FUZZ_OBJ := build/fuzz/obj
FUZZ_CXXFLAGS := -std=c++20 -O1 -g -I. -Iinclude -MMD -MP -fsanitize=fuzzer,address,undefined \
                 -fno-sanitize-recover=undefined \
                 -fsanitize-coverage-ignorelist=tests/fuzz/coverage_ignore.txt
$(FUZZ_OBJ)/%.o: %.cpp tests/fuzz/coverage_ignore.txt | deps-test
	@mkdir -p $(@D)
	clang++ $(FUZZ_CXXFLAGS) -c $< -o $@
FUZZ_READER_LIB := $(FUZZ_OBJ)/libgmem_trace_reader.a
$(FUZZ_READER_LIB): $(PROFILER_READER_SRCS:%.cpp=$(FUZZ_OBJ)/%.o) \
                    $(FUZZ_OBJ)/common/units.o $(FUZZ_OBJ)/common/safe_file.o
	rm -f $@ && $(AR) rcs $@ $^
FUZZ_BIN := build/fuzz/trace_reader_fuzz
$(FUZZ_BIN): $(FUZZ_OBJ)/tests/fuzz/trace_reader_fuzz.o $(FUZZ_READER_LIB)
	clang++ $(FUZZ_CXXFLAGS) -o $@ $^
.PHONY: fuzz fuzz-corpus
fuzz: $(FUZZ_BIN)
	@mkdir -p build/fuzz/corpus
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) $(FUZZ_RUNS) -max_len=65536 -rss_limit_mb=$(FUZZ_RSS_MB) build/fuzz/corpus $(FUZZ_CORPUS)
fuzz-corpus: $(MAKE_CORPUS)
	$(MAKE_CORPUS) $(FUZZ_CORPUS)

# Recording cost benchmark (no GPU; mean and p99 per pair): make build/bench/trace_bench
TRACE_BENCH := $(BUILD)/bench/trace_bench
$(TRACE_BENCH): $(BUILD)/bench/trace_bench.o $(BUILD)/interpose/trace_hooks.o $(PROFILER_LIB) \
                $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(PROFILER_LDLIBS)
LIBS_ALL += $(TRACE_BENCH)
$(BUILD)/tests/profiler/corpus_test.o: EXTRA_CPPFLAGS += -DGMEM_FUZZ_CORPUS='"$(abspath $(FUZZ_CORPUS))"'
