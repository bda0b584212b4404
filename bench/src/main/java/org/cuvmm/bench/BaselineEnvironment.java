package org.cuvmm.bench;

/**
 * The environment a C++ baseline process starts with: the driver settings this JVM resolved
 * from system properties, as the environment variables the baseline reads (the same names
 * cuvmm itself reads), so both sides of a ratio run the same driver the same way.
 */
public final class BaselineEnvironment {
    private BaselineEnvironment() {}

    /** Copies each cuvmm driver setting given as a system property into {@code pb}'s environment. */
    public static void passDriverSettings(ProcessBuilder pb) {
        pass(pb, "cuvmm.driver", "CUVMM_DRIVER");
        pass(pb, "cuvmm.host.devices", "CUVMM_HOST_DEVICES");
        pass(pb, "cuvmm.host.granularity", "CUVMM_HOST_GRANULARITY");
        pass(pb, "cuvmm.cuda.library", "CUVMM_CUDA_LIBRARY");
    }

    private static void pass(ProcessBuilder pb, String property, String variable) {
        String v = System.getProperty(property);
        if (v != null && !v.isBlank()) pb.environment().put(variable, v.trim());
    }
}
