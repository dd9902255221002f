# Installing and shipping gmem: generated reference pages, `make install` /
# `make uninstall` (PREFIX, DESTDIR), the relocatable tarball (`make dist`), the wheel
# (`make wheel`). The layout is written once, in scripts/stage.sh.
PREFIX  ?= /usr/local
DESTDIR ?=
GMEM_VERSION := $(shell cat VERSION)
DIST_DIR     := $(BUILD)/dist
DIST_NAME    := gmem-$(GMEM_VERSION)-linux-x86_64
DIST_TARBALL := $(DIST_DIR)/$(DIST_NAME).tar.gz

# Reference pages generated from the tables the program uses: the options table
# (common/options.h, printed by options_table) and `gmem --help-all` (scripts/gen-docs.py).
DOCS_DIR      := $(BUILD)/docs
OPTIONS_TABLE := $(DOCS_DIR)/options_table
GMEM_DOCS     := $(DOCS_DIR)/gmem.1 $(DOCS_DIR)/gmem-options.7 $(DOCS_DIR)/gmem.bash-completion
$(OPTIONS_TABLE): $(BUILD)/docs/gen/options_table.o $(TOOLS_CORE_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(CXX) $(GMEM_LDFLAGS) -o $@ $^
$(DOCS_DIR)/options.tsv: $(OPTIONS_TABLE)
	$(OPTIONS_TABLE) > $@.tmp && mv $@.tmp $@
$(DOCS_DIR)/help.txt: $(GMEM_TOOL)
	@mkdir -p $(@D)
	$(GMEM_TOOL) --help-all > $@.tmp && mv $@.tmp $@
$(DOCS_DIR)/gmem-options.7: $(DOCS_DIR)/options.tsv scripts/gen-docs.py VERSION
	python3 scripts/gen-docs.py man-options $< $(GMEM_VERSION) > $@.tmp && mv $@.tmp $@
$(DOCS_DIR)/gmem.1: $(DOCS_DIR)/help.txt $(DOCS_DIR)/options.tsv scripts/gen-docs.py VERSION
	python3 scripts/gen-docs.py man-gmem $< $(DOCS_DIR)/options.tsv $(GMEM_VERSION) > $@.tmp && mv $@.tmp $@
$(DOCS_DIR)/gmem.bash-completion: $(DOCS_DIR)/help.txt $(DOCS_DIR)/options.tsv scripts/gen-docs.py
	python3 scripts/gen-docs.py completion $< $(DOCS_DIR)/options.tsv > $@.tmp && mv $@.tmp $@
LIBS_ALL += $(OPTIONS_TABLE) $(GMEM_DOCS)

# What an installed tree is made of (scripts/stage.sh copies these).
INSTALL_DEPS := $(GMEM_TOOL) $(SHIM_LIB) $(CLIENT_LIB) $(TOOLS_BUNDLE) $(PROFILER_UNWIND_COPY) \
                $(GMEM_DOCS)

.PHONY: install uninstall dist wheel deps-package
deps-package:
	@scripts/install-deps.sh package
install: $(INSTALL_DEPS) | deps-package
	@BUILD=$(BUILD) scripts/stage.sh install "$(DESTDIR)" "$(PREFIX)"
uninstall:
	@BUILD=$(BUILD) scripts/stage.sh uninstall "$(DESTDIR)" "$(PREFIX)"

# build/dist/gmem-<version>-linux-x86_64.tar.gz: the tree of `make install`, relocatable.
# The GPU test programs (tests/gpu/*.cu, built with nvcc when present) go in
# share/gmem/gpu-check/ for scripts/gpu-install-check.sh.
dist: $(INSTALL_DEPS) | deps-package
	@BUILD=$(BUILD) DIST_DIR=$(DIST_DIR) scripts/make-dist.sh

# build/dist/gmem-<version>-py3-none-manylinux_2_XX_x86_64.whl (scripts/build-wheel.sh).
wheel: $(INSTALL_DEPS) | deps-package
	@BUILD=$(BUILD) DIST_DIR=$(DIST_DIR) scripts/build-wheel.sh

# Tests: the options table, man pages and completion agree (options_doc_test); every path the
# docs name exists (docs_paths_test); the include graph is the one docs/design.md describes
# (include_graph_test); the install, its consumers, the relocated tree, the tarball's glibc
# claim and the wheel (install_test).
TEST_SCRIPTS += tests/install/options_doc_test.sh tests/install/docs_paths_test.sh \
                tests/install/include_graph_test.sh tests/install/install_test.sh
TEST_SCRIPT_DEPS += $(OPTIONS_TABLE) $(INSTALL_DEPS) $(LEAK_SITES) $(FAKE_CUDA_LIB)
