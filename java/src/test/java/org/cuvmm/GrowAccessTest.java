package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A grow with other access options gives the same access whatever its outcome: the chunks the
 * buffer had keep the access they were mapped with, and only the new chunk gets the grow's
 * options. Before issue 8 a move re-mapped the old chunks with the grow's options while a grow
 * in place kept them, so device 1's access depended on free address space. Each case runs once
 * with the grow forced in place and once forced to move (GrowTest's hint and decoy).
 * Needs two devices (the build runs the host driver with {@code cuvmm.host.devices=2}).
 */
class GrowAccessTest {
    enum Outcome { IN_PLACE, MOVED }

    private static final VirtualMemoryResourceOptions PRIVATE = VirtualMemoryResourceOptions.defaults();
    private static final VirtualMemoryResourceOptions PEER_READS = VirtualMemoryResourceOptions.builder()
            .peers(1).peerAccess(AccessMode.READ).build();
    private static final VirtualMemoryResourceOptions PEER_WRITES = VirtualMemoryResourceOptions.builder()
            .peers(1).peerAccess(AccessMode.READ_WRITE).build();

    /** Why the refused copies run on the host driver only. */
    private static final String GPU_FAULT = "a copy by device 1 from memory it has no access to is a device fault on a "
            + "GPU (CUDA_ERROR_ILLEGAL_ADDRESS, sticky: it poisons the context for the rest of the run); only the host "
            + "driver refuses it cleanly";

    /** Everything a case opened, closed in reverse order. */
    private static final class Opened implements AutoCloseable {
        final List<AutoCloseable> items = new ArrayList<>();

        <T extends AutoCloseable> T add(T item) {
            items.add(item);
            return item;
        }

        @Override
        public void close() throws Exception {
            for (int i = items.size() - 1; i >= 0; i--) items.get(i).close();
        }
    }

    private static void assumeTwoDevices() {
        assumeTrue(Driver.get().deviceCount() >= 2,
                "needs two devices; this " + Driver.get().kind() + " driver has " + Driver.get().deviceCount());
    }

    /**
     * A 2 MiB buffer of a device-0 resource with {@code base} options, grown to 4 MiB with
     * {@code grow} options, the outcome forced to {@code outcome}.
     */
    private static VirtualMemoryBuffer grown(Opened o, Outcome outcome, VirtualMemoryResourceOptions base,
                                             VirtualMemoryResourceOptions grow) {
        long hint = GrowTest.freeRegion(64 * MiB);
        VirtualMemoryResource r = o.add(VirtualMemoryResource.create(0, base.toBuilder().addressHint(hint).build()));
        VirtualMemoryBuffer a = o.add(r.allocate(2 * MiB));
        assertEquals(hint, a.address(), "the hint was honoured (the region was free)");
        if (outcome == Outcome.MOVED) {
            VirtualMemoryResource decoyResource = o.add(GrowTest.resourceAt(hint + 2 * MiB));
            VirtualMemoryBuffer decoy = o.add(decoyResource.allocate(2 * MiB));
            assertEquals(hint + 2 * MiB, decoy.address(), "the decoy sits right after the buffer");
        }
        VirtualMemoryBuffer g = o.add(r.modifyAllocation(a, 4 * MiB, grow));
        assertEquals(outcome == Outcome.MOVED ? BufferOrigin.MOVED : BufferOrigin.GROWN_IN_PLACE, g.origin());
        assertEquals(2, g.chunkCount());
        return g;
    }

    @ParameterizedTest
    @EnumSource(Outcome.class)
    void growingWithPeerAccessOpensOnlyTheNewChunkToThePeer(Outcome outcome) throws Exception {
        assumeTwoDevices();
        try (Opened o = new Opened()) {
            VirtualMemoryBuffer g = grown(o, outcome, PRIVATE, PEER_READS);
            assertEquals(AccessMode.NONE, g.access(1, 0), "the old chunk stays closed to device 1 (" + outcome + ")");
            assertEquals(AccessMode.READ, g.access(1, 1), "the new chunk has the grow's peer access");
            assertEquals(AccessMode.NONE, g.access(1), "device 1 cannot read the whole buffer");
            assertEquals(AccessMode.READ_WRITE, g.access(0, 0));
            assertEquals(AccessMode.READ_WRITE, g.access(0, 1));
            assertEquals(AccessMode.READ_WRITE, g.access(0));

            // The driver enforces it: device 1 reads the new chunk, not the old one.
            VirtualMemoryResource onOne = o.add(VirtualMemoryResource.create(1));
            VirtualMemoryBuffer t = o.add(onOne.allocate(MiB));
            t.copyFrom(0, g, 2 * MiB, 4096);
            assumeTrue(TestSupport.onHostDriver(), GPU_FAULT);
            CudaException denied = assertThrows(CudaException.class, () -> t.copyFrom(0, g, 0, 4096));
            assertEquals("CUDA_ERROR_INVALID_VALUE", denied.resultName());
        }
    }

    @ParameterizedTest
    @EnumSource(Outcome.class)
    void growingWithoutPeersKeepsThePeerAccessOfTheOldChunks(Outcome outcome) throws Exception {
        assumeTwoDevices();
        try (Opened o = new Opened()) {
            VirtualMemoryBuffer g = grown(o, outcome, PEER_WRITES, PRIVATE);
            assertEquals(AccessMode.READ_WRITE, g.access(1, 0), "the old chunk keeps device 1's access (" + outcome + ")");
            assertEquals(AccessMode.NONE, g.access(1, 1), "the new chunk has the grow's (no peers)");
            assertEquals(AccessMode.NONE, g.access(1));

            // The driver agrees: device 1 still reads the old chunk through the grown buffer
            // (a buffer-to-buffer copy runs in the destination's device context).
            byte[] data = pattern(4096, 31);
            g.copyFrom(data);
            VirtualMemoryResource onOne = o.add(VirtualMemoryResource.create(1));
            VirtualMemoryBuffer t = o.add(onOne.allocate(MiB));
            t.copyFrom(0, g, 0, data.length);
            byte[] viaOne = new byte[data.length];
            t.copyTo(0, viaOne, 0, viaOne.length);
            assertArrayEquals(data, viaOne);
            assumeTrue(TestSupport.onHostDriver(), GPU_FAULT);
            assertThrows(CudaException.class, () -> t.copyFrom(0, g, 2 * MiB, 4096), "the new chunk is closed to device 1");
        }
    }

    /**
     * An alias made with other options keeps the access of its chunks, and so does a grow of
     * the alias: the alias carries the PRIVATE options, but its chunk was mapped with device 1
     * reading it, and a move must re-map it with that access (its mapping's), not with the
     * options of the range it belongs to. (An alias alone reuses the mappings, so only the
     * grow of it can tell the two apart.)
     */
    @ParameterizedTest
    @EnumSource(Outcome.class)
    void aGrownAliasKeepsTheAccessOfItsChunks(Outcome outcome) throws Exception {
        assumeTwoDevices();
        try (Opened o = new Opened()) {
            long hint = GrowTest.freeRegion(64 * MiB);
            VirtualMemoryResource r = o.add(VirtualMemoryResource.create(0, PEER_READS.toBuilder().addressHint(hint).build()));
            VirtualMemoryBuffer a = o.add(r.allocate(2 * MiB));
            assertEquals(hint, a.address(), "the hint was honoured (the region was free)");
            VirtualMemoryBuffer alias = o.add(r.modifyAllocation(a, MiB, PRIVATE));
            assertEquals(BufferOrigin.ALIAS, alias.origin());
            assertEquals(AccessMode.READ, alias.access(1), "the alias reuses the chunk, mapped with device 1 reading");
            if (outcome == Outcome.MOVED) {
                VirtualMemoryBuffer decoy = o.add(o.add(GrowTest.resourceAt(hint + 2 * MiB)).allocate(2 * MiB));
                assertEquals(hint + 2 * MiB, decoy.address(), "the decoy sits right after the buffer");
            }
            VirtualMemoryBuffer g = o.add(r.modifyAllocation(alias, 4 * MiB, PRIVATE));
            assertEquals(outcome == Outcome.MOVED ? BufferOrigin.MOVED : BufferOrigin.GROWN_IN_PLACE, g.origin());
            assertEquals(AccessMode.READ, g.access(1, 0), "the alias's chunk keeps device 1's access (" + outcome + ")");
            assertEquals(AccessMode.NONE, g.access(1, 1), "the new chunk has the grow's options (no peers)");
            assertEquals(AccessMode.READ, a.access(1, 0), "the original still has its access");
        }
    }

    @Test
    void accessChecksItsArguments() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             VirtualMemoryBuffer empty = r.allocate(0)) {
            int devices = Driver.get().deviceCount();
            IllegalArgumentException bad = assertThrows(IllegalArgumentException.class, () -> b.access(devices));
            assertTrue(bad.getMessage().startsWith("device: " + devices + " (expected: 0 to " + (devices - 1)), bad.getMessage());
            assertThrows(IllegalArgumentException.class, () -> b.access(-1, 0));
            IndexOutOfBoundsException chunk = assertThrows(IndexOutOfBoundsException.class, () -> b.access(0, 1));
            assertTrue(chunk.getMessage().startsWith("chunk: 1 (expected: 0 to 0"), chunk.getMessage());
            assertEquals(AccessMode.NONE, empty.access(0), "an empty buffer has no memory to access");
            b.close();
            assertThrows(IllegalStateException.class, () -> b.access(0));
            // Closed comes first: a closed buffer says so whatever the device.
            assertThrows(IllegalStateException.class, () -> b.access(devices));
            assertThrows(IllegalStateException.class, () -> b.access(-1, 0));
        }
    }
}
