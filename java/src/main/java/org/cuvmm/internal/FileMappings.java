package org.cuvmm.internal;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicBoolean;

import org.bytedeco.javacpp.Pointer;
import org.cuvmm.internal.jni.NativeApi;

/**
 * File mappings ({@code FileChannel.map}) among the direct {@code ByteBuffer}s a caller passes,
 * and copies to and from them that survive their file being truncated.
 *
 * <p>Why: a file mapping loses its pages when its file is truncated (by this process or any
 * other). A native read or write of a lost page is a {@code SIGBUS}, which HotSpot cannot
 * recover from in cuvmm's or the driver's code: the JVM ends. The JDK's own copies turn it
 * into an {@link InternalError}, but on JDK 17 only asynchronously, at some later safepoint
 * (an independent review: after the copy had returned normally, inside unrelated bookkeeping,
 * or as a crash in JNI code); so they are no protection either. A file mapping is therefore
 * copied only by the kernel ({@code process_vm_readv}/{@code process_vm_writev} on this
 * process, native/checked_copy.cpp), which stops at a lost page and says so: the copy throws
 * {@link LostPage}, which {@link #copying} turns into an {@link IllegalStateException} naming
 * the argument, synchronously.
 *
 * <p>The test: every direct buffer is a {@code java.nio.MappedByteBuffer} by type, so the type
 * says nothing; the JDK's private field {@code MappedByteBuffer.fd} is set only for a file
 * mapping (and its slices, duplicates and read-only views). It is read through JNI (one JNI
 * call), which needs no module opening. On a JDK without that field every direct buffer is
 * taken for plain memory, as before this check existed.
 *
 * <p>Not covered: a mapping made in native code and wrapped as a direct buffer (JNI's
 * {@code NewDirectByteBuffer}) carries no {@code fd} (so {@code PinnedHostBuffer.register},
 * which refuses file mappings, takes it for plain memory); and where the kernel
 * refuses {@code process_vm_readv} (a seccomp filter), the JDK copies the pieces, with its
 * asynchronous error (logged once).
 */
public final class FileMappings {
    private static final System.Logger LOG = System.getLogger("org.cuvmm");
    private static final AtomicBoolean UNCHECKED_LOGGED = new AtomicBoolean();

    private FileMappings() {}

    /** True when {@code buffer} is direct and a file mapping, or a slice or view of one. */
    public static boolean isFileMapping(ByteBuffer buffer) {
        return buffer.isDirect() && NativeApi.file_mapping_state(buffer) == 1;
    }

    /** The address of {@code mapping}'s index 0. */
    static long address(ByteBuffer mapping) {
        try (Pointer p = new Pointer(mapping)) {
            return p.address();
        }
    }

    /**
     * A page of a file mapping is gone: the copy stopped at {@link #index} (of the mapping),
     * having copied what came before it in its piece. No stack trace: {@link #copying} turns it
     * into the exception the caller sees.
     */
    public static final class LostPage extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final long index;

        LostPage(long index) {
            super("the page at index " + index + " of the mapping is gone", null, false, false);
            this.index = index;
        }
    }

    /**
     * Copies {@code n} bytes of {@code mapping} (index 0 at address {@code base}) from index
     * {@code at} into {@code staging} (at address {@code stagingAddress}).
     *
     * @throws LostPage when a page of that window is gone
     */
    static void read(ByteBuffer mapping, long base, int at, ByteBuffer staging, long stagingAddress, int n) {
        long got = NativeApi.mapping_read(stagingAddress, base + at, n);
        if (got == n) return;
        if (got >= 0) throw new LostPage(at + got);
        refusedOrFailed(got, "reading");
        staging.put(0, mapping, at, n);
    }

    /** {@link #read} the other way: {@code n} bytes of {@code staging} into {@code mapping} from index {@code at}. */
    static void write(ByteBuffer mapping, long base, int at, ByteBuffer staging, long stagingAddress, int n) {
        long got = NativeApi.mapping_write(base + at, stagingAddress, n);
        if (got == n) return;
        if (got >= 0) throw new LostPage(at + got);
        refusedOrFailed(got, "writing");
        mapping.put(at, staging, 0, n);
    }

    private static final long EPERM = 1;
    private static final long ENOSYS = 38;

    /**
     * The checked copy failed with {@code -errno}, not at a lost page: when the kernel refuses
     * the call itself (EPERM under a seccomp filter, ENOSYS), returns so that the JDK copies
     * instead, and says once that this is unprotected; any other failure throws.
     */
    private static void refusedOrFailed(long minusErrno, String what) {
        if (-minusErrno != EPERM && -minusErrno != ENOSYS) {
            throw new IllegalStateException("checked copy " + what + " a file mapping failed: errno " + -minusErrno
                    + " from process_vm_readv/process_vm_writev (expected: success, or a lost page)");
        }
        if (UNCHECKED_LOGGED.compareAndSet(false, true)) {
            LOG.log(System.Logger.Level.WARNING, "copies to and from file mappings are not protected against a "
                    + "truncated file in this process: process_vm_readv/process_vm_writev failed (errno "
                    + -minusErrno + ", for example a seccomp filter); the JDK copies them instead, and a lost page "
                    + "may then end the JVM");
        }
    }

    /**
     * Runs {@code copy}, which moves bytes between the file mapping {@code mapping} (the caller's
     * argument {@code name}) and a buffer with {@link #read}/{@link #write}; a lost page becomes
     * an exception naming the argument.
     *
     * @throws IllegalStateException when a page of the mapping was gone
     */
    public static void copying(String name, ByteBuffer mapping, Runnable copy) {
        try {
            copy.run();
        } catch (LostPage e) {
            throw new IllegalStateException(name + ": " + mapping + " (expected: a file mapping whose file still covers "
                    + "it; its page at index " + e.index + " is gone: the file was truncated under the mapping, or its "
                    + "storage failed; the copy stopped at the 1 MiB piece holding it, the pieces before were copied. "
                    + "Map the file again, or read it into a direct buffer first)", e);
        }
    }
}
