package org.cuvmm.internal;

import java.nio.ByteBuffer;

import org.cuvmm.internal.jni.NativeApi;

/**
 * File mappings ({@code FileChannel.map}) among the direct {@code ByteBuffer}s a caller passes,
 * and the fault a copy to or from one can take.
 *
 * <p>Why: a file mapping loses its pages when its file is truncated (by this process or any
 * other). A native read or write of a lost page is a {@code SIGBUS}, which HotSpot cannot
 * recover from in cuvmm's or the driver's code: the JVM ends. The JDK's own bulk copies of a
 * mapping turn the same fault into an {@link InternalError}. So a file mapping is never handed
 * to native code by address: it is copied by the JDK, through {@link ArrayCopies}' staging
 * pieces, and the error becomes an {@link IllegalStateException} naming the argument.
 *
 * <p>The test: every direct buffer is a {@code java.nio.MappedByteBuffer} by type, so the type
 * says nothing; the JDK's private field {@code MappedByteBuffer.fd} is set only for a file
 * mapping (and its slices, duplicates and read-only views). It is read through JNI (about a
 * hundred nanoseconds), which needs no module opening. On a JDK without that field every
 * direct buffer is taken for plain memory, as before this check existed.
 *
 * <p>Not covered: a mapping made in native code and wrapped as a direct buffer (JNI's
 * {@code NewDirectByteBuffer}) carries no {@code fd}; and {@code PinnedHostBuffer.register} of a
 * file mapping hands its pages to the driver, which reads them itself.
 */
public final class FileMappings {
    private FileMappings() {}

    /** True when {@code buffer} is direct and a file mapping, or a slice or view of one. */
    public static boolean isFileMapping(ByteBuffer buffer) {
        return buffer.isDirect() && NativeApi.file_mapping_state(buffer) == 1;
    }

    /**
     * Runs {@code copy}, which moves bytes between the file mapping {@code mapping} (the caller's
     * argument {@code name}) and staging memory with the JDK's copies, each followed by
     * {@link NativeApi#fault_delivery_point} or another native call. A fault in the mapping
     * comes out of that call as the JDK's InternalError; it becomes an exception naming the
     * argument. The bytes before the faulting piece have been copied.
     *
     * @throws IllegalStateException when the mapping faulted
     */
    public static void copying(String name, ByteBuffer mapping, Runnable copy) {
        try {
            copy.run();
        } catch (InternalError e) {
            throw new IllegalStateException(name + ": " + mapping + " (expected: a file mapping whose file still covers "
                    + "it; the file was truncated under the mapping, or its storage failed: " + e.getMessage()
                    + "; map the file again, or read it into a direct buffer first)", e);
        }
    }
}
