// Prints the GMEM_* options table (common/options.h) as tab-separated lines, one row each:
//   NAME  TYPE  DEFAULT  HELP  FLAG  CATEGORY
// `gmem run`'s flags come from the same rows (tools/commands/cmd_run.cpp). scripts/gen-docs.py
// turns them into README's option table (checked by tests/install/options_doc_test.sh),
// gmem-options(7) and the bash completion, so none of them can drift from what the shim
// parses and `gmem run --help` prints.
#include <cstdio>

#include "common/options.h"
#include "tools/commands/run_env.h"

namespace {

const char* type_name(gmem::option_type t) {
  switch (t) {
  case gmem::option_type::flag:
    return "flag";
  case gmem::option_type::count:
    return "count";
  case gmem::option_type::size:
    return "size";
  case gmem::option_type::size_percent:
    return "size or %";
  case gmem::option_type::text:
    return "text";
  case gmem::option_type::duration:
    return "duration";
  }
  return "?";
}

const char* category_name(gmem::option_category c) {
  switch (c) {
  case gmem::option_category::tune:
    return "tune";
  case gmem::option_category::fallback:
    return "fallback";
  case gmem::option_category::diagnosis:
    return "diagnosis";
  case gmem::option_category::testing:
    return "testing";
  }
  return "?";
}

} // namespace

int main() {
  std::size_t n = 0;
  const gmem::option_row* rows = gmem::option_rows(&n);
  for (std::size_t i = 0; i < n; ++i) {
    const gmem::option_row& r = rows[i];
    const char* shown = r.default_text[0] != '\0' ? r.default_text : r.empty_means;
    std::printf("%s\t%s\t%s\t%s\t%s\t%s\n", r.env_name, type_name(r.type), shown, r.help,
                gmem::tools::flag_name_of(r.field).c_str(), category_name(r.category));
  }
  return 0;
}
