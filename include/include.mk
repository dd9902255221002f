# Client API: libgmem_client.so, its tests. The examples and `make demo` live in
# examples/examples.mk. include/gmem/ itself is header-only.
CLIENT_SRCS := client/client.cpp client/driver.cpp
CLIENT_OBJS := $(CLIENT_SRCS:%.cpp=$(BUILD)/%.o)
CLIENT_LIB  := $(BUILD)/lib/libgmem_client.so
$(BUILD)/client/%.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
# libstdc++/libgcc linked in (only gmem_* is exported), so the library, like the shim, needs
# no compiler runtime on the host: C programs and Python's ctypes load it anywhere.
$(CLIENT_LIB): $(CLIENT_OBJS) $(COMMON_LIB) client/client.map
	@mkdir -p $(@D)
	$(CXX) -shared $(GMEM_LDFLAGS) -Wl,-soname,libgmem_client.so -Wl,--version-script=client/client.map \
	  -o $@ $(CLIENT_OBJS) $(COMMON_LIB) -ldl -static-libstdc++ -static-libgcc
LIBS_ALL += $(CLIENT_LIB)

# Unit tests of planning and retries (no driver needed: availability is passed in or faked).
API_TEST := $(BUILD)/tests/api_test
API_TEST_SRCS := $(wildcard tests/api/*_test.cpp)
$(API_TEST): $(API_TEST_SRCS:%.cpp=$(BUILD)/%.o) $(CLIENT_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $(filter %.o,$^) $(COMMON_LIB) -L$(BUILD)/lib -lgmem_client \
	  -Wl,-rpath,'$$ORIGIN/../lib' $(GTEST_LIBS)
UNIT_TESTS += $(API_TEST)
SAN_TESTS += $(API_TEST)
# The public headers must build as C++17 (nvcc's default dialect): this test file is compiled
# so (the later -std wins), the rest of api_test as C++20.
$(BUILD)/tests/api/cxx17_test.o: EXTRA_CXXFLAGS += -std=c++17

# The public headers in a .cu file, compiled by nvcc (device code included) in its default
# dialect and in C++20; skipped where no nvcc is installed.
TEST_SCRIPTS += tests/api/headers_nvcc_test.sh

# End-to-end: the C API with and without the shim, over the fake driver; the Python package.
API_PROBE := $(BUILD)/tests/api/api_probe
# Plain C (gnu11 for dlsym's function pointers), so gmem.h is checked as a C header.
$(BUILD)/tests/api/api_probe.o: tests/api/api_probe.c include/gmem/gmem.h | deps-build
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -Iinclude -O2 -g -Wall -Wextra -Wconversion -Werror $(SANFLAGS) -c $< -o $@
$(API_PROBE): $(BUILD)/tests/api/api_probe.o $(CLIENT_LIB)
	@mkdir -p $(@D)
	$(CC) $(GMEM_LDFLAGS) -o $@ $< -L$(BUILD)/lib -lgmem_client -Wl,-rpath,'$$ORIGIN/../../lib' -ldl
TEST_SCRIPTS += tests/api/api_e2e.sh tests/api/python_test.sh
TEST_SCRIPT_DEPS += $(API_PROBE) $(CLIENT_LIB) $(FAKE_CUDA_LIB) $(SHIM_LIB)
