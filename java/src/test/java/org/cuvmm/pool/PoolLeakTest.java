package org.cuvmm.pool;

import java.util.Map;
import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.cuvmm.LeakDetection;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** Sampled leak tracking: a watched pooled buffer never closed comes back through the cleaner. */
class PoolLeakTest {
    @Test
    void leakedLocalBufferIsReportedAndReusedLeakedExportedIsReleased() throws Exception {
        Map<String, Long> liveBefore = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(1).build()) {
            long g = resource.granularity();
            long reports = LeakDetection.reportedLeaks();
            leak(pool, false);
            leak(pool, true);
            long deadline = System.nanoTime() + 20_000_000_000L;
            while ((pool.stats(PoolLifetime.LOCAL).leaks() < 1 || pool.stats(PoolLifetime.EXPORTED).leaks() < 1)
                    && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
            }
            assertTrue(LeakDetection.reportedLeaks() >= reports + 2, "both leaks reported with the core's warning");
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 1, g, "a leaked local buffer comes back for reuse");
            assertStats(pool.stats(PoolLifetime.EXPORTED), 0, 0, 0, 0,
                    "a leaked exported buffer is released: a lost lease may still map it");
            assertEquals(1, pool.stats(PoolLifetime.LOCAL).leaks());
            assertEquals(1, pool.stats(PoolLifetime.EXPORTED).leaks());
        }
        LiveObjects.assertBack(liveBefore, "after the pool closed");
    }

    private static void leak(VirtualMemoryPool pool, boolean exported) {
        (exported ? pool.allocateExported(1) : pool.allocate(1)).fill((byte) 1); // never closed
    }
}
