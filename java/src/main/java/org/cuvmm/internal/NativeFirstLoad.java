package org.cuvmm.internal;

import org.cuvmm.CudaException;
import org.cuvmm.internal.jni.JavaCppSettings;
import org.cuvmm.internal.jni.NativeLibrary;

/**
 * The first load of cuvmm's JNI library, once per JVM, after {@link FirstUse#prepare} (the
 * fd-limit check and what the JDK opens lazily). Called first by the public entry points that
 * can make a process's first native call ({@code Driver.select}, {@code
 * BufferDescriptor.fromFds} and {@code adoptFds}), before any class whose initializer loads
 * native code or logs.
 *
 * <p>Why: at the open-file limit that first load failed inside class initializers (JavaCPP
 * unpacking or opening the library; the JDK's logging reading {@code java.security} for
 * JavaCPP's settings line; the time-zone database read for a jar entry's date), and a class
 * whose initializer failed stays broken for the life of the JVM. An independent fault probe
 * saw every later call fail with {@code NoClassDefFoundError} after fds were freed. Checked
 * first, the caller gets a {@link CudaException} it can retry.
 */
public final class NativeFirstLoad {
    /** {@code CUDA_ERROR_OUT_OF_MEMORY}: what the host driver reports for a call that finds no fd. */
    private static final int OUT_OF_MEMORY = 2;

    private static volatile boolean loaded;

    private NativeFirstLoad() {}

    /**
     * Loads the JNI library now if no call has yet: checks the free fds, applies JavaCPP's
     * settings and loads. Later calls return at once.
     *
     * @throws CudaException {@code CUDA_ERROR_OUT_OF_MEMORY} when {@link FirstUse#prepare}
     *     finds too few fds free (the message names RLIMIT_NOFILE and the count); nothing was
     *     loaded and a later call tries again
     */
    public static void ensure() {
        if (loaded) return;
        synchronized (NativeFirstLoad.class) {
            if (loaded) return;
            String shortage = FirstUse.prepare();
            if (shortage != null) {
                throw new CudaException(OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "cuvmm native library load",
                        "before the first driver call", "loading cuvmm's native library failed before the first "
                        + "driver call: CUDA_ERROR_OUT_OF_MEMORY (the process is at its file descriptor limit, "
                        + "RLIMIT_NOFILE: " + shortage + "; raise it (ulimit -n, or setrlimit) or close descriptors "
                        + "you no longer need, then try again. Nothing was loaded: a first load that ran out of fds "
                        + "would leave cuvmm's classes broken until the JVM restarts, so it is not tried)");
            }
            JavaCppSettings.apply(); // before any Pointer class initializes
            NativeLibrary.load();
            loaded = true;
        }
    }
}
