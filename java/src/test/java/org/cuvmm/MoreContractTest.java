package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: release notices, stream-ordered promises, closeWhenUnused inside a use, imports across devices. */
class MoreContractTest {
    private static void awaitIds(ConcurrentLinkedQueue<Long> heard, long... ids) throws InterruptedException {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (Arrays.stream(ids).allMatch(heard::contains)) return;
            Thread.sleep(5);
        }
        fail("ids " + Arrays.toString(ids) + " not heard; heard " + heard);
    }

    @Test
    void releaseNoticesHearEachReleaseOnceAndNotPoolReturns() throws Exception {
        ConcurrentLinkedQueue<Long> heard = new ConcurrentLinkedQueue<>();
        try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(heard::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(1);
            long id = b.allocationIds()[0];
            VirtualMemoryBuffer alias = r.modifyAllocation(b, 1);
            assertEquals(id, alias.allocationIds()[0], "same id in every buffer that maps it");
            b.close();
            Thread.sleep(50);
            assertFalse(heard.contains(id), "released while an alias maps it");
            alias.close();
            awaitIds(heard, id);
            try (VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
                VirtualMemoryBuffer p = pool.allocate(1);
                long pid = p.allocationIds()[0];
                p.close();
                VirtualMemoryBuffer again = pool.allocate(1);
                assertEquals(pid, again.allocationIds()[0], "the id stays across a pool's reuse");
                again.close();
                Thread.sleep(50);
                assertFalse(heard.contains(pid), "a return to the pool was reported as a release");
                pool.trim();
                awaitIds(heard, pid);
            }
            Thread.sleep(50);
            assertEquals(1, heard.stream().filter(x -> x == id).count(), "heard once");
            reg.close();
            reg.close();
            assertTrue(reg.isClosed());
            VirtualMemoryBuffer late = r.allocate(1);
            long lateId = late.allocationIds()[0];
            late.close();
            Thread.sleep(100);
            assertFalse(heard.contains(lateId), "heard after close of the registration");
        }
    }

    @Test
    void anAsyncArrayCopyMayReuseTheArrayAtOnce() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0);
             VirtualMemoryBuffer b = r.allocate(3 * MiB)) {
            CountDownLatch gate = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                try {
                    gate.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            byte[] src = new byte[(int) (3 * MiB)];
            Arrays.fill(src, (byte) 7);
            b.copyFromAsync(0, src, 0, src.length, s);
            Arrays.fill(src, (byte) 9);
            gate.countDown();
            s.synchronize();
            byte[] back = new byte[src.length];
            b.copyTo(back);
            for (int i = 0; i < back.length; i += 4096) assertEquals(7, back[i], "byte " + i);
            assertEquals(7, back[back.length - 1]);
        }
    }

    @Test
    void closeWaitsForRecordedStreamWork() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            CountDownLatch gate = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                try {
                    gate.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            b.fillAsync(0, MiB, (byte) 3, s);
            Thread closer = new Thread(b::close);
            closer.start();
            closer.join(300);
            assertTrue(closer.isAlive(), "close() returned before the recorded fill completed");
            gate.countDown();
            closer.join(10_000);
            assertFalse(closer.isAlive());
            assertTrue(b.isClosed());
            // close(stream) never blocks
            VirtualMemoryBuffer c = r.allocate(MiB);
            CountDownLatch gate2 = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                try {
                    gate2.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            c.fillAsync(0, MiB, (byte) 3, s);
            long t0 = System.nanoTime();
            c.close(s);
            assertTrue(System.nanoTime() - t0 < 2_000_000_000L, "close(stream) blocked");
            assertTrue(c.isClosed());
            assertThrows(IllegalStateException.class, c::address);
            gate2.countDown();
            s.synchronize();
            // closeWhenUnused never blocks either
            VirtualMemoryBuffer d = r.allocate(MiB);
            CountDownLatch gate3 = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                try {
                    gate3.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            d.fillAsync(0, MiB, (byte) 3, s);
            t0 = System.nanoTime();
            d.closeWhenUnused();
            assertTrue(System.nanoTime() - t0 < 2_000_000_000L, "closeWhenUnused blocked");
            gate3.countDown();
            s.synchronize();
        }
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!LiveObjects.above(before).isEmpty() && System.nanoTime() < deadline) Thread.sleep(10);
        LiveObjects.assertBack(before, "after stream-ordered closes");
    }

    @Test
    void closeWhenUnusedInsideOwnUseClosesWhenTheUseEnds() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            b.withAddress(a -> {
                b.closeWhenUnused();
                assertTrue(b.isClosePending());
                assertFalse(b.isClosed());
            });
            assertTrue(b.isClosed());
            assertFalse(b.isClosePending());
        }
    }

    @Test
    void importOfAnotherDevicesMemoryIsRefusedAndLeavesNothing() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        Map<String, String> fds = TestSupport.fdTargets();
        try (VirtualMemoryResource r1 = VirtualMemoryResource.create(1); VirtualMemoryResource r0 = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b1 = r1.allocate(1); BufferDescriptor d = b1.exportDescriptor()) {
            CudaException e = assertThrows(CudaException.class, () -> r0.importBuffer(d));
            assertNotNull(e.call());
            assertNotNull(e.resultName());
            assertTrue(e.getMessage().contains(e.resultName()), e.getMessage());
            try (VirtualMemoryBuffer ok = r1.importBuffer(d)) {
                assertTrue(ok.isImported());
            }
        }
        LiveObjects.assertBack(before, "after cross-device import");
        TestSupport.assertNoNewFds(fds, "after cross-device import");
    }

    @Test
    void anImportedAllocationHoldsOneFdUntilClosed() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            long memfdsBefore = TestSupport.memfdFds();
            VirtualMemoryBuffer imp;
            try (BufferDescriptor d = b.exportDescriptor()) {
                imp = r.importBuffer(d);
            }
            assertEquals(memfdsBefore + 1, TestSupport.memfdFds(), "one fd per imported allocation, descriptor closed");
            assertEquals(b.mappedSize(), imp.mappedSize(), "reserves exactly the descriptor's extent");
            imp.close();
            assertEquals(memfdsBefore, TestSupport.memfdFds());
        }
    }

}
