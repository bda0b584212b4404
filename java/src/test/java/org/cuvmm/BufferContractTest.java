package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.util.Map;

import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: the javadoc of VirtualMemoryBuffer, method by method. */
class BufferContractTest {
    static VirtualMemoryResource hostResource() {
        return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .locationType(LocationType.HOST).handleType(HandleType.NONE).build());
    }

    static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    @Test
    void windowBoundariesAndOverflow() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            long g = r.granularity();
            assertEquals(MiB, b.size());
            assertEquals(g, b.mappedSize());
            // offset + length overflow
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.fill(Long.MAX_VALUE, Long.MAX_VALUE, (byte) 0)),
                    String.valueOf(Long.MAX_VALUE));
            assertThrows(IndexOutOfBoundsException.class, () -> b.fill(1, Long.MAX_VALUE, (byte) 0));
            assertThrows(IndexOutOfBoundsException.class, () -> b.fill(-1, 1, (byte) 0));
            assertThrows(IndexOutOfBoundsException.class, () -> b.fill(0, -1, (byte) 0));
            assertThrows(IndexOutOfBoundsException.class, () -> b.fill(MiB, 1, (byte) 0));
            // writes past size() but within the mapping are refused: size is the bound
            assertThrows(IndexOutOfBoundsException.class, () -> b.fill(MiB, g - MiB, (byte) 0));
            b.fill(MiB, 0, (byte) 0); // empty window at the end is fine
            b.fill(MiB - 1, 1, (byte) 5);
            byte[] one = new byte[1];
            b.copyTo(MiB - 1, one, 0, 1);
            assertEquals(5, one[0]);
            // array windows
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(0, new byte[4], 2, 3)), "src");
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.copyTo(0, new byte[4], -1, 1)), "dst");
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(0, new byte[4], Integer.MAX_VALUE, Integer.MAX_VALUE));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(new byte[(int) MiB + 1]));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyTo(new byte[(int) MiB + 1]));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(Long.MAX_VALUE, ByteBuffer.allocate(1)));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyTo(Long.MIN_VALUE, ByteBuffer.allocate(1)));
            // buffer-to-buffer mismatched sizes
            try (VirtualMemoryBuffer small = r.allocate(4096)) {
                assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(0, small, 0, 4097)), "src");
                assertNames(assertThrows(IndexOutOfBoundsException.class, () -> small.copyFrom(0, b, 0, 4097)), "copyFrom");
                assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(0, small, Long.MAX_VALUE, 2));
                small.copyFrom(0, b, MiB - 4096, 4096);
            }
        }
    }

    @Test
    void nullArgumentsAreNamed() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            assertNames(assertThrows(NullPointerException.class, () -> b.copyFrom((byte[]) null)), "src");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyTo((byte[]) null)), "dst");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyFrom(0, (ByteBuffer) null)), "src");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyTo(0, (ByteBuffer) null)), "dst");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyFrom(0, (VirtualMemoryBuffer) null, 0, 0)), "src");
            assertNames(assertThrows(NullPointerException.class, () -> b.share(null)), "whenGone");
            assertNames(assertThrows(NullPointerException.class, () -> b.lease(null)), "holder");
            assertNames(assertThrows(NullPointerException.class, () -> b.leaseDescribedBy(null)), "holder");
            assertNames(assertThrows(NullPointerException.class, () -> b.withAddress((java.util.function.LongConsumer) null)), "action");
            assertNames(assertThrows(NullPointerException.class, () -> b.exportChunks((int[]) null)), "chunkIndices");
            assertNames(assertThrows(NullPointerException.class, () -> b.close(null)), "stream");
            assertNames(assertThrows(NullPointerException.class, () -> b.recordUse(null)), "stream");
            assertNames(assertThrows(NullPointerException.class, () -> r.modifyAllocation(null, 1)), "buffer");
            assertNames(assertThrows(NullPointerException.class, () -> r.importBuffer(null)), "descriptor");
        }
    }

    @Test
    void everyUseAfterCloseThrowsIllegalState() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0);
             PinnedHostBuffer p = PinnedHostBuffer.allocate(4096); VirtualMemoryBuffer other = r.allocate(4096)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            b.close();
            b.close();
            b.close(s); // idempotent, also the stream form
            assertTrue(b.isClosed());
            assertTrue(b.toString().contains("closed"));
            org.junit.jupiter.api.function.Executable[] uses = {
                b::address, b::mappedSize, b::chunkCount, b::exportedChunkCount, () -> b.chunkSize(0),
                () -> b.access(0), () -> b.access(0, 0), b::isImported, () -> b.copyFrom(new byte[1]),
                () -> b.copyTo(new byte[1]), () -> b.copyFrom(0, ByteBuffer.allocate(1)),
                () -> b.copyFrom(0, ByteBuffer.allocateDirect(1)), () -> b.copyTo(0, ByteBuffer.allocateDirect(1)),
                () -> b.copyTo(0, ByteBuffer.allocate(1)), () -> b.copyFrom(0, other, 0, 1), () -> other.copyFrom(0, b, 0, 1),
                () -> b.fill((byte) 1), () -> b.fill(0, 0, (byte) 1),
                () -> b.copyFromAsync(0, p, 0, 1, s), () -> b.copyToAsync(0, p, 0, 1, s),
                () -> b.copyFromAsync(0, other, 0, 1, s), () -> other.copyFromAsync(0, b, 0, 1, s),
                () -> b.copyFromAsync(0, new byte[1], 0, 1, s), () -> b.fillAsync(0, 1, (byte) 0, s),
                () -> b.recordUse(s), () -> b.withAddress(s, a -> { }), () -> b.withAddress(a -> { }),
                b::exportDescriptor, () -> b.exportChunks(0), () -> b.exportChunks(), b::allocationIds,
                () -> b.share(() -> { }), () -> b.lease("x"), () -> b.leaseDescribedBy(() -> "x"),
                () -> r.modifyAllocation(b, 2 * MiB), () -> r.modifyAllocation(b, 0),
            };
            for (int i = 0; i < uses.length; i++) {
                final int idx = i;
                Throwable t = assertThrows(Throwable.class, uses[i], "use #" + idx);
                assertTrue(t instanceof IllegalStateException, "use #" + idx + " threw " + t);
                assertNames(t, "closed");
            }
            b.closeWhenUnused(); // never throws
            assertFalse(b.isClosePending());
        }
    }

    /** The empty buffer: allocate(0) makes no driver call and still obeys the lifecycle. */
    @Test
    void emptyBufferContract() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            Driver.get().counters().resetCalls();
            VirtualMemoryBuffer e = r.allocate(0);
            long calls = Driver.get().counters().totalCalls();
            Map<String, Long> m = Driver.get().counters().calls();
            assertEquals(0, calls, "allocate(0) made driver calls: " + m);
            assertEquals(0, e.size());
            assertEquals(0, e.address());
            assertEquals(0, e.mappedSize());
            assertEquals(0, e.chunkCount());
            assertEquals(0, e.exportedChunkCount());
            assertEquals(0, e.allocationIds().length);
            assertEquals(AccessMode.NONE, e.access(0));
            assertThrows(IndexOutOfBoundsException.class, () -> e.chunkSize(0));
            assertThrows(IndexOutOfBoundsException.class, () -> e.access(0, 0));
            e.copyFrom(new byte[0]);
            e.copyTo(new byte[0]);
            e.fill((byte) 1);
            assertThrows(IndexOutOfBoundsException.class, () -> e.fill(0, 1, (byte) 1));
            try (BufferDescriptor d = e.exportDescriptor()) {
                assertEquals(0, d.chunkCount());
                assertEquals(0, d.size());
            }
            assertThrows(IndexOutOfBoundsException.class, () -> e.exportChunks(0));
            e.close();
            e.close();
            assertThrows(IllegalStateException.class, e::address);
        }
    }

    @Test
    void shareOfEmptyBufferIsAView() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer e = r.allocate(0)) {
            int[] ran = {0};
            VirtualMemoryBuffer v = e.share(() -> ran[0]++);
            assertEquals(BufferOrigin.SHARED_VIEW, v.origin());
            assertEquals(0, v.size());
            v.close();
            v.close();
            assertEquals(1, ran[0], "whenGone runs exactly once");
        }
    }

    @Test
    void chunkAndAccessIndicesAreChecked() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.chunkSize(-1)), "-1");
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.chunkSize(1)), "1");
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.chunkSize(Integer.MIN_VALUE)), String.valueOf(Integer.MIN_VALUE));
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.access(0, 1)), "chunk");
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.access(0, -1)), "chunk");
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.access(-1)), "device", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.access(99)), "device", "99");
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.access(99, 0)), "device", "99");
            assertEquals(AccessMode.READ_WRITE, b.access(0));
            assertEquals(AccessMode.NONE, b.access(1), "no peer access asked");
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.exportChunks(1)), "chunkIndices[0]", "1");
            assertNames(assertThrows(IndexOutOfBoundsException.class, () -> b.exportChunks(-1)), "chunkIndices[0]", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.exportChunks(0, 0)), "chunkIndices", "twice");
            try (BufferDescriptor d = b.exportChunks()) {
                assertEquals(0, d.chunkCount());
            }
        }
    }

    @Test
    void exportChunksMakesOneExportPerIndexAndNoneForEmpty() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity());
             VirtualMemoryBuffer g = r.modifyAllocation(b, 3 * r.granularity())) {
            int chunks = g.chunkCount();
            assertTrue(chunks >= 2, "chunks " + chunks);
            DriverCounters c = Driver.get().counters();
            c.resetCalls();
            try (BufferDescriptor d = g.exportChunks()) {
                assertEquals(0, c.calls("cuMemExportToShareableHandle"));
            }
            c.resetCalls();
            try (BufferDescriptor d = g.exportChunks(chunks - 1, 0)) {
                assertEquals(2, c.calls("cuMemExportToShareableHandle"));
                assertEquals(g.chunkSize(chunks - 1) + g.chunkSize(0), d.size());
                assertArrayEquals(new long[] {g.chunkSize(chunks - 1), g.chunkSize(0)}, d.sizes());
            }
        }
    }

    @Test
    void noDriverCallPromises() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            DriverCounters c = Driver.get().counters();
            c.resetCalls();
            b.exportedChunkCount();
            b.allocationIds();
            VirtualMemoryBuffer v = b.share(() -> { });
            assertEquals(0, c.totalCalls(), "exportedChunkCount/allocationIds/share made calls: " + c.calls());
            c.resetCalls();
            VirtualMemoryBuffer alias = r.modifyAllocation(b, 4096); // fits: ALIAS, no driver call
            assertEquals(BufferOrigin.ALIAS, alias.origin());
            assertEquals(0, c.totalCalls(), "alias made calls: " + c.calls());
            alias.close();
            v.close();
        }
    }

    @Test
    void allocationIdsAreFreshArraysAndNonZero() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            long[] a = b.allocationIds();
            long[] a2 = b.allocationIds();
            assertNotSame(a, a2);
            assertEquals(1, a.length);
            assertNotEquals(0, a[0]);
            a[0] = 0;
            assertNotEquals(0, b.allocationIds()[0]);
        }
    }

    @Test
    void aliasesAndViewsOutliveTheirSourceAndSeeTheBytes() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long g = r.granularity();
            VirtualMemoryBuffer b = r.allocate(g);
            b.fill((byte) 3);
            VirtualMemoryBuffer alias = r.modifyAllocation(b, g / 2);
            VirtualMemoryBuffer grown = r.modifyAllocation(b, 2 * g);
            int[] gone = {0};
            VirtualMemoryBuffer view = b.share(() -> gone[0]++);
            b.close();
            byte[] x = new byte[1];
            alias.copyTo(g / 2 - 1, x, 0, 1);
            assertEquals(3, x[0]);
            grown.copyTo(g - 1, x, 0, 1);
            assertEquals(3, x[0]);
            view.copyTo(0, x, 0, 1);
            assertEquals(3, x[0]);
            // a view of a closed-source alias can still be shared and grown
            VirtualMemoryBuffer g2 = r.modifyAllocation(view, 3 * g);
            g2.copyTo(0, x, 0, 1);
            assertEquals(3, x[0]);
            view.close();
            assertEquals(0, gone[0], "whenGone ran while a derivation (g2) of the view lives");
            g2.close();
            assertEquals(1, gone[0]);
            alias.close();
            grown.close();
        }
        LiveObjects.assertBack(before, "after the test");
    }

    @Test
    void byteBufferViewAfterCloseAndOfAlias() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = hostResource()) {
            VirtualMemoryBuffer b = r.allocate(8192);
            b.fill((byte) 4);
            ByteBuffer v = b.asByteBuffer();
            assertTrue(v.isDirect());
            assertEquals(8192, v.capacity(), "view capacity = size()");
            b.close();
            assertThrows(IllegalStateException.class, b::asByteBuffer);
            assertEquals(4, v.get(8191));
            v = null;
            try (VirtualMemoryResource dev = VirtualMemoryResource.create(0); VirtualMemoryBuffer d = dev.allocate(1)) {
                assertNames(assertThrows(UnsupportedOperationException.class, d::asByteBuffer), "asByteBuffer");
            }
        }
        LiveObjects.awaitBackAfterViewsAreCollected(before);
    }


    @Test
    void copyFromByteBufferAdvancesPositionAndRespectsLimit() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            ByteBuffer src = ByteBuffer.allocateDirect(64);
            for (int i = 0; i < 64; i++) src.put(i, (byte) i);
            src.position(10).limit(20);
            b.copyFrom(100, src);
            assertEquals(20, src.position());
            ByteBuffer heap = ByteBuffer.allocate(64);
            heap.position(5).limit(15);
            b.copyTo(100, heap);
            assertEquals(15, heap.position());
            for (int i = 0; i < 10; i++) assertEquals(10 + i, heap.get(5 + i));
            // heap buffer with array offset (a slice)
            ByteBuffer sliced = ByteBuffer.allocate(64).position(8).slice();
            sliced.limit(10);
            b.copyTo(100, sliced);
            for (int i = 0; i < 10; i++) assertEquals(10 + i, sliced.get(i));
            // read-only heap source is fine
            ByteBuffer ro = ByteBuffer.wrap(new byte[] {1, 2, 3}).asReadOnlyBuffer();
            b.copyFrom(0, ro);
            assertEquals(3, ro.position());
        }
    }

    @Test
    void leaseContract() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            BufferLease l = b.lease("holder-42");
            assertEquals(1, b.leaseCount());
            assertSame(b, l.buffer());
            assertEquals("holder-42", l.holder());
            IllegalStateException e = assertThrows(IllegalStateException.class, b::close);
            assertNames(e, "holder-42");
            assertFalse(b.isClosed());
            b.fill((byte) 1); // still usable
            l.close();
            l.close();
            assertTrue(l.isReleased());
            assertEquals(0, b.leaseCount());
            b.close();
            assertTrue(b.isClosed());
            // closeWhenUnused with a lease
            VirtualMemoryBuffer c = r.allocate(MiB);
            BufferLease l2 = c.leaseDescribedBy(() -> null);
            assertEquals("(no holder description)", l2.holder());
            c.closeWhenUnused();
            assertTrue(c.isClosePending());
            assertFalse(c.isClosed());
            l2.close();
            assertTrue(c.isClosed());
            assertFalse(c.isClosePending());
        }
    }

    @Test
    void withAddressGivesTheAddressAndBlocksClose() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            long[] seen = {0};
            b.withAddress(a -> {
                seen[0] = a;
                assertThrows(IllegalStateException.class, b::close);
            });
            assertEquals(b.address(), seen[0]);
            assertFalse(b.isClosed());
            // an exception from the action releases the use
            assertThrows(ArithmeticException.class, () -> b.withAddress(a -> { throw new ArithmeticException(); }));
            b.close();
            assertTrue(b.isClosed());
        }
    }
}
