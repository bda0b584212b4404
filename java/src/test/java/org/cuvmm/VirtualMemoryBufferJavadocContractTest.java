package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** VirtualMemoryBuffer's javadoc, read as a user would: the promises no other test checks. */
class VirtualMemoryBufferJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /**
     * chunkSize/access(device, chunk) on an empty buffer: IndexOutOfBoundsException naming the
     * index and saying the buffer has no chunks (as exportChunks does), not "expected: 0 to -1".
     */
    @Test
    void aChunkIndexOfAnEmptyBufferSaysItHasNoChunks() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer empty = r.allocate(0)) {
            assertEquals(0, empty.chunkCount());
            IndexOutOfBoundsException size = assertThrows(IndexOutOfBoundsException.class, () -> empty.chunkSize(0));
            assertNames(size, "index: 0", "no chunks");
            assertFalse(size.getMessage().contains("0 to -1"), size.getMessage());
            IndexOutOfBoundsException access = assertThrows(IndexOutOfBoundsException.class, () -> empty.access(0, 0));
            assertNames(access, "chunk: 0", "no chunks");
            assertFalse(access.getMessage().contains("0 to -1"), access.getMessage());
            assertEquals(AccessMode.NONE, empty.access(0), "an empty buffer has no memory: NONE");
            assertEquals(0, empty.allocationIds().length);
            assertEquals(0, empty.exportedChunkCount());
        }
    }

    /** chunkSize: the chunks in address order sum to mappedSize(); a bad index names the range; closed: ISE. */
    @Test
    void chunkSizes() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(1);
            try (VirtualMemoryBuffer grown = r.modifyAllocation(b, 2 * r.granularity() + 1)) {
                long sum = 0;
                for (int i = 0; i < grown.chunkCount(); i++) sum += grown.chunkSize(i);
                assertEquals(grown.mappedSize(), sum);
                int n = grown.chunkCount();
                assertNames(assertThrows(IndexOutOfBoundsException.class, () -> grown.chunkSize(n)),
                        "index: " + n, "0 to " + (n - 1));
                assertNames(assertThrows(IndexOutOfBoundsException.class, () -> grown.chunkSize(-1)), "index: -1");
                assertEquals(n, grown.allocationIds().length);
            } finally {
                b.close();
            }
            assertThrows(IllegalStateException.class, () -> b.chunkSize(0));
        }
    }

    /** lease/leaseDescribedBy: null named; a supplier returning null or throwing gives the fixed texts. */
    @Test
    void leaseHolders() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            assertNames(assertThrows(NullPointerException.class, () -> b.lease(null)), "holder");
            assertNames(assertThrows(NullPointerException.class, () -> b.leaseDescribedBy(null)), "holder");
            try (BufferLease none = b.leaseDescribedBy(() -> null);
                 BufferLease bad = b.leaseDescribedBy(() -> { throw new IllegalStateException("nope"); })) {
                assertEquals("(no holder description)", none.holder());
                assertTrue(bad.holder().startsWith("(holder description unavailable: "), bad.holder());
                assertEquals(2, b.leaseCount());
                assertSame(b, none.buffer());
                assertNames(assertThrows(IllegalStateException.class, b::close), "(no holder description)");
                assertFalse(b.isClosed());
            }
            assertEquals(0, b.leaseCount());
        }
    }
}
