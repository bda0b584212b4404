package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;

import org.cuvmm.Driver;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link VirtualMemoryPool}, "Streams": "A free on a stream not yet ordered after an earlier
 * pending free of the same memory first makes that stream wait for it (counted in
 * {@code streamWaits})", and a cross-stream allocate+free makes one {@code cuStreamWaitEvent}.
 * Also when the free's stream is on another device than the earlier free's (allowed: the free
 * then takes that device's event). Counted on the driver; nothing depends on timing (a free's
 * record stays pending for the pool until a host wait clears it).
 */
class CrossDeviceFreeWaitTest {
    private static final long SIZE = MiB;

    @BeforeEach
    void twoDevices() {
        Assumptions.assumeTrue(Driver.get().deviceCount() >= 2, "needs two devices; this driver has "
                + Driver.get().deviceCount());
    }

    private static long waitsSince(Map<String, Long> before) {
        return PoolTestSupport.counters().calls().getOrDefault("cuStreamWaitEvent", 0L)
                - before.getOrDefault("cuStreamWaitEvent", 0L);
    }

    /**
     * Memory passed back and forth between a stream of device 0 and one of device 1, each
     * round allocated and freed on the same stream: the allocation waits for the other
     * device's free (one wait, counted), and the free needs none (its stream is ordered after
     * that record already). The free waited again, uncounted (failed on the old code: 40
     * waits in 20 rounds, streamWaits 20).
     */
    @Test
    void memoryPassedBetweenTwoDevicesStreamsWaitsOncePerRound() {
        final int rounds = 20;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build();
             Stream s0 = Stream.builder(0).nonBlocking(true).build();
             Stream s1 = Stream.builder(1).nonBlocking(true).build()) {
            pool.allocate(SIZE, s0).close(s0); // warm: the range and device 0's event
            Map<String, Long> before = PoolTestSupport.counters().calls();
            for (int i = 0; i < rounds; i++) {
                Stream s = i % 2 == 0 ? s1 : s0; // each round takes what the other device's stream freed
                pool.allocate(SIZE, s).close(s);
            }
            long waits = waitsSince(before);
            s0.synchronize();
            s1.synchronize();
            PoolStats st = pool.stats(PoolLifetime.LOCAL);
            assertEquals(rounds, waits, "one cuStreamWaitEvent per round (the allocation's): " + st);
            assertEquals(rounds, st.streamWaits(), "each counted: " + st);
            assertEquals(1, st.misses(), st.toString());
            assertEquals(2, st.eventsCreated(), "one event per device: " + st);
        }
    }

    /**
     * Freed on s0 (pending), reused on s0 (no wait: same stream), freed on s1 of device 1: s1
     * is not ordered after s0's record, so it waits once, and that wait is counted. It was
     * made but not counted (failed on the old code: streamWaits 0 with one wait made).
     */
    @Test
    void aFreeOnAnotherDevicesUnorderedStreamCountsItsWait() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build();
             Stream s0 = Stream.builder(0).nonBlocking(true).build();
             Stream s1 = Stream.builder(1).nonBlocking(true).build()) {
            pool.allocate(SIZE, s0).close(s0);
            Map<String, Long> before = PoolTestSupport.counters().calls();
            pool.allocate(SIZE, s0).close(s1);
            long waits = waitsSince(before);
            s0.synchronize();
            s1.synchronize();
            PoolStats st = pool.stats(PoolLifetime.LOCAL);
            assertEquals(1, waits, "s1 waited for s0's free: " + st);
            assertEquals(1, st.streamWaits(), "counted: " + st);
        }
    }
}
