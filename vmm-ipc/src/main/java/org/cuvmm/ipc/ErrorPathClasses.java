package org.cuvmm.ipc;

/**
 * Loads, once per JVM, every class of vmm-ipc ({@link org.cuvmm.internal.ClassPreload}) and
 * initializes the enums an ERROR needs, before they are needed. A class is loaded the first
 * time it is used, and from a class path of directories (an IDE, {@code mvn exec}, a test run)
 * that opens its {@code .class} file: at the open-file limit the open fails exactly when an
 * ERROR must be built (an export refused for want of an fd), the server's reader died with
 * {@code NoClassDefFoundError} and the client read the end of the stream instead of ERROR
 * {@code INTERNAL} (an independent probe; ExportAtLimitTest, ClientAtFdLimitTest). From a jar
 * nothing is opened. Package-private.
 */
final class ErrorPathClasses {
    private ErrorPathClasses() {}

    /** How many of vmm-ipc's classes the initializer loaded; read by {@link #load()} only to run it. */
    private static final int LOADED;

    static {
        // Every class of this module, not a list: a probe found the reader thread, the event
        // thread and a leading caller dying at the limit on classes the list had not named
        // (Messages$Forget, $Forgotten, the version-1 $Descriptor), the connection lost for good.
        LOADED = org.cuvmm.internal.ClassPreload.loadAll(ErrorPathClasses.class, "org/cuvmm/ipc/",
                "org/cuvmm/ipc/internal/");
        ErrorCode.values(); // initialized: their constants are read on the error path
        FdTransferException.Reason.values();
        FrameType.values();
    }

    /** Runs the initializer above (once; later calls do nothing). */
    static void load() {
        if (LOADED < 0) throw new AssertionError();
    }
}
