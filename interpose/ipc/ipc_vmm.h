// CUDA IPC of pooled blocks in virtual-memory mappings (the arena, GMEM_VMM=1 segments): the
// physical pieces travel as POSIX file descriptors over a Unix socket of the exporter
// (docs/interpose.md, "CUDA IPC"; ipc_sharing.h holds the handle and the importer's counting).
//
// Exporter: publish() records a live block in this process's table (a slot, its generation)
// and, the first time, starts one server thread on the abstract Unix socket
// "gmem-ipc.PID.NONCE" (SOCK_SEQPACKET). Per connection: the peer's uid must be ours
// (SO_PEERCRED), the request must name a slot and generation of this table under this nonce,
// the block must still be live in its pool; then the pieces mapped behind it now are exported
// (cuMemExportToShareableHandle) and sent (SCM_RIGHTS, at most k_batch per message) after a
// header. Timeouts of a few seconds bound a peer that stalls.
// Importer: fetch_and_map() connects, checks that the server is the exporter's pid and our uid,
// validates every field of the answer, imports and maps each piece into one reserved range,
// and closes every descriptor it received on every path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "interpose/context_pools.h"

namespace gmem::shim::ipc_vmm {

// What a handle of a published block carries besides the exporter's pid.
struct published {
  std::uint32_t slot = 0;
  std::uint64_t nonce = 0;
  std::uint64_t generation = 0;
  std::uint64_t offset = 0; // block address - address of the first piece behind it
};

// Records the live block [address, address + size) of pool entry `e` whose first piece is
// mapped at `first`; the same block again gets the same slot. false with `why` when the
// table is full of live blocks or the socket cannot be set up.
bool publish(context_entry* e, std::uintptr_t address, std::size_t size, std::uintptr_t first,
             published* out, std::string* why);

// A block of another process mapped here: the reserved range and the pieces mapped in it.
struct mapped {
  CUdeviceptr base = 0;
  std::size_t total = 0;
  std::vector<std::pair<CUdeviceptr, std::size_t>> pieces;
};

// Asks exporter `pid` for slot `slot` of its table `nonce` and maps the pieces in the current
// context. On failure nothing stays mapped or open, and `why` says what went wrong; the
// result is CUDA_ERROR_INVALID_HANDLE unless a driver call failed (its error).
CUresult fetch_and_map(std::uint32_t pid, const published& p, std::uint64_t size, mapped* out,
                       std::string* why);
// Unmaps what fetch_and_map() mapped; the driver's first error, if any.
CUresult unmap(const mapped& m);

void at_exit();       // stops the server (the socket name goes with the process)
void at_fork_child(); // a forked child serves nothing: closes its copy of the socket

} // namespace gmem::shim::ipc_vmm
