package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.management.ManagementFactory;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * {@link VirtualMemoryPool}, "Leaks": a leak is taken back "at the pool's next miss, trim,
 * setRetentionCap, stats call, bean read or close". A bean read is any attribute, not only the
 * live and retained ones.
 */
class BeanReadsTakeBackLeaksTest {
    /**
     * Cap 0: a leaked local buffer comes back as an eviction (its class alone is over the cap).
     * Once the garbage collector queued its watch, the first read of {@code Evictions} takes it
     * back and counts it. It read 0, with the leak still untaken, because that getter did not
     * look at the leak queue (failed on the old code: 0, while a read of {@code Count} or
     * {@code Leaks} would have taken it back).
     */
    @Test
    void aReadOfEvictionsTakesBackALeakedBufferFirst() throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource)
                     .name("bean-read-leak-" + ProcessHandle.current().pid()).registerMBeans(true)
                     .retentionCap(PoolLifetime.LOCAL, 0).build()) {
            ObjectName local = pool.objectName(PoolLifetime.LOCAL);
            PoolTestSupport.leakOneAndAwaitItsWatch(pool);
            assertEquals(1L, server.getAttribute(local, "Evictions"),
                    "the leaked buffer, taken back at this read, released for exceeding the cap of 0");
            assertEquals(resource.granularity(), server.getAttribute(local, "EvictedBytes"));
            assertEquals(1L, server.getAttribute(local, "Leaks"));
            assertEquals(0L, server.getAttribute(local, "Count"));
        }
    }
}
