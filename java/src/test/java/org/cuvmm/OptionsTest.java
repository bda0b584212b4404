package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;

import org.junit.jupiter.api.Test;

class OptionsTest {
    private static void assertRejected(VirtualMemoryResourceOptions.Builder builder, String... fragments) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, builder::build);
        for (String f : fragments) {
            assertTrue(e.getMessage().contains(f), () -> "message '" + e.getMessage() + "' lacks '" + f + "'");
        }
    }

    @Test
    void defaultsArePinnedDeviceMemoryExportableAsPosixFd() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.defaults();
        assertEquals(AllocationType.PINNED, o.allocationType());
        assertEquals(LocationType.DEVICE, o.locationType());
        assertEquals(HandleType.POSIX_FD, o.handleType());
        assertEquals(GranularityKind.RECOMMENDED, o.granularity());
        assertEquals(AccessMode.READ_WRITE, o.selfAccess());
        assertEquals(Set.of(), o.peers());
    }

    @Test
    void builderRoundTripsAndEquality() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.builder()
                .handleType(HandleType.NONE).granularity(GranularityKind.MINIMUM).addressAlignment(4 << 20)
                .addressHint(0x7f0000000000L).peers(3, 1).peerAccess(AccessMode.READ).build();
        assertEquals(Set.of(1, 3), o.peers());
        assertEquals(o, o.toBuilder().build());
        assertEquals(o.hashCode(), o.toBuilder().build().hashCode());
        assertThrows(UnsupportedOperationException.class, () -> o.peers().add(2));
    }

    @Test
    void theLocationIdCountsForEqualityOnlyWhereItIsUsed() {
        // Ignored for DEVICE (the resource's device) and HOST: options that differ only there are equal.
        VirtualMemoryResourceOptions device = VirtualMemoryResourceOptions.builder().locationId(7).build();
        assertEquals(VirtualMemoryResourceOptions.defaults(), device);
        assertEquals(VirtualMemoryResourceOptions.defaults().hashCode(), device.hashCode());
        assertEquals(7, device.locationId()); // kept as given
        VirtualMemoryResourceOptions.Builder host = VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST)
                .handleType(HandleType.NONE);
        assertEquals(host.locationId(0).build(), host.locationId(3).build());
        // The NUMA node of HOST_NUMA: different nodes, different options.
        VirtualMemoryResourceOptions.Builder numa = VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA)
                .handleType(HandleType.NONE);
        assertNotEquals(numa.locationId(0).build(), numa.locationId(1).build());
    }

    @Test
    void invalidCombinationsNameTheOption() {
        assertRejected(VirtualMemoryResourceOptions.builder().addressAlignment(3), "addressAlignment: 3", "power of two");
        assertRejected(VirtualMemoryResourceOptions.builder().addressAlignment(-8), "addressAlignment: -8");
        assertRejected(VirtualMemoryResourceOptions.builder().addressHint(-1), "addressHint");
        assertRejected(VirtualMemoryResourceOptions.builder().peers(-1), "peers");
        assertRejected(VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST), "handleType: POSIX_FD",
                "HOST_NUMA");
        assertRejected(VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA).handleType(HandleType.FABRIC),
                "handleType: FABRIC");
        assertRejected(VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA).locationId(-2),
                "locationId: -2");
        assertRejected(VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST).handleType(HandleType.NONE)
                .gpuDirectRdma(true), "gpuDirectRdma");
        assertRejected(VirtualMemoryResourceOptions.builder().allocationType(AllocationType.MANAGED), "handleType",
                "MANAGED");
        assertRejected(VirtualMemoryResourceOptions.builder().peers(1).peerAccess(AccessMode.NONE), "peerAccess: NONE");
        assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder().handleType(null));
        assertRejected(VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA_CURRENT),
                "locationType: HOST_NUMA_CURRENT", "cuMemCreate refuses");
    }

    @Test
    void anAddressHintOffTheGranularityIsRejectedByTheResource() {
        VirtualMemoryResourceOptions odd = VirtualMemoryResourceOptions.builder().addressHint(0x7f0000012345L).build();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0, odd));
        assertTrue(e.getMessage().startsWith("addressHint: 0x7f0000012345"), e.getMessage());
        assertTrue(e.getMessage().contains("multiple of"), e.getMessage());
    }

    @Test
    void hostLocationWithoutHandleTypeIsValid() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST)
                .handleType(HandleType.NONE).build();
        assertTrue(o.locationType().isHost());
    }

    @Test
    void resourceRejectsOptionsTheDeviceCannotServe() {
        Driver d = Driver.get();
        IllegalArgumentException bad = assertThrows(IllegalArgumentException.class,
                () -> VirtualMemoryResource.create(d.deviceCount()));
        assertTrue(bad.getMessage().startsWith("device: " + d.deviceCount()), bad.getMessage());
        IllegalArgumentException self = assertThrows(IllegalArgumentException.class,
                () -> VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().peers(0).build()));
        assertTrue(self.getMessage().contains("peers"), self.getMessage());
        if (!d.device(0).supportsGpuDirectRdma()) {
            IllegalArgumentException rdma = assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().gpuDirectRdma(true).build()));
            assertTrue(rdma.getMessage().startsWith("gpuDirectRdma: true"), rdma.getMessage());
        }
        if (!d.device(0).supportsFabricHandles()) {
            IllegalArgumentException fabric = assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().handleType(HandleType.FABRIC).build()));
            assertTrue(fabric.getMessage().startsWith("handleType: FABRIC"), fabric.getMessage());
        }
    }

    @Test
    void granularityIsAPowerOfTwoAndMinimumNotAboveRecommended() {
        try (VirtualMemoryResource rec = VirtualMemoryResource.create(0);
             VirtualMemoryResource min = VirtualMemoryResource.create(0,
                     VirtualMemoryResourceOptions.builder().granularity(GranularityKind.MINIMUM).build())) {
            long g = rec.granularity();
            assertTrue(g > 0 && (g & (g - 1)) == 0, "granularity " + g);
            assertTrue(min.granularity() <= g);
            assertTrue(rec.isIpcEnabled());
            assertTrue(rec.isDeviceAccessible());
        }
    }
}
