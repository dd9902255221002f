// The names of trace objects in /dev/shm: "gmem.<pid>.<ticks>" with the recorder's random part.
#pragma once

#include <cstdint>
#include <string>

namespace gmem::trace {

inline constexpr const char* k_shm_dir = "/dev/shm/";

// "gmem.<pid>.<proc_start_ticks>": the object name of a process.
std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks);
// "gmem.<pid>.<ticks>.<nonce as 16 hex digits>": the name a recorder gives its object. The
// random part keeps another user from taking the name before the process creates it.
std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks, std::uint64_t nonce);
// Parses such a name; false if `name` is not one.
// (either form: with or without the random part).
bool parse_object_name(const std::string& name, std::uint32_t* pid, std::uint64_t* ticks);

} // namespace gmem::trace
