# gmem — top-level build.
#   make              build everything into build/ (libgmem.so, gmem, tests, benchmarks)
#   make test         build and run every test that needs no GPU (installs missing Debian packages)
#   make test-asan    the pool/profiler/tools unit tests under ASan+UBSan (build/asan)
#   make test-tsan    the same under TSan (build/tsan)
#   make test-gpu     GPU tests; exits 0 with a "skipped" line when no GPU is present
#                     (GMEM_PREBUILT=1: run what build/ holds, build nothing)
#   make demo         the main job: an example program run under `gmem run`
#   make format-check / make format
#   make install      bin/gmem, the shim, the client library, headers, Python package, man pages,
#                     completion, pkg-config and CMake files into $(DESTDIR)$(PREFIX) (/usr/local);
#                     make uninstall removes exactly those (PREFIX/share/gmem/install-manifest.txt)
#   make dist         relocatable tarball build/dist/gmem-VERSION-linux-x86_64.tar.gz
#   make wheel        build/dist/gmem-VERSION-py3-none-manylinux_2_XX_x86_64.whl
# Variables: BUILD (build), MODE (release|debug: debug runs is_valid() after each mutation),
# WERROR (1; 0 for packagers), CUDA_HOME (/usr/local/cuda), SAN (internal: asan|tsan),
# J (jobs: one per core unless -jN is given), PREFIX, DESTDIR.
#
# Each part of the tree adds its targets through its own fragment (pool/pool.mk, ...), appending to:
#   LIBS_ALL     libraries and programs built by `make`
#   UNIT_TESTS   GoogleTest binaries run by `make test`
#   SAN_TESTS    GoogleTest binaries also run under sanitizers (must not need LD_PRELOAD)
#   TEST_SCRIPTS end-to-end scripts run by `make test` (exit 0 pass, 77 skip, else fail)
#   GPU_TESTS    scripts run by `make test-gpu`
.DEFAULT_GOAL := all
SHELL := /bin/bash

# Parallel by default: one job per core (J=N to choose). A -jN on the command line wins over
# this; sub-makes (MAKELEVEL > 0) share their parent's job server instead of starting another.
ifeq ($(MAKELEVEL),0)
J ?= $(shell nproc 2>/dev/null || echo 2)
MAKEFLAGS += -j$(J)
endif

BUILD     ?= build
MODE      ?= release
WERROR    ?= 1
SAN       ?=
CUDA_HOME ?= /usr/local/cuda
CXX       ?= g++
CC        ?= gcc
NVCC      ?= $(CUDA_HOME)/bin/nvcc

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wconversion
ifeq ($(WERROR),1)
WARN += -Werror
endif
ifeq ($(MODE),debug)
OPT := -O0 -g -DGMEM_DEBUG=1
else
OPT := -O2 -g
endif
ifeq ($(SAN),asan)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SAN),tsan)
SANFLAGS := -fsanitize=thread
else
SANFLAGS :=
endif

GMEM_CXXFLAGS := -std=c++20 $(OPT) -fPIC -fvisibility=hidden $(WARN) $(SANFLAGS)
GMEM_CPPFLAGS := -I. -Iinclude -MMD -MP
GMEM_LDFLAGS  := $(SANFLAGS)
CUDA_CPPFLAGS := -isystem $(CUDA_HOME)/include
GTEST_LIBS    := -lgtest_main -lgtest -pthread
BENCH_LIBS    := -lbenchmark -pthread

LIBS_ALL :=
UNIT_TESTS :=
SAN_TESTS :=
TEST_SCRIPTS :=
GPU_TESTS :=

# One rule compiles every C++ file: build/<path>.o from <path>.cpp. A fragment adds flags for
# its own objects with target-specific variables, e.g.
#   $(BUILD)/interpose/%.o: EXTRA_CPPFLAGS += $(CUDA_CPPFLAGS)
$(BUILD)/%.o: %.cpp | deps-build
	@mkdir -p $(@D)
	$(CXX) $(GMEM_CPPFLAGS) $(EXTRA_CPPFLAGS) $(GMEM_CXXFLAGS) $(EXTRA_CXXFLAGS) $(CXXFLAGS) -c $< -o $@

# Fragments, one per part of the tree; a missing one is an error (a lost file must not
# silently drop its targets and tests).
include common/common.mk pool/pool.mk profiler/profiler.mk interpose/interpose.mk
include tools/tools.mk include/include.mk examples/examples.mk bench/bench.mk
include packaging/packaging.mk

.PHONY: all test test-run test-asan test-tsan test-gpu san-run deps-build deps-test format format-check \
        clean help
# What a package enables (gmem-exporter with prometheus-cpp) is decided when make reads its
# files, so a fresh machine's first `make` or `make test` installs the packages first and then
# reads them again in a sub-make.
ifeq ($(MAKELEVEL),0)
all: deps-build
	@$(MAKE) --no-print-directory all
else
all: $(LIBS_ALL)
endif

deps-build:
	@scripts/install-deps.sh build
deps-test:
	@scripts/install-deps.sh test

export GMEM_BUILD := $(abspath $(BUILD))
test: deps-test
	@$(MAKE) --no-print-directory test-run
test-run: $(UNIT_TESTS) $(TEST_SCRIPT_DEPS) $(LIBS_ALL)
	@scripts/run-tests.sh $(UNIT_TESTS) $(TEST_SCRIPTS)

test-asan: deps-test
	@$(MAKE) --no-print-directory SAN=asan BUILD=build/asan san-run
test-tsan: deps-test
	@$(MAKE) --no-print-directory SAN=tsan BUILD=build/tsan san-run
san-run: $(SAN_TESTS)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	 GMEM_TEST_LOG=$(BUILD)/test-logs scripts/run-tests.sh $(SAN_TESTS)

# On a GPU machine without package registries, build here and carry build/, then run
# `make test-gpu GMEM_PREBUILT=1` there: it runs the GPU tests without building anything.
ifeq ($(GMEM_PREBUILT),1)
test-gpu:
	@scripts/run-gpu-tests.sh $(GPU_TESTS)
else
test-gpu: all $(GPU_TEST_DEPS)
	@scripts/run-gpu-tests.sh $(GPU_TESTS)
endif

FORMAT_FILES = $(shell git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' '*.c')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "format-check: $(words $(FORMAT_FILES)) files clean"

clean:
	rm -rf build

help:
	@sed -n '2,17p' Makefile | sed 's/^# \{0,1\}//'

# Header dependencies written by -MMD.
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
