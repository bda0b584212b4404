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

    /**
     * Collects garbage until no live count is above {@code expected} (ByteBuffer views pin
     * their buffer's memory until collected), so that no later test sees them in its baseline;
     * fails naming the counts still above. Counts below are fine: an earlier test's garbage
     * may go in the same collections. The bound only guards against a hang (a collection
     * normally clears views in milliseconds), so it is generous.
     */
    public static void awaitBackAfterViewsAreCollected(Map<String, Long> expected) {
        long waitSeconds = 120;
        long deadline = System.nanoTime() + waitSeconds * 1_000_000_000L;
        Map<String, Long> above;
        while (!(above = above(expected)).isEmpty() && System.nanoTime() < deadline) {
            System.gc();
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionError("interrupted while waiting for views to be collected", e);
            }
        }
        assertEquals(Map.of(), above, "live driver objects above the baseline after the ByteBuffer views became "
                + "unreachable and " + waitSeconds + " s of System.gc() calls (still live: a view is reachable from "
                + "somewhere, or the GC never cleared it; a view pins its buffer's mapping until it is collected)");
    }

    /**
     * Lets the garbage an earlier test left go before the next takes its baseline: a
     * ByteBuffer view nobody references pins its buffer's mapping until the collector clears
     * it, and a test that compares counts for equality (an {@link #assertBack} after a race,
     * say) then fails when that happens in the middle of it (a review saw it twice; CI once).
     * Nothing to do when every count is 0; else collects until the counts hold still for two
     * reads in a row, 2 s at most (what stays is not garbage: the next test's baseline has it).
     * Run before each test class by {@link SettleLiveObjectsExtension}.
     */
    public static void settle() {
        Map<String, Long> previous = now();
        if (previous.values().stream().allMatch(v -> v == 0)) return;
        long deadline = System.nanoTime() + 2_000_000_000L;
        int still = 0;
        while (still < 2 && System.nanoTime() < deadline) {
            System.gc();
            try {
                Thread.sleep(25); // the cleaner's thread releases what the collection found
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            Map<String, Long> current = now();
            if (current.equals(previous)) {
                still++;
            } else {
                still = 0;
                previous = current;
            }
        }
    }

    /** The counts now above {@code expected}, with their values now. */
    public static Map<String, Long> above(Map<String, Long> expected) {
        return above(now(), expected);
    }

    /** The counts of {@code snapshot} (from {@link #now()}) above {@code expected}, with their values. */
    public static Map<String, Long> above(Map<String, Long> snapshot, Map<String, Long> expected) {
        Map<String, Long> above = new TreeMap<>();
        snapshot.forEach((k, v) -> { if (v > expected.getOrDefault(k, 0L)) above.put(k, v); });
        return above;
    }

    /** Fails naming each count that differs from {@code expected} (from {@link #now()}). */
    public static void assertBack(Map<String, Long> expected, String when) {
        Map<String, Long> now = now();
        assertEquals(expected, now, "live driver objects " + when + " differ: " + OpenFds.diff(expected, now));
    }
}
