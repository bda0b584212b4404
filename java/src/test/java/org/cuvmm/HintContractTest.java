package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.junit.jupiter.api.Assertions.*;

import java.util.Map;

import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: addressHint is a hint; pool names and beans; pool streams of another device. */
class HintContractTest {
    @Test
    void aTakenHintLandsElsewhere() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource plain = VirtualMemoryResource.create(0); VirtualMemoryBuffer first = plain.allocate(1)) {
            long taken = first.address();
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                    .addressHint(taken).build()); VirtualMemoryBuffer b = r.allocate(1)) {
                assertNotEquals(taken, b.address());
            }
        }
        LiveObjects.assertBack(before, "after hints");
    }

    @Test
    void aFreeHintIsUsedAndAHintBeyondTheAddressSpaceIsOnlyAHint() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        long g;
        long free;
        try (VirtualMemoryResource plain = VirtualMemoryResource.create(0)) {
            g = plain.granularity();
            VirtualMemoryBuffer probe = plain.allocate(1);
            free = probe.address();
            probe.close();
        }
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .addressHint(free).build()); VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(free, b.address(), "a free hinted address was not used");
        }
        long far = 1L << 60; // a multiple of the granularity, outside any 47-bit address space
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .addressHint(far).build()); VirtualMemoryBuffer b = r.allocate(1)) {
            assertNotEquals(0, b.address());
        }
        LiveObjects.assertBack(before, "after hints");
    }

    @Test
    void poolBeansAndNames() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).name("probe,name=x*").registerMBeans(true).build()) {
            javax.management.MBeanServer server = java.lang.management.ManagementFactory.getPlatformMBeanServer();
            javax.management.ObjectName on = p.objectName(PoolLifetime.LOCAL);
            assertTrue(server.isRegistered(on), on.toString());
            IllegalStateException dup = assertThrows(IllegalStateException.class, () -> VirtualMemoryPool.builder()
                    .resource(r).name("probe,name=x*").registerMBeans(true).build());
            assertNames(dup, "name");
            assertTrue(server.isRegistered(on), "a refused duplicate unregistered the first pool's bean");
            assertTrue(server.isRegistered(p.objectName(PoolLifetime.EXPORTED)));
            p.close();
            assertFalse(server.isRegistered(on));
        }
    }

    @Test
    void poolAllocationOnAnotherDevicesStream() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s1 = Stream.create(1);
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).build()) {
            VirtualMemoryBuffer b = p.allocate(1, s1);
            b.close(s1);
            VirtualMemoryBuffer c = p.allocate(1, s1);
            c.close();
            s1.synchronize();
        }
        LiveObjects.assertBack(before, "after cross-device pool streams");
    }
}
