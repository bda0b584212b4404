/**
 * cuvmm ipc: sharing cuvmm buffers between processes over Unix-domain sockets (the protocol
 * of docs/PROTOCOL.md).
 *
 * <p>Exports {@code org.cuvmm.ipc} only. Its API takes and returns core types
 * ({@code VirtualMemoryBuffer}, {@code BufferDescriptor}), so reading this module reads
 * {@code org.cuvmm} too. The jnr jars are automatic modules (names from their
 * {@code Automatic-Module-Name}). Works on the class path as well, where this descriptor is
 * ignored. {@code org.cuvmm.ipc.internal} (the test pattern of docs/PROTOCOL.md section 9,
 * used by the cli and the tests, both on the class path) is not exported: it is not API. The
 * examples, which users copy and may run on the module path, do not use it.
 */
module org.cuvmm.ipc {
    requires transitive org.cuvmm;
    requires org.jnrproject.enxio;
    requires org.jnrproject.ffi;
    requires org.jnrproject.posix;
    requires org.jnrproject.unixsocket;
    // jnr-ffi generates its bindings with ASM, but as an automatic module it cannot say so, and
    // explicit modules (ASM's jars have descriptors) are resolved only when some module requires
    // them. Required here on jnr-ffi's behalf, so that `--module-path` alone works.
    requires org.objectweb.asm.commons;
    requires org.objectweb.asm.util;

    exports org.cuvmm.ipc;
}
