package org.cuvmm.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;
import java.util.TreeMap;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;

/**
 * The driver's live native objects, by name: cuvmm's object model (allocations, reservations,
 * mappings, ranges) on either driver, and the host driver's own (allocations, reservations,
 * mappings, memfds; 0 on the cuda driver).
 */
public final class LiveObjects {
    private LiveObjects() {}

    public static Map<String, Long> now() {
        DriverCounters c = Driver.get().counters();
        Map<String, Long> m = new TreeMap<>();
        m.put("allocations", c.liveAllocations());
        m.put("reservations", c.liveReservations());
        m.put("mappings", c.liveMappings());
        m.put("ranges", c.liveRanges());
        m.put("host allocations", c.hostAllocations());
        m.put("host reservations", c.hostReservations());
        m.put("host mappings", c.hostMappings());
        m.put("host memfds", c.hostMemfds());
        return m;
    }

    /** Fails naming each count that differs from {@code expected} (from {@link #now()}). */
    public static void assertBack(Map<String, Long> expected, String when) {
        Map<String, Long> now = now();
        assertEquals(expected, now, "live driver objects " + when + " differ: " + OpenFds.diff(expected, now));
    }
}
