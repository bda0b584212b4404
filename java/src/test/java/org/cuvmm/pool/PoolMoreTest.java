package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.*;

import java.util.Map;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: SizeClasses' promises over many granularities; pool stats with aliases and caps. */
class PoolMoreTest {
    @Test
    void sizeClassesKeepTheirPromises() {
        assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity(0));
        assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity(-4096));
        assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity((1L << 62) + 1));
        for (long g : new long[] {1, 3, 4096, 65536, 2L << 20, 3L << 20, 1L << 40, (1L << 61) + 1, (1L << 62) - 1, 1L << 62}) {
            SizeClasses c = SizeClasses.forGranularity(g);
            assertEquals(g, c.granularity());
            assertTrue(c.count() >= 1);
            assertEquals(c.classSize(c.count() - 1), c.maxClassSize());
            assertThrows(IndexOutOfBoundsException.class, () -> c.classSize(-1));
            assertThrows(IndexOutOfBoundsException.class, () -> c.classSize(c.count()));
            assertThrows(IndexOutOfBoundsException.class, () -> c.reuseLimitIdx(c.count()));
            assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(0));
            assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(c.maxClassSize() + 1));
            assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(Long.MAX_VALUE));
            long prev = 0;
            for (int i = 0; i < c.count(); i++) {
                long cs = c.classSize(i);
                assertTrue(cs > prev, "classes ascend, g " + g + " idx " + i);
                assertEquals(0, cs % g, "multiple of the granularity, g " + g);
                assertTrue(cs <= (1L << 62));
                int lim = c.reuseLimitIdx(i);
                assertTrue(lim >= i);
                assertTrue(c.classSize(lim) <= Math.max(cs, Math.min(c.maxClassSize(), 2 * cs)) || cs > c.maxClassSize() / 2,
                        "reuse limit within 2x, g " + g + " idx " + i);
                for (long req : new long[] {prev + 1, cs - 1, cs}) {
                    if (req < 1 || req > c.maxClassSize()) continue;
                    int idx = c.sizeIdx(req);
                    assertTrue(c.classSize(idx) >= req, "holds the request");
                    assertTrue(idx == 0 || c.classSize(idx - 1) < req, "smallest class, g " + g + " req " + req);
                }
                prev = cs;
            }
        }
    }

    @Test
    void anAliasOutlivingAPooledBufferCostsTheSlotAndStatsStayExact() {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).build()) {
            long g = r.granularity();
            VirtualMemoryBuffer b = p.allocate(g);
            VirtualMemoryBuffer alias = r.modifyAllocation(b, 1);
            b.close();
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.liveCount());
            assertEquals(0, s.liveBytes());
            assertEquals(0, s.retainedCount(), "memory an alias maps must not be retained");
            alias.close();
            VirtualMemoryBuffer c = p.allocate(g);
            assertEquals(2, p.stats(PoolLifetime.LOCAL).misses(), "the next allocation of its class is a miss");
            c.close();
            // a single buffer larger than the cap is released when closed, counted as an eviction
            p.setRetentionCap(PoolLifetime.LOCAL, g);
            p.trim();
            long ev = p.stats(PoolLifetime.LOCAL).evictions();
            VirtualMemoryBuffer big = p.allocate(2 * g);
            big.close();
            s = p.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.retainedCount());
            assertEquals(ev + 1, s.evictions());
            assertEquals(2 * g, s.peakLiveBytes());
        }
        LiveObjects.assertBack(before, "after pool aliases");
    }
}
