// Per-tensor observation of the frameworks' own allocators, entered from Python: gmem's
// bootstrap (python/gmem_bootstrap/sitecustomize.py) calls these through ctypes once the
// framework is imported. Exported by libgmem.so (interpose/libgmem.map's gmem_*) but not part
// of the public API (include/gmem/gmem.h): their only caller ships with the library.
//
// PyTorch: gmem_observe_torch_attach() attaches a tracker (profiler/recorder/tensor_observer.h) to
// the active CUDACachingAllocator through the vtable slot the layout row names. The tracker runs on
// the allocating thread with PyTorch's allocator mutex held and, as PyTorch ops release it, usually
// without the GIL. So it never calls the driver, never takes the GIL and takes no lock that any
// code holds while waiting for PyTorch's: the trace writer's own (never held across a call out)
// and, for the first events only, a pool's lock through owns() (never held across a driver call or
// anything of PyTorch's). It records ALLOC as an allocation and FREE_REQUESTED as its free, with
// the same stack capture as the driver hooks (native frames, then the thread's Python frames read
// without the GIL), under trace::alloc_kind::tensor.
//
// CuPy: its memory hooks are Python objects; the bootstrap's hook calls gmem_observe_alloc /
// gmem_observe_free through ctypes (which releases the GIL around the call; the frames are
// still the calling thread's).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
// What gmem_observe_torch_attach returns.
enum gmem_observe_status {
  GMEM_OBSERVE_ATTACHED = 0,
  GMEM_OBSERVE_BAD_LAYOUT = 1,   // the descriptor failed validate()
  GMEM_OBSERVE_NO_ALLOCATOR = 2, // the allocator variable is null or holds no allocator
  GMEM_OBSERVE_FOREIGN = 3,      // the slot's function is not in the variable's library
  GMEM_OBSERVE_ALREADY = 4,      // a tracker is attached already
  GMEM_OBSERVE_OFF = 5,          // recording is off (GMEM_TRACE=0), a forked child, exiting
};

// `allocator_var`: the address of c10::cuda::CUDACachingAllocator::allocator (a
// std::atomic<CUDAAllocator*>) in libc10_cuda.so; `layout`: a gmem::trace::torch_layout;
// `label`: "PyTorch 2.11" for the messages. Prints one line on stderr either way (quiet = 1:
// only on failure). Attach after CUDA's lazy initialization: before it the allocator has no
// per-device allocators to attach to.
__attribute__((visibility("default"))) int gmem_observe_torch_attach(const void* allocator_var,
                                                                     const void* layout,
                                                                     const char* label, int quiet);

// `framework`: gmem::trace::observed_framework. Marks it observed in the trace; 1 when
// recording is on, 0 when there is nothing to record into.
__attribute__((visibility("default"))) int gmem_observe_enable(int framework);
__attribute__((visibility("default"))) void gmem_observe_alloc(std::uintptr_t address,
                                                               std::size_t requested,
                                                               std::size_t rounded, int device,
                                                               std::uintptr_t stream);
__attribute__((visibility("default"))) void gmem_observe_free(std::uintptr_t address, int device);

// The calling Python thread enters (leaves) an engine that works for it on other threads: the
// bootstrap's wrapper of torch.autograd.graph._engine_run_backward. `kind`: gmem::trace::
// wait_kind (1: PyTorch's autograd engine); `skip`: innermost Python frames to leave out (the
// wrapper's own). Its Python frames are lent to the engine's worker threads' allocations until
// gmem_python_wait_end(token) (profiler/recorder/waiting_frames.h). Returns the token; 0 when
// nothing was registered (no trace yet, no Python frames, no free slot), which end ignores.
__attribute__((visibility("default"))) unsigned gmem_python_wait_begin(int kind, int skip);
__attribute__((visibility("default"))) void gmem_python_wait_end(unsigned token);
}
