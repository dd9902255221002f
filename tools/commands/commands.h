// The subcommands of gmem. Each add_* declares its options on `app` and returns the function
// that runs it after parsing; the function returns the process exit status (exit_codes.h).
#pragma once

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

#include "profiler/reader/trace_reader.h"
#include "tools/stack_view.h"

namespace gmem::tools {

using command_fn = std::function<int()>;

command_fn add_run(CLI::App& app);
command_fn add_ps(CLI::App& app);
command_fn add_top(CLI::App& app);
command_fn add_leaks(CLI::App& app);
command_fn add_frag(CLI::App& app);
command_fn add_stats(CLI::App& app);
command_fn add_save(CLI::App& app);
command_fn add_clean(CLI::App& app);
command_fn add_report(CLI::App& app);
command_fn add_export(CLI::App& app);
command_fn add_exporter(CLI::App& app);
command_fn add_diff(CLI::App& app);
command_fn add_oom(CLI::App& app);

// What a TARGET argument may be (a trace object's name is as `gmem ps` shows it).
inline constexpr const char* k_target_help =
    "PID, trace object (gmem.PID.TICKS.NONCE) or saved trace FILE";

// --native / --all-frames (mutually exclusive) and the view they select.
void add_frame_view_flags(CLI::App& sub, bool& native, bool& all_frames);
frame_view frame_view_of(bool native, bool all_frames);

// "gmem: error: <message>" on stderr; returns `code`.
int fail(int code, const std::string& message);
// Writes `data` to `path` ("-" = stdout); false after printing an error. A file is created
// 0600 with O_EXCL (write_file_safely): an existing one, or a symlink planted there, is an
// error unless `replace` (--force), which renames a new file over it.
bool write_output(const std::string& path, const std::string& data, bool replace = false);
// Opens a target (pid, object name or file), prints its warnings; on failure prints the error,
// sets `status` and returns nullptr.
std::unique_ptr<gmem::trace::trace> load(const std::string& target, int& status,
                                         const gmem::trace::read_options& opts = {});
// JSON text as the --json outputs print it (invalid UTF-8 replaced, 2-space indent).
std::string dump(const nlohmann::json& j);

} // namespace gmem::tools
