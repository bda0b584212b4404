package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.util.Map;
import java.util.Set;

import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: VirtualMemoryResource, VirtualMemoryResourceOptions, Driver, DriverCounters. */
class ResourceContractTest {
    @Test
    void allocateSizesAroundTheGranularity() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long g = r.granularity();
            for (long size : new long[] {1, g - 1, g, g + 1, 2 * g - 1}) {
                try (VirtualMemoryBuffer b = r.allocate(size)) {
                    assertEquals(size, b.size());
                    assertEquals((size + g - 1) / g * g, b.mappedSize(), "size " + size);
                    assertEquals(0, b.address() % g, "address aligned to granularity");
                    assertEquals(BufferOrigin.ALLOCATED, b.origin());
                    assertSame(r, b.resource());
                    assertFalse(b.isImported());
                }
            }
            assertNames(assertThrows(IllegalArgumentException.class, () -> r.allocate(-1)), "size", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> r.allocate(Long.MIN_VALUE)), "size");
            CudaException e = assertThrows(CudaException.class, () -> r.allocate(Long.MAX_VALUE));
            assertNames(e, String.valueOf(Long.MAX_VALUE));
            CudaException e2 = assertThrows(CudaException.class, () -> r.allocate(Long.MAX_VALUE - g + 2));
            assertNotNull(e2.call());
        }
        LiveObjects.assertBack(before, "after absurd allocations");
    }

    @Test
    void modifyAllocationContract() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryResource other = VirtualMemoryResource.create(0)) {
            long g = r.granularity();
            VirtualMemoryBuffer b = r.allocate(g);
            assertNames(assertThrows(IllegalArgumentException.class, () -> r.modifyAllocation(b, -1)), "newSize", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> other.modifyAllocation(b, 2 * g)), "buffer");
            VirtualMemoryResourceOptions none = VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build();
            assertNames(assertThrows(IllegalArgumentException.class, () -> r.modifyAllocation(b, 2 * g, none)), "handleType");
            VirtualMemoryResourceOptions numa = VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA).build();
            assertNames(assertThrows(IllegalArgumentException.class, () -> r.modifyAllocation(b, 2 * g, numa)), "locationType");
            VirtualMemoryBuffer zero = r.modifyAllocation(b, 0);
            assertEquals(0, zero.size());
            assertEquals(BufferOrigin.ALIAS, zero.origin());
            assertNotSame(b, zero);
            VirtualMemoryBuffer same = r.modifyAllocation(b, g);
            assertNotSame(b, same, "returns a new buffer");
            assertEquals(BufferOrigin.ALIAS, same.origin());
            VirtualMemoryBuffer big = r.modifyAllocation(b, 3 * g + 1);
            assertTrue(big.origin() == BufferOrigin.GROWN_IN_PLACE || big.origin() == BufferOrigin.MOVED, big.origin().toString());
            assertEquals(4 * g, big.mappedSize());
            assertThrows(CudaException.class, () -> r.modifyAllocation(b, Long.MAX_VALUE));
            // grow with peers gives the new chunk peer access only
            VirtualMemoryResourceOptions peer = VirtualMemoryResourceOptions.builder().peers(1).build();
            VirtualMemoryBuffer withPeer = r.modifyAllocation(b, 2 * g, peer);
            assertEquals(AccessMode.NONE, withPeer.access(1));
            assertEquals(AccessMode.READ_WRITE, withPeer.access(1, withPeer.chunkCount() - 1));
            r.close();
            assertNames(assertThrows(IllegalStateException.class, () -> r.modifyAllocation(b, 5 * g)), "closed");
            assertThrows(IllegalStateException.class, () -> r.allocate(1));
            // buffers stay valid after the resource closed
            b.fill((byte) 1);
            for (VirtualMemoryBuffer x : new VirtualMemoryBuffer[] {b, zero, same, big, withPeer}) x.close();
        }
        LiveObjects.assertBack(before, "after modifyAllocation probes");
    }

    @Test
    void resourceCloseIsIdempotentAndBuffersOutliveIt() {
        VirtualMemoryResource r = VirtualMemoryResource.create(0);
        VirtualMemoryBuffer b = r.allocate(MiB);
        r.close();
        r.close();
        assertTrue(r.isClosed());
        b.fill((byte) 2);
        byte[] x = new byte[1];
        b.copyTo(x);
        assertEquals(2, x[0]);
        // alias of a buffer of a closed resource: refused (resource closed)
        assertThrows(IllegalStateException.class, () -> r.modifyAllocation(b, 1));
        b.close();
        // getters work after close
        assertEquals(0, r.device());
        assertNotNull(r.options());
        assertTrue(r.granularity() > 0);
    }

    @Test
    void createRejectsBadInputWithNamedMessages() {
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(-1)), "device", "-1");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(64)), "device", "64");
        assertNames(assertThrows(NullPointerException.class, () -> VirtualMemoryResource.create(0, null)), "options");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().peers(0).build())), "peers");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().peers(7).build())), "peers");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().addressHint(4097).build())), "addressHint");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().gpuDirectRdma(true).build())), "gpuDirectRdma");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().handleType(HandleType.FABRIC).build())), "FABRIC");
    }

    @Test
    void builderValidationNamesOptionAndValue() {
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().addressHint(-1).build()), "addressHint");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().addressAlignment(3).build()), "addressAlignment", "3");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().addressAlignment(Long.MIN_VALUE).build()), "addressAlignment");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().peers(-1).build()), "peers", "-1");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().peers(1).peerAccess(AccessMode.NONE).build()), "peerAccess");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA).locationId(-2).build()), "locationId", "-2");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST).build()), "handleType");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().allocationType(null)), "allocationType");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().peers((int[]) null)), "peers");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().peers((Set<Integer>) null)), "peers");
        java.util.Set<Integer> withNull = new java.util.HashSet<>();
        withNull.add(null);
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().peers(withNull)), "peers");
    }


    @Test
    void optionsAreImmutableAndRoundTrip() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.builder().peers(1, 1).addressAlignment(1L << 30)
                .selfAccess(AccessMode.READ).build();
        assertEquals(Set.of(1), o.peers());
        assertThrows(UnsupportedOperationException.class, () -> o.peers().add(2));
        assertEquals(o, o.toBuilder().build());
        assertEquals(o.hashCode(), o.toBuilder().build().hashCode());
        VirtualMemoryResourceOptions d = VirtualMemoryResourceOptions.defaults();
        assertEquals(AllocationType.PINNED, d.allocationType());
        assertEquals(LocationType.DEVICE, d.locationType());
        assertEquals(HandleType.POSIX_FD, d.handleType());
        assertEquals(GranularityKind.RECOMMENDED, d.granularity());
        assertEquals(0, d.addressHint());
        assertEquals(0, d.addressAlignment());
        assertEquals(AccessMode.READ_WRITE, d.selfAccess());
        assertEquals(AccessMode.READ_WRITE, d.peerAccess());
        assertTrue(d.peers().isEmpty());
        // builder is reusable: build twice gives equal results
        VirtualMemoryResourceOptions.Builder b = VirtualMemoryResourceOptions.builder().peers(1);
        VirtualMemoryResourceOptions first = b.build();
        b.peers(0);
        assertEquals(Set.of(1), first.peers(), "options are immutable after build");
    }

    @Test
    void selfAccessNoneMakesDeviceInaccessible() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .selfAccess(AccessMode.NONE).build())) {
            assertFalse(r.isDeviceAccessible());
            try (VirtualMemoryBuffer b = r.allocate(1)) {
                assertEquals(AccessMode.NONE, b.access(0));
            }
        }
    }

    @Test
    void addressAlignmentIsHonoured() {
        long align = 1L << 30;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .addressAlignment(align).build()); VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(0, b.address() % align, "address 0x" + Long.toHexString(b.address()));
        }
    }

    @Test
    void driverAndCounters() {
        Driver d = Driver.get();
        assertSame(d, Driver.get());
        assertEquals(2, d.deviceCount());
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.device(2)), "device", "2");
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.canAccessPeer(0, 5)), "device", "5");
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.canAccessPeer(-1, 0)), "device", "-1");
        assertFalse(d.canAccessPeer(0, 0), "false for a device and itself");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Driver.select("gpu")), "gpu");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Driver.select(null)), "null");
        assertThrows(UnsupportedOperationException.class, () -> d.devices().clear());
        DriverCounters c = d.counters();
        assertNames(assertThrows(IllegalArgumentException.class, () -> c.calls("cuNope")), "entryPoint", "cuNope");
        assertNames(assertThrows(IllegalArgumentException.class, () -> c.calls(null)), "entryPoint");
        c.resetCalls();
        assertEquals(0, c.totalCalls());
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(1, c.calls("cuMemCreate"));
            assertEquals(1, c.calls("cuMemAddressReserve"));
            assertEquals(1, c.calls("cuMemMap"));
            assertEquals(c.calls().values().stream().mapToLong(Long::longValue).sum(), c.totalCalls());
        }
        assertNames(assertThrows(NullPointerException.class, () -> d.addAllocationReleaseListener(null)), "listener");
        assertTrue(d.versionString().matches("\\d+\\.\\d+"), d.versionString());
    }

    @Test
    void allocateCountsOnHostDriverAndReleasesExactlyOnce() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(TestSupport.onHostDriver(), "host driver only (documented so)");
        Map<String, Long> before = LiveObjects.now();
        Map<String, String> fds = TestSupport.fdTargets();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(3 * r.granularity());
            DriverCounters c = Driver.get().counters();
            assertEquals(before.get("host allocations") + 1, c.hostAllocations());
            assertEquals(before.get("host memfds") + 1, c.hostMemfds());
            b.close();
            b.close();
        }
        LiveObjects.assertBack(before, "after one allocate/close");
        TestSupport.assertNoNewFds(fds, "after allocate/close");
    }
}
