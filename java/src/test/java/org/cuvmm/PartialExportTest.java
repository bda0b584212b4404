package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * {@link VirtualMemoryBuffer#exportChunks(int...)}: exactly one export call per chunk named,
 * none for the others; the descriptor owns exactly those fds; refusals make no driver call
 * and leave no fd.
 */
class PartialExportTest {
    private static final String EXPORT = "cuMemExportToShareableHandle";

    /** A buffer of three 2 MiB chunks, chunk i filled with i + 1. */
    private static VirtualMemoryBuffer threeChunks(VirtualMemoryResource r) {
        try (VirtualMemoryBuffer one = r.allocate(2 * MiB); VirtualMemoryBuffer two = r.modifyAllocation(one, 4 * MiB)) {
            VirtualMemoryBuffer three = r.modifyAllocation(two, 6 * MiB);
            for (int i = 0; i < 3; i++) three.fill(i * 2 * MiB, 2 * MiB, (byte) (i + 1));
            assertEquals(3, three.chunkCount());
            return three;
        }
    }

    @Test
    void onlyTheNamedChunksAreExported() {
        Map<String, Long> live = LiveObjects.now();
        Map<String, String> fds = OpenFds.byNumber();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = threeChunks(r)) {
            long[] ids = b.allocationIds();
            DriverCounters c = TestSupport.counters();
            long before = c.calls(EXPORT);
            try (BufferDescriptor d = b.exportChunks(2, 0)) {
                assertEquals(before + 2, c.calls(EXPORT), "one export call per chunk named, none for chunk 1");
                assertEquals(2, d.chunkCount());
                assertArrayEquals(new long[] {2 * MiB, 2 * MiB}, d.sizes());
                assertEquals(4 * MiB, d.size(), "the named chunks' sizes summed");
                // Importing maps exactly the named chunks, in the order named.
                try (VirtualMemoryBuffer imported = r.importBuffer(d)) {
                    byte[] bytes = new byte[2];
                    imported.copyTo(0, bytes, 0, 1);
                    imported.copyTo(2 * MiB, bytes, 1, 1);
                    assertArrayEquals(new byte[] {3, 1}, bytes, "chunk 2, then chunk 0");
                }
            }
            long mid = c.calls(EXPORT);
            try (BufferDescriptor none = b.exportChunks()) {
                assertEquals(mid, c.calls(EXPORT), "nothing named: no driver call");
                assertEquals(0, none.chunkCount());
                assertEquals(0, none.size());
            }
            try (BufferDescriptor all = b.exportDescriptor()) {
                assertEquals(mid + 3, c.calls(EXPORT), "the whole export: one call per chunk, as before");
                assertEquals(3, all.chunkCount());
            }
            assertArrayEquals(ids, b.allocationIds());
        }
        OpenFds.assertNoNewFds(fds, "after the partial exports");
        LiveObjects.assertBack(live, "after the partial exports");
    }

    @Test
    void refusalsMakeNoDriverCallAndLeaveNoFd() {
        Map<String, String> fds = OpenFds.byNumber();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = threeChunks(r)) {
            DriverCounters c = TestSupport.counters();
            long before = c.calls(EXPORT);
            IndexOutOfBoundsException out = assertThrows(IndexOutOfBoundsException.class, () -> b.exportChunks(0, 3));
            assertTrue(out.getMessage().startsWith("chunkIndices[1]: 3 (expected: 0 to 2"), out.getMessage());
            assertEquals(before, c.calls(EXPORT), "no export call for an index past the end (chunk 0 was valid)");
            assertThrows(IndexOutOfBoundsException.class, () -> b.exportChunks(-1));
            assertEquals(before, c.calls(EXPORT), "no export call for a negative index");
            IllegalArgumentException twice = assertThrows(IllegalArgumentException.class, () -> b.exportChunks(1, 0, 1));
            assertTrue(twice.getMessage().contains("chunk 1 is named twice"), twice.getMessage());
            assertEquals(before, c.calls(EXPORT), "no export call for a repeated index (chunks 1 and 0 were valid)");
            assertThrows(NullPointerException.class, () -> b.exportChunks((int[]) null));
            assertEquals(before, c.calls(EXPORT), "no export call for a null array");
            try (BufferDescriptor d = b.exportChunks(1); VirtualMemoryBuffer imported = r.importBuffer(d)) {
                long afterExport = c.calls(EXPORT);
                IllegalStateException again = assertThrows(IllegalStateException.class, () -> imported.exportChunks(0));
                assertTrue(again.getMessage().contains("imported memory cannot be exported again"), again.getMessage());
                assertEquals(afterExport, c.calls(EXPORT), "no export call for an imported chunk");
            }
            try (VirtualMemoryBuffer empty = r.allocate(0)) {
                IndexOutOfBoundsException none = assertThrows(IndexOutOfBoundsException.class, () -> empty.exportChunks(0));
                assertTrue(none.getMessage().startsWith("chunkIndices[0]: 0 (expected: no index; ")
                        && none.getMessage().endsWith(" is empty and has no chunks)"), none.getMessage());
                try (BufferDescriptor nothing = empty.exportChunks()) {
                    assertEquals(0, nothing.chunkCount(), "an empty buffer exports no chunk");
                }
            }
            VirtualMemoryBuffer closed = r.allocate(2 * MiB);
            closed.close();
            long beforeClosed = c.calls(EXPORT);
            assertThrows(IllegalStateException.class, () -> closed.exportChunks(0));
            assertEquals(beforeClosed, c.calls(EXPORT), "no export call for a closed buffer");
        }
        try (VirtualMemoryResource local = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .handleType(HandleType.NONE).build()); VirtualMemoryBuffer b = local.allocate(2 * MiB)) {
            long before = TestSupport.counters().calls(EXPORT);
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> b.exportChunks(0));
            assertTrue(e.getMessage().startsWith("exportChunks: "), e.getMessage());
            assertEquals(before, TestSupport.counters().calls(EXPORT), "no export call for a resource without POSIX_FD");
        }
        OpenFds.assertNoNewFds(fds, "after the refused exports");
    }

    @Test
    void takenFdsBelongToTheCaller() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = threeChunks(r)) {
            BufferDescriptor d = b.exportChunks(1);
            int[] taken = d.takeFds();
            d.close();
            assertEquals(1, taken.length);
            assertTrue(OpenFds.isOpen(taken[0]), "a taken fd stays open after the descriptor's close");
            assertEquals(0, org.cuvmm.internal.jni.NativeApi.fd_close(taken[0]));
        }
    }
}
