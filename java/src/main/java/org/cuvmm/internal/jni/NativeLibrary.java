package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Loader;
import org.bytedeco.javacpp.annotation.Platform;
import org.bytedeco.javacpp.annotation.Properties;

/**
 * Build and load configuration shared by every class in this package: one JNI library,
 * {@code jnicuvmm}, compiled by the JavaCPP plugin from the generated glue plus
 * {@code native/}'s static library. {@code libcuda} is not linked: the native code opens it
 * with {@code dlopen} when the cuda driver is selected.
 */
@Properties(
        target = "org.cuvmm.internal.jni.NativeLibrary",
        value = @Platform(
                include = {"cuvmm/jni_api.hpp", "cuvmm/jni_file_mappings.hpp"},
                link = {"cuvmm_native", "dl"},
                library = "jnicuvmm"))
public final class NativeLibrary {
    private static volatile boolean loaded;

    static {
        JavaCppSettings.apply();
    }

    private NativeLibrary() {}

    /** Loads the JNI library once; later calls return at once. */
    public static void load() {
        if (loaded) return;
        synchronized (NativeLibrary.class) {
            if (loaded) return;
            JavaCppSettings.apply();
            Loader.load(NativeLibrary.class);
            loaded = true;
        }
    }
}
