#include "profiler/recorder/python_frame_memo.h"

#include "profiler/recorder/per_thread.h"

namespace gmem::trace {

python_frame_memo* python_frame_memo::mine() noexcept {
  return per_thread<python_frame_memo>::get();
}

void python_frame_memo::clear() noexcept {
  for (entry& e : entries_)
    e = {};
}

} // namespace gmem::trace
