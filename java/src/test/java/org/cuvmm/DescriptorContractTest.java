package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.util.Map;

import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/** Probe: BufferDescriptor and import/export. */
class DescriptorContractTest {
    @Test
    void exportImportRoundTripLeavesNoFdOrMapping() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        Map<String, String> fds = TestSupport.fdTargets();
        long maps = TestSupport.memfdMappings();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long g = r.granularity();
            VirtualMemoryBuffer b = r.allocate(g);
            VirtualMemoryBuffer big = r.modifyAllocation(b, 2 * g + 5);
            big.fill((byte) 9);
            BufferDescriptor d = big.exportDescriptor();
            assertEquals(big.exportedChunkCount(), d.chunkCount());
            assertEquals(2 * g + 5, d.size());
            assertEquals(3 * g, d.mappedSize());
            assertEquals(HandleType.POSIX_FD, d.handleType());
            VirtualMemoryBuffer imp = r.importBuffer(d);
            assertTrue(imp.isImported());
            assertEquals(BufferOrigin.IMPORTED, imp.origin());
            assertEquals(2 * g + 5, imp.size());
            byte[] x = new byte[1];
            imp.copyTo(2 * g + 4, x, 0, 1);
            assertEquals(9, x[0]);
            assertNames(assertThrows(IllegalStateException.class, imp::exportDescriptor), "imported");
            assertNames(assertThrows(IllegalStateException.class, () -> imp.exportChunks(0)), "imported");
            VirtualMemoryBuffer impAlias = r.modifyAllocation(imp, 4 * g);
            assertTrue(impAlias.isImported());
            assertThrows(IllegalStateException.class, impAlias::exportDescriptor);
            // the local chunk of a grown import is exportable by index
            try (BufferDescriptor local = impAlias.exportChunks(impAlias.chunkCount() - 1)) {
                assertEquals(1, local.chunkCount());
            }
            d.close();
            d.close();
            assertTrue(d.isClosed());
            assertNames(assertThrows(IllegalStateException.class, d::fds), "closed");
            assertNames(assertThrows(IllegalStateException.class, () -> r.importBuffer(d)), "closed");
            assertThrows(IllegalStateException.class, () -> d.useFds(f -> { }));
            assertThrows(IllegalStateException.class, d::takeFds);
            // getters still fine
            assertEquals(big.exportedChunkCount(), d.sizes().length);
            impAlias.close();
            imp.close();
            big.close();
            b.close();
        }
        LiveObjects.assertBack(before, "after export/import");
        TestSupport.assertNoNewFds(fds, "after export/import");
        assertEquals(maps, TestSupport.memfdMappings(), "memfd mappings");
    }

    @Test
    void fromFdsAndAdoptFdsValidation() throws Exception {
        Map<String, String> fds = TestSupport.fdTargets();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             BufferDescriptor d = b.exportDescriptor()) {
            long g = r.granularity();
            int fd = d.fds()[0];
            assertNames(assertThrows(NullPointerException.class, () -> BufferDescriptor.fromFds(null, new long[0], HandleType.POSIX_FD, 0)), "fds");
            assertNames(assertThrows(NullPointerException.class, () -> BufferDescriptor.fromFds(new int[0], null, HandleType.POSIX_FD, 0)), "sizes");
            assertNames(assertThrows(NullPointerException.class, () -> BufferDescriptor.fromFds(new int[0], new long[0], null, 0)), "handleType");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd}, new long[] {g}, HandleType.NONE, g)), "handleType");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd}, new long[0], HandleType.POSIX_FD, 0)), "sizes");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd}, new long[] {0}, HandleType.POSIX_FD, 0)), "sizes[0]", "0");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd}, new long[] {-g}, HandleType.POSIX_FD, 0)), "sizes[0]");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd}, new long[] {g}, HandleType.POSIX_FD, g + 1)), "size", String.valueOf(g + 1));
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd}, new long[] {g}, HandleType.POSIX_FD, -1)), "size", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {fd, fd}, new long[] {Long.MAX_VALUE, 1}, HandleType.POSIX_FD, 0)), "sizes");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {-1}, new long[] {g}, HandleType.POSIX_FD, g)), "fds[0]", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {99999}, new long[] {g}, HandleType.POSIX_FD, g)), "fds[0]", "99999");
            assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.adoptFds(new int[] {fd, fd}, new long[] {g, g}, HandleType.POSIX_FD, g)), "fds", "twice");
            // fromFds duplicates: the original stays open and the copy is importable
            try (BufferDescriptor copy = BufferDescriptor.fromFds(new int[] {fd}, new long[] {g}, HandleType.POSIX_FD, MiB)) {
                assertNotEquals(fd, copy.fds()[0]);
                try (VirtualMemoryBuffer imp = r.importBuffer(copy)) {
                    assertEquals(MiB, imp.size());
                }
            }
            assertTrue(OpenFds.isOpen(fd));
            // a size not a multiple of granularity is refused at import, naming it
            try (BufferDescriptor odd = BufferDescriptor.fromFds(new int[] {fd}, new long[] {g - 1}, HandleType.POSIX_FD, 1)) {
                assertNames(assertThrows(IllegalArgumentException.class, () -> r.importBuffer(odd)), "sizes[0]", String.valueOf(g - 1));
            }
            // import into a resource that is not IPC-enabled
            try (VirtualMemoryResource none = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                    .handleType(HandleType.NONE).build())) {
                assertNames(assertThrows(IllegalStateException.class, () -> none.importBuffer(d)), "POSIX_FD");
                try (VirtualMemoryBuffer nb = none.allocate(1)) {
                    assertNames(assertThrows(IllegalStateException.class, nb::exportDescriptor), "POSIX_FD");
                    assertNames(assertThrows(IllegalStateException.class, () -> nb.exportChunks(0)), "POSIX_FD");
                }
            }
            assertNames(assertThrows(NullPointerException.class, () -> r.importBuffer(d, null)), "whenUnmapped");
            assertNames(assertThrows(NullPointerException.class, () -> d.useFds(null)), "action");
        }
        TestSupport.assertNoNewFds(fds, "after descriptor validation");
    }

    @Test
    void importOfAnEmptyDescriptor() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             BufferDescriptor d = BufferDescriptor.fromFds(new int[0], new long[0], HandleType.POSIX_FD, 0)) {
            int[] ran = {0};
            VirtualMemoryBuffer b = r.importBuffer(d, () -> ran[0]++);
            assertEquals(0, b.size());
            b.close();
            assertEquals(1, ran[0], "whenUnmapped runs once");
        }
        LiveObjects.assertBack(before, "after empty import");
    }

    @Test
    void takeFdsHandsOwnershipAndCloseIsThenANoOp() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            BufferDescriptor d = b.exportDescriptor();
            int[] taken = d.takeFds();
            assertTrue(d.isClosed());
            d.close();
            for (int fd : taken) assertTrue(OpenFds.isOpen(fd), "fd " + fd + " closed by close() after takeFds");
            assertNames(assertThrows(IllegalStateException.class, d::fds), "takeFds");
            assertNames(assertThrows(IllegalStateException.class, d::takeFds), "takeFds");
            // adopt them back and close: they close
            BufferDescriptor a = BufferDescriptor.adoptFds(taken, d.sizes(), HandleType.POSIX_FD, d.size());
            a.close();
            for (int fd : taken) assertFalse(OpenFds.isOpen(fd), "fd " + fd + " still open after adopt+close");
        }
    }

    @Test
    void useFdsDefersCloseUntilTheActionReturns() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            BufferDescriptor d = b.exportDescriptor();
            int[] seen = new int[1];
            d.useFds(f -> {
                seen[0] = f[0];
                d.close();
                assertTrue(OpenFds.isOpen(f[0]), "closed during the action");
                assertNames(assertThrows(IllegalStateException.class, d::takeFds), "closed");
            });
            assertFalse(OpenFds.isOpen(seen[0]));
            // an exception from the action passes through, descriptor stays open
            BufferDescriptor e = b.exportDescriptor();
            assertThrows(java.io.IOException.class, () -> e.useFds(f -> { throw new java.io.IOException("x"); }));
            assertFalse(e.isClosed());
            e.fds();
            e.close();
        }
    }

    @Test
    void adoptingTheDriversOwnMemfdIsRefused() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(TestSupport.onHostDriver(), "host driver only (documented so)");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            Map<String, String> all = TestSupport.fdTargets();
            for (Map.Entry<String, String> en : all.entrySet()) {
                if (!en.getValue().contains("cuvmm-host")) continue;
                int fd = Integer.parseInt(en.getKey());
                assertNames(assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.adoptFds(new int[] {fd},
                        new long[] {r.granularity()}, HandleType.POSIX_FD, 1)), "fds[0]");
            }
        }
    }
}
