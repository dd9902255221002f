// Placeholder: trace objects in /dev/shm (open, list, save, remove) land here.
#include "profiler/trace_reader.h"

namespace gmem::trace {

read_result open_file(const std::string& path, const read_options&) {
  read_result r;
  r.error = {0, path + ": trace reader not implemented yet"};
  return r;
}
read_result open_shm(const std::string& name, const read_options& o) {
  return open_file(name, o);
}
read_result open_pid(std::uint32_t pid, const read_options& o) {
  return open_file("pid " + std::to_string(pid), o);
}
std::vector<trace_entry> list_traces() {
  return {};
}
bool process_alive(std::uint32_t, std::uint64_t) {
  return false;
}
bool save_shm(const std::string&, const std::string&, std::string* error) {
  if (error) *error = "not implemented yet";
  return false;
}
bool remove_shm(const std::string&, std::string* error) {
  if (error) *error = "not implemented yet";
  return false;
}

} // namespace gmem::trace
