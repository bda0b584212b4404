package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.Test;

/**
 * An asynchronous copy or fill is one native call: the op, the stream-use record of the
 * memory it touches (one {@code cuEventRecord}, shared by both sides) and one context check
 * ({@code cuCtxGetCurrent}) for the two, once the use tables have their event. Counted with the
 * driver's call counters, which are process-wide: another test's objects freed by the cleaner
 * meanwhile add their own teardown calls, each with one context check, so those are allowed for.
 */
class AsyncCopyCallsTest {
    private static final int ROUNDS = 50;
    private static final int N = 64 << 10;
    /** Entries an op may make; anything else in the window is someone else's (a teardown). */
    private static final Set<String> OP_ENTRIES = Set.of("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync",
            "cuMemsetD8Async", "cuEventRecord", "cuCtxGetCurrent", "cuCtxSetCurrent");

    @Test
    void anAsyncOpIsTheOpOneRecordAndOneContextCheck() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer a = r.allocate(MiB);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build();
             PinnedHostBuffer p = PinnedHostBuffer.allocate(MiB)) {
            for (int i = 0; i < N; i++) p.asByteBuffer().put(i, (byte) (i * 7 + 1));
            // First uses on s: the tables get their (shared) events.
            a.copyFromAsync(0, p, 0, N, s);
            a.copyToAsync(N, p, N, N, s);
            b.copyFromAsync(0, a, 0, N, s);
            b.fillAsync(N, N, (byte) 9, s);
            s.synchronize();

            assertPerOp("cuMemcpyHtoDAsync", () -> a.copyFromAsync(0, p, 0, N, s));
            assertPerOp("cuMemcpyDtoHAsync", () -> b.copyToAsync(0, p, 2L * N, N, s));
            assertPerOp("cuMemcpyDtoDAsync", () -> b.copyFromAsync(N, a, 0, N, s));
            assertPerOp("cuMemsetD8Async", () -> a.fillAsync(N, N, (byte) 5, s));
            s.synchronize();

            // The ops did their work, in stream order.
            for (int i = 0; i < N; i += 4093) {
                assertEquals((byte) (i * 7 + 1), p.asByteBuffer().get(2 * N + i), "byte " + i + " copied to the device and back");
            }
            byte[] back = new byte[2];
            b.copyTo(N, back, 0, 1);
            a.copyTo(N, back, 1, 1);
            assertEquals((byte) 1, back[0]);
            assertEquals((byte) 5, back[1]);
        }
    }

    private static void assertPerOp(String op, Runnable call) {
        DriverCounters k = TestSupport.counters();
        Map<String, Long> before = k.calls();
        for (int i = 0; i < ROUNDS; i++) call.run();
        Map<String, Long> after = k.calls();
        long others = 0;
        for (var e : after.entrySet()) {
            if (!OP_ENTRIES.contains(e.getKey())) others += e.getValue() - before.getOrDefault(e.getKey(), 0L);
        }
        assertEquals(ROUNDS, delta(before, after, op), op + ": one per op");
        assertEquals(ROUNDS, delta(before, after, "cuEventRecord"), op + ": one stream-use record per op");
        long contextChecks = delta(before, after, "cuCtxGetCurrent");
        // One per op; each teardown call of someone else's object in the window brings one.
        assertTrue(contextChecks >= ROUNDS && contextChecks <= ROUNDS + others,
                op + ": " + contextChecks + " cuCtxGetCurrent for " + ROUNDS + " ops (expected: one per op, the op and "
                        + "its record in one context scope; " + others + " other calls in the window)");
    }

    private static long delta(Map<String, Long> before, Map<String, Long> after, String entry) {
        return after.getOrDefault(entry, 0L) - before.getOrDefault(entry, 0L);
    }
}
