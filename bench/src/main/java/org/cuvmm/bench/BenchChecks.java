package org.cuvmm.bench;

import java.util.Locale;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;

/**
 * Checks every benchmark (core, pool, sharing) makes in setup and teardown, never inside a
 * measured op. Fixture verification, a different concern from the core's argument checks
 * ({@code org.cuvmm.internal.Checks}), hence its own class; the only one in the bench module.
 */
public final class BenchChecks {
    /**
     * System property {@link RatioReport} and {@code SharingPoolReport} set on the forked benchmark JVM: the driver kind
     * ("host" or "cuda") the C++ baseline ran on, so both sides are known to use the same one.
     */
    public static final String EXPECT_DRIVER_PROPERTY = "cuvmm.bench.expectDriver";

    private BenchChecks() {}

    /** Selects the driver; throws when it is not the one {@link #EXPECT_DRIVER_PROPERTY} names. */
    public static Driver expectedDriver() {
        Driver driver = Driver.get();
        String expected = System.getProperty(EXPECT_DRIVER_PROPERTY);
        String actual = driver.kind().name().toLowerCase(Locale.ROOT);
        if (expected != null && !expected.equalsIgnoreCase(actual)) {
            throw new IllegalStateException(EXPECT_DRIVER_PROPERTY + ": " + expected + " (but this JVM runs the "
                    + actual + " driver: " + driver.reason() + "); the Java and C++ sides must use the same driver");
        }
        return driver;
    }

    /** Throws when cuvmm objects are still alive after a fixture was closed (a leak in the op). */
    public static void nothingLeft() {
        DriverCounters c = Driver.get().counters();
        if (c.liveAllocations() != 0 || c.liveReservations() != 0 || c.liveMappings() != 0 || c.liveRanges() != 0) {
            throw new IllegalStateException("objects left alive after the benchmark: " + c);
        }
    }
}
