package org.cuvmm.ipc;

/**
 * Loads, once per JVM, every class of vmm-ipc, and initializes those that building and reading
 * an ERROR needs, before they are needed. A class is loaded the first time it is used, and from a class path of directories
 * (an IDE, {@code mvn exec}, a test run) that opens its {@code .class} file: at the open-file
 * limit the open fails exactly when an ERROR must be built (an export refused for want of an
 * fd), the server's reader died with {@code NoClassDefFoundError} and the client read the end
 * of the stream instead of ERROR {@code INTERNAL} (an independent probe; ExportAtLimitTest).
 * From a jar nothing is opened; loading them early costs a few small classes. Package-private.
 */
final class ErrorPathClasses {
    private ErrorPathClasses() {}

    /** Loaded and initialized (the enums) by this class's initializer. */
    private static final Class<?>[] CLASSES;

    /** How many of vmm-ipc's classes were loaded (tests). */
    static final int LOADED;

    static {
        // Every class of this module, not a list: a probe found the reader thread, the event
        // thread and a leading caller dying at the limit on classes the list had not named
        // (Messages$Forget, $Forgotten, the version-1 $Descriptor), the connection lost for good.
        LOADED = org.cuvmm.internal.ClassPreload.loadAll(ErrorPathClasses.class, "org/cuvmm/ipc/",
                "org/cuvmm/ipc/internal/");
        ErrorCode.values(); // initialized: its constants are read on the error path
        FdTransferException.Reason.values();
        FrameType.values();
        CLASSES = new Class<?>[] {Messages.Error.class, ProtocolException.class, SharingException.class,
                FdTransferException.class, FrameIO.Stalled.class, org.cuvmm.CudaException.class};
    }

    /** Runs the initializer above (once; later calls do nothing). */
    static void load() {
        if (CLASSES.length == 0) throw new AssertionError();
    }
}
