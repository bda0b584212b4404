// Copies inside this process that report a page they cannot read or write instead of
// raising SIGBUS. For file mappings handed in by Java (FileChannel.map): truncating the file
// drops pages from under the mapping, and a memcpy touching one is a SIGBUS that ends the
// JVM; the JDK's own copies turn it into an InternalError only asynchronously on JDK 17, at
// an unknown later point (an independent review: in the middle of bookkeeping, or as a
// SIGSEGV in JNI code). The kernel's process_vm_readv/process_vm_writev on our own pid
// copy through the page tables and stop at such a page with a short count or EFAULT.
// None throws.
#pragma once

#include <cstddef>

namespace cuvmm {

// Copies `n` bytes from `mapping` (the page that may be gone) to `dst`. Returns the bytes
// copied: `n`, or fewer when a page of `mapping` could not be read (the bytes before it are
// copied), or -errno when the call failed otherwise: ENOSYS, or EPERM where a seccomp filter
// forbids it (nothing was copied: the caller must copy another way), or another error (the
// copy failed; some bytes may have been copied).
long long copy_from_mapping(void* dst, const void* mapping, size_t n);

// The same toward `mapping`: writes `n` bytes of `src` into it.
long long copy_to_mapping(void* mapping, const void* src, size_t n);

}  // namespace cuvmm
