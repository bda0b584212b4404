package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * A copy between two windows that share memory is undefined on the driver (cuMemcpyDtoD and
 * cuMemcpyDtoDAsync): copyFrom and copyFromAsync refuse it with IllegalArgumentException,
 * whether the windows are in one buffer or in an alias, a grown buffer or a shared view of
 * it, and before any driver call. Windows apart, in one memory or not, still copy. The
 * asynchronous copy accepted an overlap before (found by an independent probe).
 */
class OverlapCopyTest {
    private static final int N = 4096;

    private static void assertRefused(Runnable copy, String call) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, copy::run);
        assertTrue(e.getMessage().startsWith(call + ": ") && e.getMessage().contains("share memory"), e.getMessage());
    }

    @Test
    void overlappingWindowsAreRefusedBeforeAnyDriverCall() {
        DriverCounters k = TestSupport.counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             VirtualMemoryBuffer grown = r.modifyAllocation(b, 3 * MiB); // maps b's allocation first
             VirtualMemoryBuffer view = b.share(() -> { });
             Stream s = Stream.create(0)) {
            Map<String, Long> before = k.calls();
            assertRefused(() -> b.copyFrom(1, b, 0, N), "copyFrom");
            assertRefused(() -> b.copyFromAsync(1, b, 0, N, s), "copyFromAsync");
            assertRefused(() -> grown.copyFrom(0, b, 100, N), "copyFrom"); // the same allocation, other buffer
            assertRefused(() -> b.copyFromAsync(100, grown, 0, N, s), "copyFromAsync");
            assertRefused(() -> view.copyFrom(N - 1, b, 0, N), "copyFrom");
            // No driver call of a copy's: no copy, no stream borrowed, no wait or record queued
            // (the counters are process-wide: another test's cleaner may add teardown calls).
            for (String entry : new String[] {"cuMemcpyDtoD", "cuMemcpyDtoDAsync", "cuStreamCreate",
                    "cuStreamCreateWithPriority", "cuStreamDestroy", "cuStreamWaitEvent", "cuEventRecord"}) {
                assertEquals(0, k.calls(entry) - before.getOrDefault(entry, 0L), entry + " made by a refused copy");
            }
        }
    }

    @Test
    void windowsApartStillCopy() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             VirtualMemoryBuffer grown = r.modifyAllocation(b, 3 * MiB);
             VirtualMemoryBuffer other = r.allocate(MiB);
             Stream s = Stream.create(0)) {
            byte[] data = new byte[N];
            for (int i = 0; i < N; i++) data[i] = (byte) (i * 31 + 7);
            b.copyFrom(0, data, 0, N);
            b.copyFrom(N, b, 0, N); // one buffer, touching but apart
            grown.copyFrom(2 * MiB, b, 0, N); // b's memory into the grown buffer's new chunk
            b.copyFromAsync(3 * N, grown, N, N, s); // one allocation, apart
            other.copyFromAsync(0, b, 0, N, s);
            s.synchronize();
            byte[] got = new byte[N];
            for (long at : new long[] {N, 3 * N}) {
                b.copyTo(at, got, 0, N);
                assertArrayEquals(data, got, "b at " + at);
            }
            grown.copyTo(2 * MiB, got, 0, N);
            assertArrayEquals(data, got, "grown's new chunk");
            other.copyTo(0, got, 0, N);
            assertArrayEquals(data, got, "other");
        }
    }
}
