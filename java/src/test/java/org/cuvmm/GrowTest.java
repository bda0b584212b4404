package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/**
 * modifyAllocation's three outcomes. In-place growth is forced by placing the buffer at an
 * address hint inside a region known to be free (a probe reservation, released); a move is
 * forced by a decoy buffer placed right after the buffer.
 */
class GrowTest {
    /** A free, granularity-aligned address with at least {@code bytes} free after it. */
    static long freeRegion(long bytes) {
        try (VirtualMemoryResource probe = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = probe.allocate(bytes)) {
            return b.address();
        }
    }

    static VirtualMemoryResource resourceAt(long hint) {
        return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().addressHint(hint).build());
    }

    private static void assertContent(VirtualMemoryBuffer b, long offset, byte[] expected) {
        byte[] back = new byte[expected.length];
        b.copyTo(offset, back, 0, back.length);
        assertArrayEquals(expected, back, "content at offset " + offset + " of " + b);
    }

    @Test
    void notLargerThanMappedIsAnAliasWithoutDriverCalls() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            byte[] data = pattern(1024, 1);
            b.copyFrom(0, data, 0, data.length);
            long calls = TestSupport.counters().totalCalls();
            try (VirtualMemoryBuffer same = r.modifyAllocation(b, 2 * MiB); VirtualMemoryBuffer smaller = r.modifyAllocation(b, 10)) {
                assertEquals(calls, TestSupport.counters().totalCalls(), "an alias makes no driver call");
                assertEquals(BufferOrigin.ALIAS, same.origin());
                assertEquals(2 * MiB, same.size());
                assertEquals(10, smaller.size());
                assertEquals(b.address(), same.address());
                assertContent(same, 0, data);
            }
            assertContent(b, 0, data);
        }
    }

    @Test
    void growsInPlaceWhenTheNextRangeIsFree() {
        long hint = freeRegion(64 * MiB);
        try (VirtualMemoryResource r = resourceAt(hint); VirtualMemoryBuffer a = r.allocate(3 * MiB)) {
            assertEquals(hint, a.address(), "the hint was honoured (the region was free)");
            byte[] data = pattern((int) (3 * MiB), 2);
            a.copyFrom(data);
            long reserves = TestSupport.counters().calls("cuMemAddressReserve");
            try (VirtualMemoryBuffer b = r.modifyAllocation(a, 9 * MiB)) {
                assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin());
                assertEquals(a.address(), b.address());
                assertEquals(2, b.chunkCount());
                assertEquals(4 * MiB, b.chunkSize(0));
                assertEquals(6 * MiB, b.chunkSize(1));
                assertEquals(1, TestSupport.counters().calls("cuMemAddressReserve") - reserves);
                assertContent(b, 0, data);
                byte[] tail = pattern((int) (6 * MiB), 3);
                b.copyFrom(3 * MiB, tail, 0, tail.length);
                assertContent(b, 3 * MiB, tail);
                assertContent(a, 0, data);
            }
        }
    }

    @Test
    void movesWithoutCopyingWhenTheNextRangeIsTaken() {
        long hint = freeRegion(64 * MiB);
        try (VirtualMemoryResource r = resourceAt(hint); VirtualMemoryBuffer a = r.allocate(2 * MiB);
             VirtualMemoryResource decoyResource = resourceAt(hint + 2 * MiB);
             VirtualMemoryBuffer decoy = decoyResource.allocate(2 * MiB)) {
            assertEquals(hint + 2 * MiB, decoy.address(), "decoy sits right after the buffer");
            byte[] data = pattern((int) (2 * MiB), 4);
            a.copyFrom(data);
            DriverCounters c = TestSupport.counters();
            long copies = c.calls("cuMemcpyDtoDAsync"), creates = c.calls("cuMemCreate"), maps = c.calls("cuMemMap");
            try (VirtualMemoryBuffer b = r.modifyAllocation(a, 5 * MiB)) {
                assertEquals(BufferOrigin.MOVED, b.origin());
                assertNotEquals(a.address(), b.address());
                assertEquals(2, b.chunkCount());
                assertEquals(0, c.calls("cuMemcpyDtoDAsync") - copies, "a move copies no byte");
                assertEquals(1, c.calls("cuMemCreate") - creates, "only the new chunk is created");
                assertEquals(2, c.calls("cuMemMap") - maps, "old chunk re-mapped + new chunk mapped");
                assertContent(b, 0, data);
                // Same physical memory: a write through the new address shows at the old one.
                b.fill(0, 16, (byte) 0x11);
                byte[] viaOld = new byte[16];
                a.copyTo(0, viaOld, 0, 16);
                assertEquals(0x11, viaOld[15]);
            }
        }
    }

    @Test
    void growOfAnEmptyBufferAllocates() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer empty = r.allocate(0);
             VirtualMemoryBuffer grown = r.modifyAllocation(empty, 100)) {
            assertEquals(BufferOrigin.ALLOCATED, grown.origin());
            assertEquals(100, grown.size());
            assertEquals(1, grown.chunkCount());
        }
    }

    @Test
    void closeOrderFreesEachChunkWhenItsLastHolderGoes() {
        Map<String, Long> base = LiveObjects.now();
        long hint = freeRegion(64 * MiB);
        VirtualMemoryResource r = resourceAt(hint);
        VirtualMemoryBuffer a = r.allocate(2 * MiB);                     // chunk 1 at hint
        VirtualMemoryBuffer b = r.modifyAllocation(a, 4 * MiB);          // + chunk 2, in place
        assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin());
        VirtualMemoryResource decoyResource = resourceAt(hint + 4 * MiB);
        VirtualMemoryBuffer decoy = decoyResource.allocate(2 * MiB);
        VirtualMemoryBuffer c = r.modifyAllocation(b, 6 * MiB);          // chunks 1, 2 re-mapped + chunk 3
        assertEquals(BufferOrigin.MOVED, c.origin());
        decoy.close();
        decoyResource.close();
        DriverCounters k = TestSupport.counters();
        // allocations: 1, 2, 3; mappings: a{1} b{2} (b shares a's) c{1',2',3}; reservations: r1, r2, r3
        assertEquals(base.get("allocations") + 3, k.liveAllocations());
        assertEquals(base.get("mappings") + 5, k.liveMappings());
        assertEquals(base.get("reservations") + 3, k.liveReservations());
        a.close(); // chunk 1's first mapping is still held by b
        assertEquals(base.get("mappings") + 5, k.liveMappings());
        b.close(); // first mappings of chunks 1 and 2 go, and with them r1 and r2
        assertEquals(base.get("mappings") + 3, k.liveMappings());
        assertEquals(base.get("reservations") + 1, k.liveReservations());
        assertEquals(base.get("allocations") + 3, k.liveAllocations(), "c still maps all three chunks");
        if (TestSupport.onHostDriver()) {
            assertEquals(base.get("host mappings") + 3, k.hostMappings());
            assertEquals(base.get("host allocations") + 3, k.hostAllocations());
        }
        c.close();
        r.close();
        LiveObjects.assertBack(base, "after the last holder closed");
    }

    @Test
    void growMayNotChangeTheHandleTypeOrUseAnotherResourcesBuffer() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryResource other = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> r.modifyAllocation(b, 8 * MiB,
                    VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build()));
            assertTrue(e.getMessage().startsWith("options.handleType: NONE"), e.getMessage());
            IllegalArgumentException foreign = assertThrows(IllegalArgumentException.class, () -> other.modifyAllocation(b, 8 * MiB));
            assertTrue(foreign.getMessage().contains("another resource") || foreign.getMessage().contains("this resource"),
                    foreign.getMessage());
            assertThrows(IllegalArgumentException.class, () -> r.modifyAllocation(b, -1));
        }
    }

    @Test
    void growWithDifferentAccessOptionsAppliesThemToTheNewMappings() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             VirtualMemoryBuffer g = r.modifyAllocation(b, 5 * MiB,
                     VirtualMemoryResourceOptions.builder().granularity(GranularityKind.MINIMUM).build())) {
            assertTrue(g.origin() == BufferOrigin.GROWN_IN_PLACE || g.origin() == BufferOrigin.MOVED);
            g.fill((byte) 3);
        }
    }
}
