// CUDA IPC of pooled device blocks (docs/interpose.md, "CUDA IPC").
//
// A legacy IPC handle names a whole driver allocation, which for a pooled block is its
// segment: the importer maps the segment and gets its base. So the exporter hands out:
// - for a block at the start of its cuMemAlloc segment, the driver's own handle of the
//   segment (any importer, under gmem or not, gets the right address);
// - for any other block of a cuMemAlloc segment, a gmem handle ('gmemIPC\1'): magic, the
//   exporter's pid, a random nonce, a slot in the exporter's registry, the block's offset and
//   size. The registry (/dev/shm/gmem-ipc.PID.NONCE, mode 0600, removed at exit) holds the
//   segment's driver handle per slot. An importer under gmem reads it (same user, regular
//   file, no symlink, every field checked), opens the segment's handle and returns
//   base + offset;
// - for a block in virtual-memory mappings (the arena, GMEM_VMM=1 segments), a gmem handle of
//   the same layout ('gmemIPC\2'): the physical pieces behind the block (created exportable
//   as POSIX file descriptors when the device can) are sent to an importer under gmem over the
//   exporter's Unix socket, which maps them (ipc_vmm.h). Where the memory cannot be shared,
//   cuIpcGetMemHandle returns CUDA_ERROR_NOT_SUPPORTED with a warning.
// An importer without gmem passes a gmem handle to the driver, which refuses it (never a wrong
// pointer).
// The importer opens each segment (or vmm block) once per context and counts references:
// several blocks of one segment, a plain and a gmem handle of the same segment, open/close/
// reopen. Closing the last reference closes the driver's mapping (or unmaps the pieces).
#pragma once

#include <cstdint>

#include "interpose/real_driver.h"

namespace gmem::shim {

// The hooks' bodies. Each falls back to the driver for memory gmem does not own.
CUresult ipc_get_handle(CUipcMemHandle* handle, CUdeviceptr p);
CUresult ipc_open(CUdeviceptr* out, const CUipcMemHandle& handle, unsigned flags);
CUresult ipc_close(CUdeviceptr p);
// At exit: removes this process's registry and stops serving (handles it gave out no longer
// open).
void ipc_at_exit();
// In a forked child (the shim is off there): closes the child's copy of the socket.
void ipc_at_fork_child();

} // namespace gmem::shim
