package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.*;

import java.lang.management.ManagementFactory;

import javax.management.JMX;
import javax.management.MBeanServer;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/** VirtualMemoryPoolMXBean's and PoolStats' javadoc, read as a monitoring user would. */
class VirtualMemoryPoolMXBeanJavadocContractTest {
    private static VirtualMemoryPoolMXBean proxy(VirtualMemoryPool pool, PoolLifetime lifetime) {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        return JMX.newMXBeanProxy(server, pool.objectName(lifetime), VirtualMemoryPoolMXBean.class);
    }

    /**
     * setRetentionCap: "@throws IllegalArgumentException when capBytes is negative" (naming it,
     * project rule), and the cap stays; getRetentionCap: "Long.MAX_VALUE when unbounded";
     * getLifetime: "local" or "exported"; getName: the pool's name.
     */
    @Test
    void aNegativeCapIsRefusedAndTheCapStays() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).name("jd-mx-cap").registerMBeans(true)
                     .build()) {
            VirtualMemoryPoolMXBean local = proxy(pool, PoolLifetime.LOCAL);
            VirtualMemoryPoolMXBean exported = proxy(pool, PoolLifetime.EXPORTED);
            assertEquals("local", local.getLifetime());
            assertEquals("exported", exported.getLifetime());
            assertEquals("jd-mx-cap", local.getName());
            assertEquals(Long.MAX_VALUE, local.getRetentionCap());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> local.setRetentionCap(-1));
            assertTrue(e.getMessage().contains("capBytes") && e.getMessage().contains("-1"), e.getMessage());
            assertEquals(Long.MAX_VALUE, local.getRetentionCap());
            local.setRetentionCap(5);
            assertEquals(5, local.getRetentionCap());
            assertEquals(Long.MAX_VALUE, exported.getRetentionCap(), "one lifetime's cap set the other's");
        }
    }

    /**
     * Count/TotalCapacity/MemoryUsed describe live buffers only; getPeakMemoryUsed: "The highest
     * MemoryUsed so far"; getHits/getMisses; trim(): "Releases every idle buffer of this lifetime;
     * returns the capacity released", counted by getTrimmedBytes.
     */
    @Test
    void liveFiguresPeakHitsAndTrim() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).name("jd-mx-live").registerMBeans(true)
                     .build()) {
            long g = r.granularity();
            VirtualMemoryPoolMXBean bean = proxy(pool, PoolLifetime.LOCAL);
            VirtualMemoryBuffer a = pool.allocate(g);
            VirtualMemoryBuffer b = pool.allocate(2 * g + 1);
            long cap = a.mappedSize() + b.mappedSize();
            assertEquals(2, bean.getCount());
            assertEquals(g + 2 * g + 1, bean.getTotalCapacity());
            assertEquals(cap, bean.getMemoryUsed());
            assertEquals(cap, bean.getPeakMemoryUsed());
            assertEquals(2, bean.getMisses());
            assertEquals(0, bean.getHits());
            b.close();
            assertEquals(1, bean.getCount());
            assertEquals(a.mappedSize(), bean.getMemoryUsed());
            assertEquals(cap, bean.getPeakMemoryUsed(), "the peak fell with MemoryUsed");
            assertEquals(1, bean.getRetainedCount());
            assertEquals(3 * g, bean.getRetainedBytes());
            VirtualMemoryBuffer again = pool.allocate(2 * g + 1);
            assertEquals(1, bean.getHits());
            again.close();
            assertEquals(3 * g, bean.trim());
            assertEquals(3 * g, bean.getTrimmedBytes());
            assertEquals(0, bean.getRetainedCount());
            assertEquals(0, bean.trim(), "nothing idle left");
            assertEquals(0, bean.getLeaks());
            assertEquals(0, bean.getStreamWaits());
            assertEquals(0, bean.getHostWaits());
            a.close();
            PoolStats s = pool.stats(PoolLifetime.LOCAL);
            assertEquals("jd-mx-live", s.poolName());
            assertEquals(PoolLifetime.LOCAL, s.lifetime());
        }
    }

    /** PoolStats: "Read-only; the values do not change after it is taken." */
    @Test
    void aSnapshotDoesNotChange() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
            PoolStats before = pool.stats(PoolLifetime.LOCAL);
            VirtualMemoryBuffer b = pool.allocate(1);
            assertEquals(0, before.liveCount());
            assertEquals(0, before.misses());
            assertEquals(1, pool.stats(PoolLifetime.LOCAL).liveCount());
            b.close();
            assertEquals(0, before.retainedCount());
        }
    }
}
