package org.cuvmm.internal.jni;

/**
 * JavaCPP settings cuvmm needs, applied before JavaCPP's {@code Pointer} class initializes
 * (it reads them once, in its static initializer). Every class of cuvmm that can be the
 * first to touch a {@code Pointer} subclass calls {@link #apply()} from its own static
 * initializer.
 */
public final class JavaCppSettings {
    private JavaCppSettings() {}

    /**
     * maxPhysicalBytes=0: otherwise JavaCPP reads /proc/self/statm on every Pointer
     * allocation and may call System.gc() when the process's resident size is large, and
     * mapped GPU or shared memory is none of its business. An application's own setting wins.
     */
    public static void apply() {
        if (System.getProperty("org.bytedeco.javacpp.maxPhysicalBytes") == null) {
            System.setProperty("org.bytedeco.javacpp.maxPhysicalBytes", "0");
        }
    }
}
