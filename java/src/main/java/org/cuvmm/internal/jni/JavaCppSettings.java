package org.cuvmm.internal.jni;

/**
 * JavaCPP settings cuvmm needs, applied before JavaCPP's {@code Pointer} class initializes
 * (it reads them once, in its static initializer). Every class of cuvmm that can be the
 * first to touch a {@code Pointer} subclass calls {@link #apply()} from its own static
 * initializer.
 *
 * <p><b>This setting is JVM-wide.</b> JavaCPP keeps {@code maxPhysicalBytes} in one static
 * field of {@code org.bytedeco.javacpp.Pointer}, shared by every JavaCPP library in the JVM
 * (the CUDA, OpenCV, PyTorch presets...): it cannot be scoped to cuvmm. So cuvmm sets the
 * system property {@value #MAX_PHYSICAL_BYTES} to {@code 0} only when the application has
 * set neither spelling JavaCPP reads ({@value #MAX_PHYSICAL_BYTES} or
 * {@value #MAX_PHYSICAL_BYTES_LOWER}); it logs that it did (logger {@code org.cuvmm}, level
 * DEBUG). To keep JavaCPP's default check for the whole JVM, set the property yourself, for
 * example {@code -Dorg.bytedeco.javacpp.maxPhysicalBytes=<bytes>}: cuvmm never overrides it.
 * If another JavaCPP library initialized {@code Pointer} before cuvmm's first call, the
 * property has no effect on JavaCPP; cuvmm still works, with that check on.
 */
public final class JavaCppSettings {
    /** The property JavaCPP reads (wins over {@link #MAX_PHYSICAL_BYTES_LOWER}). */
    public static final String MAX_PHYSICAL_BYTES = "org.bytedeco.javacpp.maxPhysicalBytes";
    /** The other spelling JavaCPP accepts. */
    public static final String MAX_PHYSICAL_BYTES_LOWER = "org.bytedeco.javacpp.maxphysicalbytes";

    private static volatile boolean applied;

    private JavaCppSettings() {}

    /**
     * maxPhysicalBytes=0: otherwise JavaCPP reads /proc/self/statm on every Pointer
     * allocation and may call System.gc() (and sleep) when the process's resident size is
     * large, and mapped GPU or shared memory is none of its business. An application's own
     * setting, in either spelling, wins. Idempotent and cheap after the first call.
     */
    public static void apply() {
        if (applied) return;
        boolean set = false;
        synchronized (JavaCppSettings.class) {
            if (applied) return;
            applied = true;
            if (System.getProperty(MAX_PHYSICAL_BYTES) == null && System.getProperty(MAX_PHYSICAL_BYTES_LOWER) == null) {
                System.setProperty(MAX_PHYSICAL_BYTES, "0");
                set = true;
            }
        }
        if (set) { // logged outside the lock
            System.getLogger("org.cuvmm").log(System.Logger.Level.DEBUG, "cuvmm set " + MAX_PHYSICAL_BYTES
                    + "=0 for this JVM (JavaCPP's resident-size check, shared by every JavaCPP library); set the "
                    + "property yourself to keep another value");
        }
    }
}
