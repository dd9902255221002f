# pool/: the segment-block caching pool (no CUDA, no GPU). A static archive, its unit tests
# (also run under ASan+UBSan and TSan) and bench/pool_bench (Google Benchmark, fake upstream).
POOL_SRCS := $(wildcard pool/*.cpp)
POOL_OBJS := $(POOL_SRCS:%.cpp=$(BUILD)/%.o)
POOL_LIB  := $(BUILD)/lib/libgmem_pool.a
$(POOL_LIB): $(POOL_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
LIBS_ALL += $(POOL_LIB)

POOL_TEST_SRCS := $(wildcard tests/pool/*.cpp)
POOL_TEST := $(BUILD)/tests/pool_test
$(POOL_TEST): $(POOL_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(POOL_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(GTEST_LIBS)
UNIT_TESTS += $(POOL_TEST)
SAN_TESTS += $(POOL_TEST)

POOL_BENCH := $(BUILD)/bench/pool_bench
$(POOL_BENCH): $(BUILD)/bench/pool_bench.o $(POOL_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(BENCH_LIBS)
LIBS_ALL += $(POOL_BENCH)
