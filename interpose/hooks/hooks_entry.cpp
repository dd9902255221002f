// The two routes by which programs fetch driver functions at run time (docs/design.md,
// "Interception"): dlsym on libcuda, and cuGetProcAddress. Both call the real function first
// and substitute by the returned address, so the variant the driver chose (_v2, _ptsz, ABI
// version) decides which hook, and unknown functions pass through untouched.
//
// dlsym(RTLD_NEXT, ...) is resolved by glibc relative to its caller's return address: a
// wrapper that called the real dlsym for someone else's RTLD_NEXT lookup would find the
// symbol after libgmem.so instead of after the caller, breaking every other interposer. So
// dlsym is a few instructions of assembly that tail-jump to glibc's dlsym for RTLD_NEXT (the
// caller's return address stays on the stack) and go to gmem_dlsym_slow for anything else.
#include <cstring>

#include "interpose/capture_tracker.h"
#include "interpose/hooks/hook_support.h"
#include "profiler/format/module_map.h"

namespace {

// Tells the trace when a library was loaded or unloaded since the last look (programs look
// symbols up after dlopen, so this sees every dlopen that matters for stacks).
void maybe_modules_changed() {
  static std::atomic<unsigned long long> g_seen{0};
  const gmem::trace::module_load_counts c = gmem::trace::module_loads_now();
  const unsigned long long key = c.adds * 1000003ULL + c.subs;
  if (g_seen.exchange(key, std::memory_order_relaxed) != key) gmem::trace::modules_changed();
}

} // namespace

extern "C" __attribute__((visibility("hidden"))) void* gmem_resolve_real_dlsym() {
  return reinterpret_cast<void*>(gmem::shim::real_dlsym());
}

extern "C" __attribute__((visibility("hidden"))) void* gmem_dlsym_slow(void* handle,
                                                                       const char* name) {
  gmem::shim::dlsym_fn real = gmem::shim::real_dlsym();
  if (real == nullptr) return nullptr;
  void* found = real(handle, name);
  if (found == nullptr || name == nullptr || std::strncmp(name, "cu", 2) != 0) {
    if (found != nullptr && !gmem::shim::forked_child()) maybe_modules_changed();
    return found;
  }
  if (gmem::shim::driver_if_loaded() == nullptr) {
    gmem::shim::note_unhooked_lookup(name, false, -1);
    return found;
  }
  void* ours = gmem::shim::substitute(found);
  if (ours != found) gmem::shim::count_substitution(true);
  gmem::shim::note_unhooked_lookup(name, ours != found, -1);
  return ours;
}

#if defined(__x86_64__)
asm(R"(
	.text
	.globl dlsym
	.type dlsym, @function
	.p2align 4
dlsym:
	.cfi_startproc
	cmpq $-1, %rdi
	jne gmem_dlsym_slow
	movq g_gmem_real_dlsym(%rip), %rax
	testq %rax, %rax
	jz 1f
	jmp *%rax
1:
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	call gmem_resolve_real_dlsym
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	testq %rax, %rax
	jz 2f
	jmp *%rax
2:
	ret
	.cfi_endproc
	.size dlsym, .-dlsym
)");
#else
#error "libgmem.so's dlsym trampoline is written for x86-64 only"
#endif

using namespace gmem::shim;

GMEM_HOOK CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  const CUresult r = GMEM_REAL(cuGetProcAddress_v2, symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    void* ours = substitute(*pfn);
    if (ours != *pfn) count_substitution(false);
    note_unhooked_lookup(symbol, ours != *pfn, version);
    *pfn = ours;
  }
  return r;
}

GMEM_HOOK CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const CUresult r = GMEM_REAL(cuGetProcAddress, symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    void* ours = substitute(*pfn);
    if (ours != *pfn) count_substitution(false);
    note_unhooked_lookup(symbol, ours != *pfn, version);
    *pfn = ours;
  }
  return r;
}
