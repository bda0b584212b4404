package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.util.Set;

import javax.management.JMX;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/** The beans JConsole shows: registered on request, attributes equal to the stats, gone at close. */
class PoolMXBeanTest {
    @Test
    void beansShowThePoolsNumbersAndGoAwayAtClose() throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        String name = "mxbean-test-" + ProcessHandle.current().pid();
        ObjectName local;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name(name).registerMBeans(true)
                     .retentionCap(PoolLifetime.EXPORTED, 64L << 20).build()) {
            long g = resource.granularity();
            local = pool.objectName(PoolLifetime.LOCAL);
            assertEquals(new ObjectName("org.cuvmm:type=VirtualMemoryPool,name=" + name + ",lifetime=local"), local);
            ObjectName exported = pool.objectName(PoolLifetime.EXPORTED);
            assertTrue(server.isRegistered(local));
            assertTrue(server.isRegistered(exported));
            Set<ObjectName> found = server.queryNames(new ObjectName("org.cuvmm:type=VirtualMemoryPool,name=" + name
                    + ",*"), null);
            assertEquals(Set.of(local, exported), found);

            VirtualMemoryBuffer a = pool.allocate(g + 100);
            VirtualMemoryBuffer b = pool.allocate(3 * g);
            b.close();
            VirtualMemoryBuffer c = pool.allocate(2 * g); // 3 granules idle: within twice of 2
            VirtualMemoryBuffer e = pool.allocateExported(g);
            assertAttributesMatch(server, local, pool.stats(PoolLifetime.LOCAL));
            assertAttributesMatch(server, exported, pool.stats(PoolLifetime.EXPORTED));
            assertEquals(g + 100 + 2 * g, server.getAttribute(local, "TotalCapacity"));
            assertEquals(2 * g + 3 * g, server.getAttribute(local, "MemoryUsed"));
            assertEquals(1L, server.getAttribute(local, "LargerClassHits"));

            // Writable cap and the trim operation, as an operator would use them from JConsole.
            a.close();
            c.close();
            server.setAttribute(local, new javax.management.Attribute("RetentionCap", 3 * g));
            assertEquals(3 * g, pool.retentionCap(PoolLifetime.LOCAL));
            assertEquals(3 * g, pool.stats(PoolLifetime.LOCAL).retainedBytes(), "the cap evicted the oldest");
            assertEquals(3 * g, server.invoke(local, "trim", new Object[0], new String[0]));
            assertAttributesMatch(server, local, pool.stats(PoolLifetime.LOCAL));

            // A typed proxy, as monitoring code would use it.
            VirtualMemoryPoolMXBean proxy = JMX.newMXBeanProxy(server, exported, VirtualMemoryPoolMXBean.class);
            assertEquals(1, proxy.getCount());
            assertEquals(g, proxy.getMemoryUsed());
            assertEquals("exported", proxy.getLifetime());
            assertEquals(name, proxy.getName());
            assertEquals(exported, proxy.getObjectName());
            e.close();
            assertEquals(1, proxy.getRetainedCount());
            assertEquals(0, proxy.getMemoryUsed(), "retained memory is not reported as used");

            IllegalStateException dup = assertThrows(IllegalStateException.class,
                    () -> VirtualMemoryPool.builder().resource(resource).name(name).registerMBeans(true).build());
            assertTrue(dup.getMessage().startsWith("name: " + name + " (expected: a name no other registered pool"),
                    dup.getMessage());
            assertTrue(server.isRegistered(local), "a failed registration leaves the first pool's beans alone");
        }
        assertFalse(server.isRegistered(local), "unregistered at close");
        assertTrue(server.queryNames(new ObjectName("org.cuvmm:type=VirtualMemoryPool,name=" + name + ",*"), null)
                .isEmpty());
    }

    @Test
    void oddNamesAreQuoted() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("a,b=c:d").registerMBeans(true)
                     .build()) {
            ObjectName on = pool.objectName(PoolLifetime.LOCAL);
            assertEquals("a,b=c:d", ObjectName.unquote(on.getKeyProperty("name")));
            assertEquals("a,b=c:d", ManagementFactory.getPlatformMBeanServer().getAttribute(on, "Name"));
        }
    }

    private static void assertAttributesMatch(MBeanServer server, ObjectName on, PoolStats s) throws Exception {
        assertEquals(s.poolName(), server.getAttribute(on, "Name"));
        assertEquals(s.lifetime().key(), server.getAttribute(on, "Lifetime"));
        assertEquals(s.liveCount(), server.getAttribute(on, "Count"));
        assertEquals(s.liveRequestedBytes(), server.getAttribute(on, "TotalCapacity"));
        assertEquals(s.liveBytes(), server.getAttribute(on, "MemoryUsed"));
        assertEquals(s.peakLiveBytes(), server.getAttribute(on, "PeakMemoryUsed"));
        assertEquals(s.retainedCount(), server.getAttribute(on, "RetainedCount"));
        assertEquals(s.retainedBytes(), server.getAttribute(on, "RetainedBytes"));
        assertEquals(s.retentionCapBytes(), server.getAttribute(on, "RetentionCap"));
        assertEquals(s.hits(), server.getAttribute(on, "Hits"));
        assertEquals(s.largerClassHits(), server.getAttribute(on, "LargerClassHits"));
        assertEquals(s.misses(), server.getAttribute(on, "Misses"));
        assertEquals(s.evictions(), server.getAttribute(on, "Evictions"));
        assertEquals(s.evictedBytes(), server.getAttribute(on, "EvictedBytes"));
        assertEquals(s.trimmedBytes(), server.getAttribute(on, "TrimmedBytes"));
        assertEquals(s.leaks(), server.getAttribute(on, "Leaks"));
        assertEquals(on, server.getAttribute(on, "ObjectName"));
    }
}
