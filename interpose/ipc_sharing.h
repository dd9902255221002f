// CUDA IPC of pooled device blocks (docs/interpose.md, "CUDA IPC").
//
// A legacy IPC handle names a whole driver allocation, which for a pooled block is its
// segment: the importer maps the segment and gets its base. So the exporter hands out:
// - for a block at the start of its cuMemAlloc segment, the driver's own handle of the
//   segment (any importer, under gmem or not, gets the right address);
// - for any other block, a gmem handle: magic, the exporter's pid, a random nonce, a slot in
//   the exporter's registry, the block's offset and size. The registry
//   (/dev/shm/gmem-ipc.PID.NONCE, mode 0600, removed at exit) holds the segment's driver
//   handle per slot. An importer under gmem reads it (same user, regular file, no symlink,
//   every field checked), opens the segment's handle and returns base + offset; an importer
//   without gmem passes the gmem handle to the driver, which refuses it (never a wrong
//   pointer).
// The importer opens each segment once per context and counts references: several blocks of
// one segment, a plain and a gmem handle of the same segment, open/close/reopen. Closing the
// last reference closes the driver's mapping.
// Blocks of virtual-memory segments (GMEM_VMM=1, the arena) have no legacy handle: refused
// with CUDA_ERROR_NOT_SUPPORTED and a warning naming the options that avoid it.
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
