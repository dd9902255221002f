#include "common/options.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <strings.h>
#include <sys/auxv.h>
#include <type_traits>

#include "common/framework_env.h"

namespace gmem {
namespace {

const option_row k_rows[] = {
#define GMEM_OPTION_ROW(field, env, type, category, def, empty, help)                              \
  {#field, env, option_type::type, option_category::category, def, empty, help},
    GMEM_OPTIONS(GMEM_OPTION_ROW)
#undef GMEM_OPTION_ROW
};

std::string shown_default(const char* def, const char* empty) {
  return def[0] != '\0' ? std::string(def) : std::string(empty);
}

// Each parse_* returns false when `text` is not a value of the type; `out` is then untouched.
bool parse_value(std::string_view text, option_value::flag& out) {
  static const char* const k_true[] = {"1", "yes", "on", "true", "y"};
  static const char* const k_false[] = {"0", "no", "off", "false", "n"};
  std::string s(text);
  for (const char* t : k_true) {
    if (strcasecmp(s.c_str(), t) == 0) {
      out = true;
      return true;
    }
  }
  for (const char* f : k_false) {
    if (strcasecmp(s.c_str(), f) == 0) {
      out = false;
      return true;
    }
  }
  return false;
}
bool parse_count(std::string_view text, std::uint64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = v;
  return true;
}
bool parse_size_value(std::string_view text, std::uint64_t& out) {
  if (text.empty()) {
    out = 0;
    return true;
  }
  auto v = parse_size(text);
  if (!v) return false;
  out = *v;
  return true;
}
bool parse_value(std::string_view text, option_value::size_percent& out) {
  if (text.empty()) {
    out = {};
    return true;
  }
  auto v = parse_size_or_percent(text);
  if (!v) return false;
  out = *v;
  return true;
}
[[maybe_unused]] bool parse_value(std::string_view text, option_value::text& out) {
  out = std::string(text);
  return true;
}
bool parse_duration_value(std::string_view text, std::uint64_t& out) {
  if (text.empty()) {
    out = 0;
    return true;
  }
  auto v = parse_duration_ns(text);
  if (!v) return false;
  out = *v;
  return true;
}

// Dispatch on the row's declared type (several types share a C++ type).
template <typename T> bool parse_typed(option_type type, std::string_view text, T& out) {
  if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, size_or_percent> ||
                std::is_same_v<T, std::string>) {
    (void)type;
    return parse_value(text, out);
  } else {
    switch (type) {
    case option_type::count:
      return parse_count(text, out);
    case option_type::size:
      return parse_size_value(text, out);
    case option_type::duration:
      return parse_duration_value(text, out);
    default:
      return false;
    }
  }
}

const char* type_noun(option_type type) {
  switch (type) {
  case option_type::flag:
    return "0 or 1";
  case option_type::count:
    return "a whole number";
  case option_type::size:
    return "a size";
  case option_type::size_percent:
    return "a size";
  case option_type::text:
    return "text";
  case option_type::duration:
    return "a duration";
  }
  return "valid";
}

} // namespace

const option_row* option_rows(std::size_t* count) {
  *count = sizeof(k_rows) / sizeof(k_rows[0]);
  return k_rows;
}

options options::defaults() {
  options o;
#define GMEM_OPTION_DEFAULT(field, env, type, category, def, empty, help)                          \
  (void)parse_typed(option_type::type, def, o.field);
  GMEM_OPTIONS(GMEM_OPTION_DEFAULT)
#undef GMEM_OPTION_DEFAULT
  return o;
}

options options::parse(const std::function<const char*(const char*)>& lookup,
                       const std::function<void(const std::string&)>& warn) {
  options o = defaults();
#define GMEM_OPTION_PARSE(field, env, type, category, def, empty, help)                            \
  if (const char* text = lookup(env); text != nullptr) {                                           \
    if (parse_typed(option_type::type, text, o.field)) {                                           \
      o.field##_set = true;                                                                        \
    } else {                                                                                       \
      warn(std::string("gmem: warning: ") + env + "='" + text + "' is not " +                      \
           type_noun(option_type::type) + "; using " + shown_default(def, empty));                 \
    }                                                                                              \
  }
  GMEM_OPTIONS(GMEM_OPTION_PARSE)
#undef GMEM_OPTION_PARSE
  // Arena pages are mapped and unmapped whole and must tile the arena's aligned address space:
  // a power of two. 2 MiB is the VMM granularity of the H200 (cuMemGetAllocationGranularity).
  if (const std::uint64_t mb = o.arena_page_mb;
      o.arena_page_mb_set && (mb < 2 || (mb & (mb - 1)) != 0 || mb > (std::uint64_t{1} << 20))) {
    const options d = defaults();
    warn(std::string("gmem: warning: GMEM_ARENA_PAGE_MB='") + lookup("GMEM_ARENA_PAGE_MB") +
         "' is not a power of two from 2 to 1048576; using " + std::to_string(d.arena_page_mb));
    o.arena_page_mb = d.arena_page_mb;
    o.arena_page_mb_set = false;
  }
  // Options of the fallback policy (pool/pool.h) do nothing while the arena serves large
  // requests: say so instead of letting a user tune them in vain.
  if (o.arena) {
    auto fallback_only = [&](bool set, const char* env) {
      if (set)
        warn(std::string("gmem: warning: ") + env + "='" + lookup(env) +
             "' applies only without the arena (GMEM_ARENA=0, or a device without virtual "
             "memory management); the arena (GMEM_ARENA=1, the default) ignores it");
    };
    fallback_only(o.large_segment_set, "GMEM_LARGE_SEGMENT");
    fallback_only(o.oversize_set, "GMEM_OVERSIZE");
  }
  // Values that parse but cannot work are refused too, naming the option and what happens.
  const options d = defaults();
  if (frameworks_mode mode; o.frameworks_set && !parse_frameworks_mode(o.frameworks, mode)) {
    warn(std::string("gmem: warning: GMEM_FRAMEWORKS='") + lookup("GMEM_FRAMEWORKS") +
         "' is not observe, pool or off; using " + d.frameworks);
    o.frameworks = d.frameworks;
    o.frameworks_set = false;
  }
  if (o.limit_set && !o.limit.is_percent && o.limit.bytes != 0 && o.limit.bytes < k_min_limit) {
    warn(std::string("gmem: warning: GMEM_LIMIT='") + lookup("GMEM_LIMIT") +
         "' is below 1 MiB: every allocation would fail; using no limit");
    o.limit = d.limit;
    o.limit_set = false;
  }
  // Tables larger than a reader reads (64 GiB, profiler/reader/trace_objects.cpp) are useless, and
  // beyond that the byte counts overflow.
  if (o.trace_live_set && o.trace_live > k_max_trace_live) {
    warn(std::string("gmem: warning: GMEM_TRACE_LIVE='") + lookup("GMEM_TRACE_LIVE") +
         "' is more than " + std::to_string(k_max_trace_live) +
         " (128 bytes of /dev/shm each); using " + std::to_string(d.trace_live));
    o.trace_live = d.trace_live;
    o.trace_live_set = false;
  }
  if (o.trace_events_set && o.trace_events > k_max_trace_events) {
    warn(std::string("gmem: warning: GMEM_TRACE_EVENTS='") + lookup("GMEM_TRACE_EVENTS") +
         "' is more than " + std::to_string(k_max_trace_events) +
         " (64 bytes of /dev/shm each); using " + std::to_string(d.trace_events));
    o.trace_events = d.trace_events;
    o.trace_events_set = false;
  }
  return o;
}

void options::warn_once(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string>* printed = new std::set<std::string>; // used during exit
  std::lock_guard lock(mu);
  if (printed->insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

namespace {

std::atomic<const bool*> g_secure_for_testing{nullptr};

bool secure_execution() {
  if (const bool* forced = g_secure_for_testing.load()) return *forced;
  return getauxval(AT_SECURE) != 0;
}

} // namespace

void options::set_secure_for_testing(const bool* secure) {
  g_secure_for_testing.store(secure);
}

const char* options::env_value(const char* name) {
  if (std::strncmp(name, "GMEM_", 5) == 0 && secure_execution()) return nullptr;
  return std::getenv(name);
}

options options::from_env() {
  if (secure_execution()) {
    std::string ignored;
    for (const option_row& row : k_rows)
      if (std::getenv(row.env_name) != nullptr)
        ignored += (ignored.empty() ? "" : ", ") + std::string(row.env_name);
    if (!ignored.empty())
      warn_once("gmem: warning: " + ignored +
                " ignored: this process runs with privileges its caller lacks (setuid, setgid "
                "or file capabilities: AT_SECURE); every gmem option has its default");
  }
  return parse(&env_value, &warn_once);
}

} // namespace gmem
