package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.Test;

/** VirtualMemoryResource's (and its options') javadoc, read as a user would: the promises no other test checks. */
class VirtualMemoryResourceJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /** allocate: "{@code allocate(0)} returns an empty buffer with no driver call." */
    @Test
    void allocateZeroMakesNoDriverCall() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            DriverCounters c = Driver.get().counters();
            long before = c.totalCalls();
            try (VirtualMemoryBuffer empty = r.allocate(0)) {
                assertEquals(before, c.totalCalls(), "allocate(0) called the driver: " + c.calls());
                assertEquals(0, empty.size());
                assertEquals(0, empty.mappedSize());
                assertSame(r, empty.resource());
            }
        }
    }

    /** allocate: "@throws IllegalStateException when this resource is closed" (allocate(0) too). */
    @Test
    void allocateZeroOnAClosedResourceIsRefused() {
        VirtualMemoryResource r = VirtualMemoryResource.create(0);
        r.close();
        assertThrows(IllegalStateException.class, () -> r.allocate(0));
    }

    /**
     * Class: "Closing the resource only stops new allocations: buffers it made stay valid until
     * they are closed": export, lease, share and a ByteBuffer view of such a buffer still work.
     */
    @Test
    void buffersOfAClosedResourceStayFullyUsable() {
        VirtualMemoryResource r = VirtualMemoryResource.create(0);
        VirtualMemoryBuffer b = r.allocate(3);
        r.close();
        assertTrue(r.isClosed());
        try {
            b.copyFrom(0, new byte[] {1, 2, 3}, 0, 3);
            try (BufferDescriptor d = b.exportDescriptor()) {
                assertEquals(3, d.size());
            }
            try (BufferLease lease = b.lease("test")) {
                assertEquals(1, b.leaseCount());
            }
            AtomicInteger gone = new AtomicInteger();
            VirtualMemoryBuffer view = b.share(gone::incrementAndGet);
            byte[] got = new byte[3];
            view.copyTo(got);
            assertArrayEquals(new byte[] {1, 2, 3}, got);
            view.close();
            assertEquals(1, gone.get());
            if (r.isHostAccessible()) {
                ByteBuffer bb = b.asByteBuffer();
                assertEquals(3, bb.capacity());
            }
        } finally {
            b.close();
        }
    }

    /** importBuffer: "@throws IllegalStateException when this resource is not IPC-enabled". */
    @Test
    void importIntoANonIpcResourceIsRefused() {
        try (VirtualMemoryResource exporter = VirtualMemoryResource.create(0);
             VirtualMemoryResource none = VirtualMemoryResource.create(0,
                     VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build());
             VirtualMemoryBuffer b = exporter.allocate(1);
             BufferDescriptor d = b.exportDescriptor()) {
            assertFalse(none.isIpcEnabled());
            assertTrue(exporter.isIpcEnabled());
            assertNames(assertThrows(IllegalStateException.class, () -> none.importBuffer(d)), "POSIX_FD");
        }
    }

    /**
     * importBuffer: "@throws IllegalStateException when ... the descriptor or resource is closed";
     * importBuffer(d, whenUnmapped): "It never runs if this method throws".
     */
    @Test
    void importOfAClosedDescriptorOrIntoAClosedResourceIsRefused() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            BufferDescriptor closed = b.exportDescriptor();
            closed.close();
            AtomicInteger ran = new AtomicInteger();
            assertThrows(IllegalStateException.class, () -> r.importBuffer(closed));
            assertThrows(IllegalStateException.class, () -> r.importBuffer(closed, ran::incrementAndGet));
            VirtualMemoryResource closedResource = VirtualMemoryResource.create(0);
            closedResource.close();
            try (BufferDescriptor d = b.exportDescriptor()) {
                assertThrows(IllegalStateException.class, () -> closedResource.importBuffer(d));
                assertThrows(IllegalStateException.class, () -> closedResource.importBuffer(d, ran::incrementAndGet));
                assertFalse(d.isClosed(), "a refused import leaves the descriptor open");
            }
            assertEquals(0, ran.get(), "whenUnmapped ran although importBuffer threw");
        }
    }

    /** importBuffer: "@throws IllegalArgumentException when ... a size is not a positive multiple of the granularity". */
    @Test
    void importOfSizesOffTheGranularityIsRefused() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1);
             BufferDescriptor d = b.exportDescriptor()) {
            long g = r.granularity();
            int[] fds = d.fds();
            try (BufferDescriptor half = BufferDescriptor.fromFds(fds, new long[] {g / 2}, HandleType.POSIX_FD, 1)) {
                assertNames(assertThrows(IllegalArgumentException.class, () -> r.importBuffer(half)),
                        "sizes[0]", String.valueOf(g / 2), String.valueOf(g));
            }
        }
    }

    /** importBuffer(d, whenUnmapped): a null whenUnmapped is refused naming it (project rule). */
    @Test
    void importWithANullCallbackNamesIt() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1);
             BufferDescriptor d = b.exportDescriptor()) {
            assertNames(assertThrows(NullPointerException.class, () -> r.importBuffer(d, null)), "whenUnmapped");
            assertNames(assertThrows(NullPointerException.class, () -> r.importBuffer(null)), "descriptor");
        }
    }

    /** isHostAccessible: "True when the CPU can read and write its buffers directly (a host location)." */
    @Test
    void hostAccessibilityFollowsTheLocation() {
        try (VirtualMemoryResource device = VirtualMemoryResource.create(0);
             VirtualMemoryResource host = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                     .locationType(LocationType.HOST).handleType(HandleType.NONE).build())) {
            assertFalse(device.isHostAccessible());
            assertTrue(host.isHostAccessible());
            assertFalse(host.isIpcEnabled());
            assertTrue(host.isDeviceAccessible());
        }
    }

    /**
     * isClosed: "True once close() has closed this resource"; close: "Idempotent" and "Buffers
     * already made stay valid"; before close it is false.
     */
    @Test
    void isClosedBeforeAndAfter() {
        VirtualMemoryResource r = VirtualMemoryResource.create(0);
        assertFalse(r.isClosed());
        r.close();
        assertTrue(r.isClosed());
        r.close();
        assertTrue(r.isClosed());
    }

    /** modifyAllocation: "@throws IllegalStateException when {@code buffer} ... is closed", with a size that fits too. */
    @Test
    void aClosedBufferCannotBeAliased() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            b.close();
            assertNames(assertThrows(IllegalStateException.class, () -> r.modifyAllocation(b, 1)), "closed");
            assertNames(assertThrows(IllegalStateException.class, () -> r.modifyAllocation(b, 1, null)), "closed");
        }
    }

    /** Options table: locationId's default; options() returns what create was given. */
    @Test
    void optionsAreThoseGivenAndLocationIdDefaults() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.READ).build();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, o)) {
            assertEquals(o, r.options());
            assertEquals(0, r.device());
            assertSame(Driver.get(), r.driver());
        }
        assertEquals(0, VirtualMemoryResourceOptions.defaults().locationId());
        assertFalse(VirtualMemoryResourceOptions.defaults().gpuDirectRdma());
    }

    /** Options.Builder.peers(Set): a refused set leaves the builder as it was. */
    @Test
    void aRefusedPeerSetLeavesTheBuilderAsItWas() {
        VirtualMemoryResourceOptions.Builder b = VirtualMemoryResourceOptions.builder().peers(1);
        java.util.Set<Integer> withNull = new java.util.HashSet<>(java.util.Arrays.asList(2, null));
        assertThrows(IllegalArgumentException.class, () -> b.peers(withNull));
        assertEquals(java.util.Set.of(1), b.build().peers());
    }

    /** Options: "Peer device ordinals, ascending." */
    @Test
    void peersAreAscending() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.builder().peers(5, 1, 3).build();
        assertEquals(java.util.List.of(1, 3, 5), new java.util.ArrayList<>(o.peers()));
    }
    /**
     * modifyAllocation: options "may not change the handle type, device or location" (for
     * HOST_NUMA the node is the location): IllegalArgumentException naming locationId.
     */
    @Test
    void aGrowMayNotMoveHostNumaMemoryToAnotherNode() {
        org.junit.jupiter.api.Assumptions.assumeTrue(Driver.get().device(0).supportsHostNumaVirtualMemory());
        VirtualMemoryResourceOptions node0 = VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA)
                .locationId(0).build();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, node0); VirtualMemoryBuffer b = r.allocate(1)) {
            VirtualMemoryResourceOptions node1 = node0.toBuilder().locationId(1).build();
            assertNames(assertThrows(IllegalArgumentException.class, () -> r.modifyAllocation(b, 3 * r.granularity(), node1)),
                    "locationId", "1");
        }
    }

    /**
     * importBuffer(d, whenUnmapped): "A RuntimeException it throws is logged (logger org.cuvmm)
     * and swallowed" -- also one whose getMessage() (so toString()) throws: the close that drops
     * the last mapping neither throws nor leaves the buffer open.
     */
    @Test
    void aThrowingWhenUnmappedIsSwallowedEvenIfItCannotDescribeItself() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1);
             BufferDescriptor d = b.exportDescriptor()) {
            AtomicInteger ran = new AtomicInteger();
            VirtualMemoryBuffer imported = r.importBuffer(d, () -> {
                ran.incrementAndGet();
                throw new BufferLeaseJavadocContractTest.Undescribable();
            });
            assertDoesNotThrow(() -> imported.close());
            assertTrue(imported.isClosed());
            assertEquals(1, ran.get());
        }
    }

    /**
     * modifyAllocation: "options' addressAlignment applies to a move only (the new range is
     * reserved with it); an alias or a grow in place keeps the buffer's base ... so a larger
     * alignment asked here does not move it."
     */
    @Test
    void aGrowsAlignmentAppliesToAMoveOnly() {
        long align = 1L << 30;
        VirtualMemoryResourceOptions aligned = VirtualMemoryResourceOptions.builder().addressAlignment(align).build();
        long region = GrowTest.freeRegion(64 * TestSupport.MiB);
        try (VirtualMemoryResource probe = VirtualMemoryResource.create(0)) {
            long g = probe.granularity();
            long hint = region % align == 0 ? region + g : region; // a base the large alignment does not divide
            try (VirtualMemoryResource r = GrowTest.resourceAt(hint); VirtualMemoryBuffer a = r.allocate(g)) {
                assertEquals(hint, a.address(), "the hint was honoured (the region was free)");
                try (VirtualMemoryBuffer alias = r.modifyAllocation(a, g, aligned)) {
                    assertEquals(BufferOrigin.ALIAS, alias.origin());
                    assertEquals(hint, alias.address());
                }
                try (VirtualMemoryBuffer inPlace = r.modifyAllocation(a, 3 * g, aligned)) {
                    assertEquals(BufferOrigin.GROWN_IN_PLACE, inPlace.origin());
                    assertEquals(hint, inPlace.address());
                }
                // A decoy right after a: the grow must move, into a range aligned as asked.
                try (VirtualMemoryResource decoyResource = GrowTest.resourceAt(hint + g);
                     VirtualMemoryBuffer decoy = decoyResource.allocate(g)) {
                    assertEquals(hint + g, decoy.address(), "the decoy sits right after the buffer");
                    try (VirtualMemoryBuffer moved = r.modifyAllocation(a, 3 * g, aligned)) {
                        assertEquals(BufferOrigin.MOVED, moved.origin());
                        assertEquals(0, moved.address() % align, "moved to 0x" + Long.toHexString(moved.address()));
                    }
                }
            }
        }
    }
}
