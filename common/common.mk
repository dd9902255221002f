# common/: small helpers every part uses (sizes, durations). Linked as a static archive.
COMMON_SRCS := $(wildcard common/*.cpp)
COMMON_OBJS := $(COMMON_SRCS:%.cpp=$(BUILD)/%.o)
COMMON_LIB  := $(BUILD)/lib/libgmem_common.a
$(COMMON_LIB): $(COMMON_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^
LIBS_ALL += $(COMMON_LIB)

COMMON_TESTS_SRCS := $(wildcard tests/common/*_test.cpp)
COMMON_TEST := $(BUILD)/tests/common_test
$(COMMON_TEST): $(COMMON_TESTS_SRCS:%.cpp=$(BUILD)/%.o) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^ $(GTEST_LIBS)
UNIT_TESTS += $(COMMON_TEST)
SAN_TESTS += $(COMMON_TEST)
