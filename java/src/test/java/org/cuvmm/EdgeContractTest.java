package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: descriptors that lie, views of pooled buffers, whenUnmapped and shrinks. */
class EdgeContractTest {
    @Test
    void aDescriptorClaimingMoreThanTheAllocationIsRefused() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        Map<String, String> fds = TestSupport.fdTargets();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1);
             BufferDescriptor d = b.exportDescriptor()) {
            long g = r.granularity();
            try (BufferDescriptor lie = BufferDescriptor.fromFds(d.fds(), new long[] {2 * g}, HandleType.POSIX_FD, 2 * g)) {
                assertThrows(CudaException.class, () -> r.importBuffer(lie));
            }
            try (BufferDescriptor twice = BufferDescriptor.fromFds(new int[] {d.fds()[0], d.fds()[0]}, new long[] {g, g},
                    HandleType.POSIX_FD, 2 * g); VirtualMemoryBuffer imp = r.importBuffer(twice)) {
                // the same memory twice is allowed? whatever it is, it must not crash
                imp.fill((byte) 1);
            } catch (CudaException | IllegalArgumentException refused) {
                // fine
            }
            java.nio.file.Path tmp = java.nio.file.Files.createTempFile("probe", ".bin");
            try (java.io.RandomAccessFile f = new java.io.RandomAccessFile(tmp.toFile(), "rw")) {
                f.setLength(g);
                int fd = fdOf(tmp);
                try (BufferDescriptor file = BufferDescriptor.fromFds(new int[] {fd}, new long[] {g}, HandleType.POSIX_FD, g)) {
                    CudaException e = assertThrows(CudaException.class, () -> r.importBuffer(file));
                    assertNames(e, "fds");
                }
            } finally {
                java.nio.file.Files.deleteIfExists(tmp);
            }
        }
        LiveObjects.assertBack(before, "after lying descriptors");
        TestSupport.assertNoNewFds(fds, "after lying descriptors");
    }

    static int fdOf(java.nio.file.Path path) {
        for (Map.Entry<String, String> e : TestSupport.fdTargets().entrySet()) {
            if (e.getValue().equals(path.toString())) return Integer.parseInt(e.getKey());
        }
        throw new AssertionError("no fd open on " + path);
    }

    @Test
    void aShrunkAliasExportsOnlyItsChunks() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long g = r.granularity();
            VirtualMemoryBuffer b = r.allocate(g);
            VirtualMemoryBuffer grown = r.modifyAllocation(b, 3 * g);
            VirtualMemoryBuffer shrunk = r.modifyAllocation(grown, g);
            assertEquals(BufferOrigin.ALIAS, shrunk.origin());
            assertEquals(grown.chunkCount(), shrunk.chunkCount());
            assertEquals(1, shrunk.exportedChunkCount());
            assertEquals(grown.chunkCount(), shrunk.allocationIds().length);
            try (BufferDescriptor d = shrunk.exportDescriptor()) {
                assertEquals(1, d.chunkCount());
                assertEquals(g, d.size());
            }
            // access of a shrunk alias ignores chunks past its end
            VirtualMemoryResourceOptions noPeer = r.options();
            assertEquals(AccessMode.READ_WRITE, shrunk.access(0));
            for (VirtualMemoryBuffer x : new VirtualMemoryBuffer[] {b, grown, shrunk}) x.close();
        }
    }

    @Test
    void aSharedViewOfAPooledBufferKeepsThePoolFromReusingIt() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
            long g = r.granularity();
            VirtualMemoryBuffer p = pool.allocate(g);
            p.fill((byte) 6);
            long addr = p.address();
            AtomicInteger gone = new AtomicInteger();
            VirtualMemoryBuffer view = p.share(gone::incrementAndGet);
            p.close();
            VirtualMemoryBuffer next = pool.allocate(g);
            assertNotEquals(addr, next.address(), "memory a view still maps was handed out again");
            next.fill((byte) 0);
            byte[] x = new byte[1];
            view.copyTo(g - 1, x, 0, 1);
            assertEquals(6, x[0]);
            view.close();
            assertEquals(1, gone.get());
            next.close();
            assertEquals(0, pool.stats(PoolLifetime.LOCAL).liveCount());
        }
        LiveObjects.assertBack(before, "after pooled view");
    }

    @Test
    void aByteBufferViewOfAPooledHostBufferKeepsThePoolFromReusingIt() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = BufferContractTest.hostResource();
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
            long g = r.granularity();
            VirtualMemoryBuffer p = pool.allocate(g);
            p.fill((byte) 6);
            long addr = p.address();
            ByteBuffer view = p.asByteBuffer();
            p.close();
            VirtualMemoryBuffer next = pool.allocate(g);
            assertNotEquals(addr, next.address(), "memory a ByteBuffer view still maps was handed out again");
            next.fill((byte) 0);
            assertEquals(6, view.get((int) g - 1));
            next.close();
            view = null;
        }
        LiveObjects.awaitBackAfterViewsAreCollected(before);
    }

    @Test
    void whenUnmappedWaitsForEveryDerivation() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            AtomicInteger unmapped = new AtomicInteger();
            VirtualMemoryBuffer imp;
            try (BufferDescriptor d = b.exportDescriptor()) {
                imp = r.importBuffer(d, unmapped::incrementAndGet);
            }
            VirtualMemoryBuffer grown = r.modifyAllocation(imp, 2 * r.granularity());
            AtomicInteger viewGone = new AtomicInteger();
            VirtualMemoryBuffer view = imp.share(viewGone::incrementAndGet);
            VirtualMemoryBuffer viewAlias = r.modifyAllocation(view, 1);
            imp.close();
            grown.close();
            assertEquals(0, unmapped.get());
            view.close();
            assertEquals(0, viewGone.get());
            viewAlias.close();
            assertEquals(1, viewGone.get());
            assertEquals(1, unmapped.get());
            // a throwing whenUnmapped is swallowed
            try (BufferDescriptor d = b.exportDescriptor()) {
                VirtualMemoryBuffer i2 = r.importBuffer(d, () -> { throw new IllegalStateException("probe"); });
                i2.close();
                assertTrue(i2.isClosed());
            }
        }
        LiveObjects.assertBack(before, "after whenUnmapped");
    }

    @Test
    void importOfASizeZeroDescriptorWithChunks() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             BufferDescriptor d = b.exportDescriptor();
             BufferDescriptor z = BufferDescriptor.fromFds(d.fds(), d.sizes(), HandleType.POSIX_FD, 0)) {
            try (VirtualMemoryBuffer imp = r.importBuffer(z)) {
                assertEquals(0, imp.size());
                assertEquals(0, imp.exportedChunkCount());
                assertEquals(AccessMode.NONE, imp.access(0));
            }
        }
        LiveObjects.assertBack(before, "after size-0 import");
    }

    @Test
    void closeStreamWithALeaseRefusesAndReleasesNothing() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            BufferLease l = b.lease("probe-holder");
            assertNames(assertThrows(IllegalStateException.class, () -> b.close(s)), "probe-holder");
            assertFalse(b.isClosed());
            b.fillAsync(0, 1, (byte) 1, s);
            l.close();
            b.close(s);
            assertTrue(b.isClosed());
            s.synchronize();
        }
    }

    @Test
    void resourceCloseRefusesWhileAnAllocateIsInProgress() throws Exception {
        // No hook into allocate: race many allocations against close and check the rule
        // "refuses while a call is inside; the resource stays usable".
        for (int round = 0; round < 50; round++) {
            VirtualMemoryResource r = VirtualMemoryResource.create(0);
            java.util.concurrent.CountDownLatch go = new java.util.concurrent.CountDownLatch(1);
            Thread t = new Thread(() -> {
                try {
                    go.await();
                    for (int i = 0; i < 20; i++) {
                        try (VirtualMemoryBuffer b = r.allocate(1)) { }
                    }
                } catch (IllegalStateException closed) {
                } catch (InterruptedException e) {
                }
            });
            t.start();
            go.countDown();
            boolean closed = false;
            while (!closed) {
                try {
                    r.close();
                    closed = true;
                } catch (IllegalStateException inUse) {
                    assertNames(inUse, "in use");
                    assertFalse(r.isClosed());
                }
            }
            t.join();
            assertTrue(r.isClosed());
        }
    }
}
