package org.cuvmm;

import org.cuvmm.internal.ClassPreload;

/**
 * Loads, once per JVM and with the driver, every class of this library, so that closing and
 * releasing never has to load one. A class is loaded the first time it is used, and from a
 * class path of directories (an IDE, {@code mvn exec}, a test run) that opens its {@code
 * .class} file; a process at its open-file limit must still be able to give its memory back,
 * and independent probes found one close path after another failing there with {@code
 * NoClassDefFoundError} (the state word's close result, the host-function check, the
 * stream-ordered release and its event, the pool's free lists and statistics), some after the
 * object was already marked closed, so that its memory stayed mapped for good. Listing the
 * classes a close needs by hand missed some every time; loading all of them (95, loaded but not
 * initialized: {@link ClassPreload}; measured at about 45-150 ms of a first {@code
 * Driver.get()} from a classes directory on a busy 2-core VM, much of it paid later anyway by
 * an application that uses buffers, streams and pools) cannot. vmm-ipc, a
 * separate jar, loads its own the same way ({@code ErrorPathClasses}). From a jar a class load
 * opens no file either way. Package-private.
 *
 * <p>The JDK's own lazily read files (the logging configuration, the time-zone database the
 * default formatter's date needs, {@code java.security}), which an earlier version read here,
 * are read before the native load by {@link org.cuvmm.internal.FirstUse}: JavaCPP's load
 * itself needed the time-zone data (an independent probe).
 */
final class ReleasePathClasses {
    private ReleasePathClasses() {}

    /** How many of this library's classes the initializer loaded; read by {@link #load()} only to run it. */
    private static final int LOADED;

    static {
        LOADED = ClassPreload.loadAll(ReleasePathClasses.class, "org/cuvmm/", "org/cuvmm/internal/",
                "org/cuvmm/internal/jni/", "org/cuvmm/pool/");
    }

    /** Runs the initializer above (once; later calls do nothing). */
    static void load() {
        if (LOADED < 0) throw new AssertionError();
    }
}
