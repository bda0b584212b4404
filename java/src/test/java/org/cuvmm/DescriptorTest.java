package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.function.Supplier;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** Export, import, fromFds and the imported mark, within one process (issue 3, items 1 to 3). */
class DescriptorTest {
    private static void assertNoReexport(Supplier<VirtualMemoryBuffer> make, String what) {
        long calls = TestSupport.counters().calls("cuMemExportToShareableHandle");
        try (VirtualMemoryBuffer b = make.get()) {
            assertTrue(b.isImported(), what + " is marked imported");
            IllegalStateException e = assertThrows(IllegalStateException.class, b::exportDescriptor, what);
            assertTrue(e.getMessage().contains("imported from another process"), e.getMessage());
            assertTrue(e.getMessage().endsWith(org.cuvmm.internal.ErrorMessages.IMPORTED_CANNOT_BE_EXPORTED),
                    e.getMessage());
        }
        assertEquals(calls, TestSupport.counters().calls("cuMemExportToShareableHandle"),
                "refused before any driver call: " + what);
    }

    @Test
    void exportImportRoundTripSharesTheSameMemory() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        java.util.Map<String, String> fds = TestSupport.fdTargets();
        long hint = GrowTest.freeRegion(64 * MiB);
        try (VirtualMemoryResource r = GrowTest.resourceAt(hint); VirtualMemoryBuffer a = r.allocate(2 * MiB);
             VirtualMemoryBuffer b = r.modifyAllocation(a, 5 * MiB)) {
            byte[] data = pattern((int) (5 * MiB), 11);
            b.copyFrom(data);
            try (BufferDescriptor d = b.exportDescriptor()) {
                assertEquals(2, d.chunkCount());
                assertArrayEquals(new long[] {2 * MiB, 4 * MiB}, d.sizes());
                assertEquals(5 * MiB, d.size());
                assertEquals(HandleType.POSIX_FD, d.handleType());
                try (VirtualMemoryBuffer imported = r.importBuffer(d)) {
                    assertEquals(BufferOrigin.IMPORTED, imported.origin());
                    assertTrue(imported.isImported());
                    assertFalse(b.isImported());
                    byte[] back = new byte[data.length];
                    imported.copyTo(back);
                    assertArrayEquals(data, back);
                    imported.fill(0, 4, (byte) 0x77);
                    byte[] seen = new byte[4];
                    b.copyTo(0, seen, 0, 4);
                    assertArrayEquals(new byte[] {0x77, 0x77, 0x77, 0x77}, seen, "one physical memory, two mappings");
                }
            }
            // Every call exports anew; nothing is cached on the buffer.
            for (int i = 0; i < 50; i++) b.exportDescriptor().close();
        }
        LiveObjects.assertBack(before, "after export/import/close");
        TestSupport.assertNoNewFds(fds, "by the test");
    }

    @Test
    void aliasExportsOnlyTheChunksItCovers() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer a = r.allocate(2 * MiB);
             VirtualMemoryBuffer big = r.modifyAllocation(a, 6 * MiB);
             VirtualMemoryBuffer small = r.modifyAllocation(big, MiB);
             BufferDescriptor d = small.exportDescriptor()) {
            assertEquals(1, d.chunkCount());
            assertEquals(MiB, d.size());
        }
    }

    @Test
    void reExportOfImportedMemoryIsRefusedInEveryForm() {
        long hint = GrowTest.freeRegion(64 * MiB);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB);
             BufferDescriptor d = src.exportDescriptor();
             VirtualMemoryResource at = GrowTest.resourceAt(hint)) {
            assertNoReexport(() -> r.importBuffer(d), "an import");
            try (VirtualMemoryBuffer imp = r.importBuffer(d)) {
                assertNoReexport(() -> r.modifyAllocation(imp, MiB), "an alias of an import");
                assertNoReexport(() -> r.modifyAllocation(imp, 8 * MiB), "a grow of an import");
            }
            // a move of an import: ask for a decoy right after the import so the grow must move.
            // An import takes no hint, so something else of the process (the host driver's
            // private view of a device allocation, say) may already sit there; the decoy then
            // lands elsewhere, and the grow must move all the same.
            try (VirtualMemoryBuffer imp = r.importBuffer(d);
                 VirtualMemoryResource decoyAt = GrowTest.resourceAt(imp.address() + 2 * MiB);
                 VirtualMemoryBuffer decoy = decoyAt.allocate(2 * MiB)) {
                assertNoReexport(() -> {
                    VirtualMemoryBuffer moved = r.modifyAllocation(imp, 4 * MiB);
                    assertEquals(BufferOrigin.MOVED, moved.origin());
                    return moved;
                }, "a move of an import");
            }
        }
    }

    @Test
    void fromFdsDuplicatesAndValidates() throws Exception {
        java.util.Map<String, String> fds = TestSupport.fdTargets();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(3 * MiB);
             BufferDescriptor exported = src.exportDescriptor()) {
            src.fill((byte) 0x42);
            int[] raw = exported.fds();
            try (BufferDescriptor copy = BufferDescriptor.fromFds(raw, exported.sizes(), HandleType.POSIX_FD, 3 * MiB)) {
                assertFalse(java.util.Arrays.equals(raw, copy.fds()), "fromFds duplicated the ints");
                try (VirtualMemoryBuffer imp = r.importBuffer(copy)) {
                    byte[] one = new byte[1];
                    imp.copyTo(3 * MiB - 1, one, 0, 1);
                    assertEquals(0x42, one[0]);
                }
            }
            assertTrue(TestSupport.fdTargets().containsKey(String.valueOf(raw[0])), "the caller's originals stay open");

            long[] sizes = exported.sizes();
            assertMessage(() -> BufferDescriptor.fromFds(raw, new long[] {1, 2}, HandleType.POSIX_FD, 1), "one size per fd");
            assertMessage(() -> BufferDescriptor.fromFds(raw, new long[] {0}, HandleType.POSIX_FD, 0), "sizes[0]: 0");
            assertMessage(() -> BufferDescriptor.fromFds(raw, new long[] {-4 * MiB}, HandleType.POSIX_FD, 0), "sizes[0]: -");
            assertMessage(() -> BufferDescriptor.fromFds(raw, sizes, HandleType.POSIX_FD, sizes[0] + 1), "size: ");
            assertMessage(() -> BufferDescriptor.fromFds(raw, sizes, HandleType.NONE, 1), "handleType: NONE");
            assertMessage(() -> BufferDescriptor.fromFds(new int[] {987654}, sizes, HandleType.POSIX_FD, 1),
                    "fds[0]: 987654");
            assertMessage(() -> BufferDescriptor.fromFds(new int[] {raw[0], raw[0]}, new long[] {Long.MAX_VALUE, 2},
                    HandleType.POSIX_FD, 1), "fits in a long");
        }
        TestSupport.assertNoNewFds(fds, "by the test");
    }

    @Test
    void adoptFdsTakesOwnership() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB)) {
            BufferDescriptor exported = src.exportDescriptor();
            // Take the ints out of `exported` (its cleaner no longer owns them), then hand them
            // over as a receiver would: the new descriptor owns them. Abandoning `exported` after
            // fds() instead would leave two owners, and its cleaner would later close whatever
            // file reused those numbers (this broke other tests in this class at random).
            int[] raw = exported.takeFds();
            BufferDescriptor adopted = BufferDescriptor.adoptFds(raw, exported.sizes(), HandleType.POSIX_FD, 2 * MiB);
            assertArrayEquals(raw, adopted.fds(), "no duplicate was made");
            try (VirtualMemoryBuffer imp = r.importBuffer(adopted)) {
                assertTrue(imp.isImported());
            }
            adopted.close();
            // (listing /proc/self/fd may itself reuse the number, so look at what it points to)
            assertFalse(TestSupport.fdTargets().getOrDefault(String.valueOf(raw[0]), "").startsWith("/memfd:"),
                    "closed by the adopting descriptor");
            assertThrows(IllegalArgumentException.class,
                    () -> BufferDescriptor.adoptFds(raw, new long[] {2 * MiB}, HandleType.POSIX_FD, 2 * MiB),
                    "a closed fd is refused");
        }
    }

    private static void assertMessage(Runnable r, String fragment) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, r::run);
        assertTrue(e.getMessage().contains(fragment), () -> "'" + e.getMessage() + "' lacks '" + fragment + "'");
    }

    @Test
    void forgedDescriptorsAreRejectedAndRolledBack() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        java.util.Map<String, String> fds = TestSupport.fdTargets();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB);
             BufferDescriptor good = src.exportDescriptor()) {
            Map<String, Long> live = LiveObjects.now();
            // wrong size: claims 4 MiB for a 2 MiB allocation -> the map fails, the import is undone
            try (BufferDescriptor big = BufferDescriptor.fromFds(good.fds(), new long[] {4 * MiB}, HandleType.POSIX_FD, 4 * MiB)) {
                CudaException e = assertThrows(CudaException.class, () -> r.importBuffer(big));
                assertEquals("cuMemMap", e.call());
                // The likely cause named (the driver's INVALID_VALUE alone does not say it).
                assertTrue(e.getMessage().contains("the descriptor gives this chunk 4194304 bytes; it must be exactly "
                        + "the size of the allocation its fd was exported from"), e.getMessage());
                LiveObjects.assertBack(live, "after a failed import (wrong size)");
            }
            // shorter: claims 2 MiB of a 4 MiB allocation (audit A5): the whole allocation is
            // mapped or nothing, so the map is refused the same way and the import undone
            try (VirtualMemoryBuffer four = r.allocate(4 * MiB); BufferDescriptor whole = four.exportDescriptor();
                 BufferDescriptor part = BufferDescriptor.fromFds(whole.fds(), new long[] {2 * MiB},
                         HandleType.POSIX_FD, 2 * MiB)) {
                Map<String, Long> withFour = LiveObjects.now();
                CudaException e = assertThrows(CudaException.class, () -> r.importBuffer(part));
                assertEquals("cuMemMap", e.call());
                assertEquals("CUDA_ERROR_INVALID_VALUE", e.resultName(), e.getMessage());
                assertTrue(e.getMessage().contains("the descriptor gives this chunk 2097152 bytes; it must be exactly "
                        + "the size of the allocation"), e.getMessage());
                LiveObjects.assertBack(withFour, "after a failed import (a chunk declared shorter than its allocation)");
            }
            // a size that is not a multiple of the granularity never reaches the driver
            try (BufferDescriptor odd = BufferDescriptor.fromFds(good.fds(), new long[] {4096}, HandleType.POSIX_FD, 4096)) {
                assertThrows(IllegalArgumentException.class, () -> r.importBuffer(odd));
            }
            // an fd that is not a memory handle: a plain file
            java.util.List<java.io.Closeable> opened = new java.util.ArrayList<>();
            try {
                int plainFd = newPlainFileFd(opened);
                try (BufferDescriptor forged = BufferDescriptor.fromFds(new int[] {plainFd}, new long[] {2 * MiB},
                        HandleType.POSIX_FD, 2 * MiB)) {
                    CudaException e = assertThrows(CudaException.class, () -> r.importBuffer(forged));
                    assertEquals("cuMemImportFromShareableHandle", e.call());
                    LiveObjects.assertBack(live, "after a failed import (plain file)");
                }
            } finally {
                for (java.io.Closeable c : opened) c.close();
            }
            // memory of device 0 imported by a device-1 resource
            if (Driver.get().deviceCount() > 1) {
                try (VirtualMemoryResource other = VirtualMemoryResource.create(1)) {
                    CudaException e = assertThrows(CudaException.class, () -> other.importBuffer(good));
                    assertEquals("CUDA_ERROR_INVALID_DEVICE", e.resultName());
                    assertTrue(e.getMessage().contains("import with a resource on the device"), e.getMessage());
                    LiveObjects.assertBack(live, "after a failed import (wrong device)");
                }
            }
        }
        LiveObjects.assertBack(before, "after the test");
        TestSupport.assertNoNewFds(fds, "by the test");
    }

    /**
     * Opens a regular (non-memfd) file of 2 MiB and returns its fd number, found in
     * /proc/self/fd: an fd that is open but is not a memory handle.
     */
    private static int newPlainFileFd(java.util.List<java.io.Closeable> toClose) throws Exception {
        java.nio.file.Path file = java.nio.file.Files.createTempFile("cuvmm-not-memory", ".bin");
        java.io.RandomAccessFile raf = new java.io.RandomAccessFile(file.toFile(), "rw");
        raf.setLength(2 * MiB);
        toClose.add(raf);
        toClose.add(() -> java.nio.file.Files.deleteIfExists(file));
        String target = file.toRealPath().toString();
        return TestSupport.fdTargets().entrySet().stream().filter(e -> e.getValue().equals(target))
                .mapToInt(e -> Integer.parseInt(e.getKey())).findFirst()
                .orElseThrow(() -> new AssertionError("no fd for " + target + " in /proc/self/fd"));
    }

    @Test
    void aLeakedDescriptorsFdsAreClosedByTheCleaner() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(2 * MiB)) {
            long memfds = TestSupport.memfdFds();
            long leaks = LeakDetection.reportedLeaks();
            leakDescriptor(b);
            assertEquals(memfds + 1, TestSupport.memfdFds(), "the leaked descriptor still holds its fd");
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (TestSupport.memfdFds() > memfds && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
            }
            assertEquals(memfds, TestSupport.memfdFds(), "the cleaner closed the fd");
            assertTrue(LeakDetection.reportedLeaks() > leaks);
        }
    }

    private static void leakDescriptor(VirtualMemoryBuffer b) {
        b.exportDescriptor(); // never closed
    }

    @Test
    void closingADescriptorWhileImportsRunNeverBreaksThem() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(2);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB)) {
            src.fill((byte) 3);
            for (int round = 0; round < 100; round++) {
                BufferDescriptor d = src.exportDescriptor();
                java.util.concurrent.Future<?> importer = pool.submit(() -> {
                    try (VirtualMemoryBuffer imp = r.importBuffer(d)) {
                        byte[] one = new byte[1];
                        imp.copyTo(0, one, 0, 1);
                        assertEquals(3, one[0], "an import that started saw the right memory");
                    } catch (IllegalStateException closedFirst) {
                        assertTrue(closedFirst.getMessage().contains("closed"), closedFirst.getMessage());
                    }
                });
                d.close();
                importer.get(10, java.util.concurrent.TimeUnit.SECONDS);
                assertTrue(d.isClosed());
            }
        } finally {
            pool.shutdownNow();
        }
        LiveObjects.assertBack(before, "after import/close races");
    }

    @Test
    void exportNeedsAPosixFdResource() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build());
             VirtualMemoryBuffer b = r.allocate(MiB)) {
            assertFalse(r.isIpcEnabled());
            IllegalStateException e = assertThrows(IllegalStateException.class, b::exportDescriptor);
            assertTrue(e.getMessage().contains("POSIX_FD"), e.getMessage());
        }
    }
}
