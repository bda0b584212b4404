package org.cuvmm.bench.sharing;

import java.util.Locale;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;

/** Setup and teardown checks of the sharing and pool benchmarks (never inside a measured op). */
public final class Checks {
    /** Set by {@link SharingPoolReport} on the JMH fork: the driver kind the C++ baseline ran on. */
    public static final String EXPECT_DRIVER_PROPERTY = "cuvmm.bench.expectDriver";

    private Checks() {}

    public static Driver expectedDriver() {
        Driver driver = Driver.get();
        String expected = System.getProperty(EXPECT_DRIVER_PROPERTY);
        String actual = driver.kind().name().toLowerCase(Locale.ROOT);
        if (expected != null && !expected.equalsIgnoreCase(actual)) {
            throw new IllegalStateException(EXPECT_DRIVER_PROPERTY + ": " + expected + " (but this JVM runs the "
                    + actual + " driver: " + driver.reason() + ")");
        }
        return driver;
    }

    /** Throws when cuvmm objects are still alive after a fixture was closed. */
    public static void nothingLeft() {
        DriverCounters c = Driver.get().counters();
        if (c.liveAllocations() != 0 || c.liveReservations() != 0 || c.liveMappings() != 0 || c.liveRanges() != 0) {
            throw new IllegalStateException("objects left alive after the benchmark: " + c);
        }
    }
}
