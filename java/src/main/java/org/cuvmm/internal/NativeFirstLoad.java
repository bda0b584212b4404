package org.cuvmm.internal;

import org.cuvmm.CudaException;
import org.cuvmm.internal.jni.JavaCppSettings;
import org.cuvmm.internal.jni.NativeLibrary;

/**
 * The first load of cuvmm's JNI library, once per JVM, behind a check for free file
 * descriptors. Called first by the public entry points that can make a process's first native
 * call ({@code Driver.select}, {@code BufferDescriptor.fromFds} and {@code adoptFds}), before
 * any class whose initializer loads native code or logs.
 *
 * <p>Why: at the open-file limit that first load fails inside class initializers (JavaCPP
 * unpacking or opening the library; the JDK's logging reading {@code java.security} for
 * JavaCPP's settings line), and a class whose initializer failed stays broken for the life of
 * the JVM. An independent fault probe saw every later call fail with {@code
 * NoClassDefFoundError} after fds were freed. Checked first, the caller gets a {@link
 * CudaException} it can retry. Not airtight: another thread may take the fds between the
 * check and the load.
 */
public final class NativeFirstLoad {
    /**
     * Free fds the first load asks for. It was seen to fail with none or two free and to
     * succeed with four; eight leave room for the other threads of a busy process.
     */
    public static final int FREE_FDS_WANTED = 8;

    /** {@code CUDA_ERROR_OUT_OF_MEMORY}: what the host driver reports for a call that finds no fd. */
    private static final int OUT_OF_MEMORY = 2;

    private static volatile boolean loaded;

    private NativeFirstLoad() {}

    /**
     * Loads the JNI library now if no call has yet: checks the free fds, applies JavaCPP's
     * settings and loads. Later calls return at once.
     *
     * @throws CudaException {@code CUDA_ERROR_OUT_OF_MEMORY} when fewer than {@value
     *     #FREE_FDS_WANTED} fds are free (the message names RLIMIT_NOFILE); nothing was loaded
     *     and a later call tries again
     */
    public static void ensure() {
        if (loaded) return;
        synchronized (NativeFirstLoad.class) {
            if (loaded) return;
            int free = FreeFds.openable(FREE_FDS_WANTED);
            if (free < FREE_FDS_WANTED) {
                throw new CudaException(OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "cuvmm native library load",
                        "before the first driver call", "loading cuvmm's native library failed before the first "
                        + "driver call: CUDA_ERROR_OUT_OF_MEMORY (the process is at its file descriptor limit, "
                        + "RLIMIT_NOFILE: the first load wants " + FREE_FDS_WANTED + " free fds and only " + free
                        + " could be opened; raise it (ulimit -n, or setrlimit) or close descriptors you no longer "
                        + "need, then try again. Nothing was loaded: a first load that ran out of fds would leave "
                        + "cuvmm's classes broken until the JVM restarts, so it is not tried)");
            }
            JavaCppSettings.apply(); // before any Pointer class initializes
            NativeLibrary.load();
            loaded = true;
        }
    }
}
