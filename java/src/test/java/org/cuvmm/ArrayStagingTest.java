package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;

import org.junit.jupiter.api.Test;

/**
 * The pinned staging of {@code copyFromAsync(offset, byte[], ...)}: bounded per copy, taken back
 * on the caller's thread before new pinned memory is allocated, markers from EventCache.
 * Counted with the driver's call counters.
 */
class ArrayStagingTest {
    private static long delta(DriverCounters k, String entry, long before) { return k.calls(entry) - before; }

    @Test
    void aLargeArrayCopyPinsAtMostTheCapInFlight() {
        int pieces = 32;
        DriverCounters k = TestSupport.counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(pieces * MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            byte[] src = new byte[(int) (pieces * MiB)];
            for (int i = 0; i < pieces; i++) Arrays.fill(src, (int) (i * MiB), (int) ((i + 1) * MiB), (byte) (i + 1));
            long allocs = k.calls("cuMemHostAlloc");
            b.copyFromAsync(0, src, 0, src.length, s);
            long made = delta(k, "cuMemHostAlloc", allocs);
            s.synchronize();
            assertTrue(made <= AsyncCopies.STAGING_IN_FLIGHT, "pinned pieces allocated for a " + pieces
                    + " MiB array: " + made + " (expected: at most " + AsyncCopies.STAGING_IN_FLIGHT + ")");
            byte[] back = new byte[src.length];
            b.copyTo(0, back, 0, back.length);
            for (int i = 0; i < pieces; i++) assertEquals((byte) (i + 1), back[(int) (i * MiB + 7)], "piece " + i);
        }
    }

    @Test
    void steadyStateArrayCopiesAllocateNothing() {
        final int rounds = 40;
        DriverCounters k = TestSupport.counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            byte[] src = new byte[(int) MiB];
            for (int i = 0; i < 4; i++) { // warm: a staging piece kept, markers in EventCache
                b.copyFromAsync(0, src, 0, src.length, s);
                s.synchronize();
            }
            StreamTestSupport.reaperDrained();
            long allocs = k.calls("cuMemHostAlloc");
            long creates = k.calls("cuEventCreate");
            long records = k.calls("cuEventRecord");
            for (int i = 0; i < rounds; i++) {
                src[0] = (byte) i;
                b.copyFromAsync(0, src, 0, src.length, s);
                s.synchronize();
                // The reaper hands the marker back on its own thread; waiting for it makes the
                // count below independent of how fast that thread runs (it flaked under load).
                StreamTestSupport.reaperDrained();
            }
            assertEquals(0, delta(k, "cuMemHostAlloc", allocs),
                    "the finished copy's piece is taken back on the caller's thread before any allocation");
            long made = delta(k, "cuEventCreate", creates);
            assertEquals(0, made, "cuEventCreate over " + rounds + " copies: " + made + " (expected: markers "
                    + "reused from EventCache, not one per copy)");
            assertEquals(2L * rounds, delta(k, "cuEventRecord", records),
                    "per copy: the buffer's use and the staging marker");
            byte[] back = new byte[1];
            b.copyTo(0, back, 0, 1);
            assertEquals((byte) (rounds - 1), back[0]);
        }
    }

    /** Review probe: a release held by one stream must not make array copies on another allocate pinned memory. */
    @Test
    void aReleaseHeldOnAnotherStreamDoesNotGrowTheStaging() {
        DriverCounters k = TestSupport.counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             Stream a = Stream.create(0);
             Stream b = Stream.builder(0).nonBlocking(true).build();
             VirtualMemoryBuffer y = r.allocate(MiB)) {
            VirtualMemoryBuffer x = r.allocate(MiB);
            byte[] arr = new byte[(int) MiB];
            y.copyFromAsync(0, arr, 0, arr.length, b); // warm: one piece exists
            b.synchronize();
            java.util.concurrent.CountDownLatch hold = StreamTestSupport.gate(a);
            try {
                x.fillAsync(0, 16, (byte) 1, a);
                x.close(a); // its release waits for a, which is held
                long allocs = k.calls("cuMemHostAlloc");
                for (int i = 0; i < 20; i++) {
                    y.copyFromAsync(0, arr, 0, arr.length, b);
                    b.synchronize();
                }
                assertEquals(0, delta(k, "cuMemHostAlloc", allocs), "20 array copies on b while a release waits on a");
            } finally {
                hold.countDown();
            }
            a.synchronize();
            StreamTestSupport.reaperDrained();
        }
    }
}
