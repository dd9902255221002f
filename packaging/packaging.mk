# Installing and shipping gmem (issue 18): generated reference pages.
GMEM_VERSION := $(shell cat VERSION)

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

TEST_SCRIPTS += tests/install/options_doc_test.sh
TEST_SCRIPT_DEPS += $(OPTIONS_TABLE) $(GMEM_DOCS)
