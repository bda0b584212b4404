package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.cuvmm.LeakDetection;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A pooled buffer never closed comes back through the pool's accounting, whether or not it
 * was sampled to record its allocation site (leakSampleRate 1: every buffer; 0: none): it is
 * warned and counted, a local one is kept for reuse, an exported one is released.
 */
class PoolLeakTest {
    @ParameterizedTest(name = "leakSampleRate {0}")
    @ValueSource(ints = {1, 0})
    void leakedLocalBufferIsReportedAndReusedLeakedExportedIsReleased(int leakSampleRate) throws Exception {
        Map<String, Long> liveBefore = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(leakSampleRate)
                     .build()) {
            long g = resource.granularity();
            long reports = LeakDetection.reportedLeaks();
            leak(pool, false);
            leak(pool, true);
            assertStats(pool.stats(PoolLifetime.LOCAL), 1, g, 0, 0, "while the local buffer is leaked");
            awaitLeaks(pool, 1, 1);

            assertTrue(LeakDetection.reportedLeaks() >= reports + 2, "both leaks reported with the core's warning");
            PoolStats local = pool.stats(PoolLifetime.LOCAL);
            assertStats(local, 0, 0, 1, g, "a leaked local buffer comes back for reuse");
            assertEquals(1, local.leaks());
            assertEquals(g, local.peakLiveBytes());
            PoolStats exported = pool.stats(PoolLifetime.EXPORTED);
            assertStats(exported, 0, 0, 0, 0, "a leaked exported buffer is released: a lost lease may still map it");
            assertEquals(1, exported.leaks());

            // The slot really came back: the next allocation of its class reuses it, the peak stays.
            long misses = local.misses();
            try (VirtualMemoryBuffer again = pool.allocate(1)) {
                assertEquals(misses, pool.stats(PoolLifetime.LOCAL).misses(), "the leaked slot is reused");
                assertStats(pool.stats(PoolLifetime.LOCAL), 1, g, 0, 0, "reusing the leaked slot");
            }
            assertEquals(g, pool.stats(PoolLifetime.LOCAL).peakLiveBytes(), "peak after reuse");
        }
        LiveObjects.assertBack(liveBefore, "after the pool closed");
    }

    /** A buffer closed in time is never reported, even with every buffer watched and collected. */
    @ParameterizedTest(name = "leakSampleRate {0}")
    @ValueSource(ints = {1, 0})
    void closedBuffersAreNeverReportedAsLeaks(int leakSampleRate) throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(leakSampleRate)
                     .build()) {
            for (int i = 0; i < 1000; i++) pool.allocate(1 + i % 3).close();
            leak(pool, false); // a marker: once it is reported, every earlier watch was processed too
            awaitLeaks(pool, 1, 0);
            assertEquals(1, pool.stats(PoolLifetime.LOCAL).leaks(), "only the marker leaked");
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 1, resource.granularity(), "after the marker came back");
        }
    }

    private static void leak(VirtualMemoryPool pool, boolean exported) {
        (exported ? pool.allocateExported(1) : pool.allocate(1)).fill((byte) 1); // never closed
    }

    /** Collects garbage until the pool has counted the leaks (at most 20 s, then fails with the stats). */
    private static void awaitLeaks(VirtualMemoryPool pool, long local, long exported) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while ((pool.stats(PoolLifetime.LOCAL).leaks() < local || pool.stats(PoolLifetime.EXPORTED).leaks() < exported)
                && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        assertEquals(local, pool.stats(PoolLifetime.LOCAL).leaks(),
                "local leaks counted: " + pool.stats(PoolLifetime.LOCAL));
        assertEquals(exported, pool.stats(PoolLifetime.EXPORTED).leaks(),
                "exported leaks counted: " + pool.stats(PoolLifetime.EXPORTED));
    }
}
