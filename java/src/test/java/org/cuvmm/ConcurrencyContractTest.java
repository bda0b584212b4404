package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: close racing every kind of use from 8 threads; never a crash, never a leak. */
class ConcurrencyContractTest {
    static final int THREADS = 8;

    /** Runs op(thread, round) on THREADS threads; op returns derived objects to close. */
    interface Op { void run(int thread, VirtualMemoryBuffer b, List<AutoCloseable> made) throws Exception; }

    private static void race(VirtualMemoryResource r, int rounds, Op op) throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(THREADS);
        ConcurrentLinkedQueue<Throwable> unexpected = new ConcurrentLinkedQueue<>();
        ConcurrentLinkedQueue<AutoCloseable> made = new ConcurrentLinkedQueue<>();
        try {
            for (int round = 0; round < rounds; round++) {
                VirtualMemoryBuffer b = r.allocate(r.granularity() + 5);
                CyclicBarrier start = new CyclicBarrier(THREADS);
                List<Future<?>> fs = new ArrayList<>();
                for (int t = 0; t < THREADS; t++) {
                    final int thread = t;
                    fs.add(ex.submit(() -> {
                        try {
                            start.await();
                            if (thread == 0) {
                                for (int i = 0; i < 1000 && !b.isClosed(); i++) {
                                    try {
                                        b.close();
                                    } catch (IllegalStateException inUse) {
                                        if (!inUse.getMessage().contains("in use")) unexpected.add(inUse);
                                    }
                                }
                            } else {
                                for (int i = 0; i < 20; i++) {
                                    List<AutoCloseable> mine = new ArrayList<>();
                                    try {
                                        op.run(thread, b, mine);
                                    } catch (IllegalStateException closed) {
                                        if (!closed.getMessage().contains("closed")) unexpected.add(closed);
                                    } catch (Throwable other) {
                                        unexpected.add(other);
                                    }
                                    made.addAll(mine);
                                }
                            }
                        } catch (Throwable x) {
                            unexpected.add(x);
                        }
                        return null;
                    }));
                }
                for (Future<?> f : fs) f.get(60, TimeUnit.SECONDS);
                for (AutoCloseable c; (c = made.poll()) != null; ) c.close(); // leases first: they hold b
                b.close();
            }
        } finally {
            ex.shutdownNow();
            assertTrue(ex.awaitTermination(30, TimeUnit.SECONDS));
        }
        if (!unexpected.isEmpty()) {
            AssertionError e = new AssertionError(unexpected.size() + " unexpected throwables, first: " + unexpected.peek());
            for (Throwable t : unexpected) e.addSuppressed(t);
            throw e;
        }
    }

    @Test
    void closeRacingCopiesViewsExportsAndGrows() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        Map<String, String> fds = TestSupport.fdTargets();
        long maps = TestSupport.memfdMappings();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0);
             PinnedHostBuffer pinned = PinnedHostBuffer.allocate(4096);
             VirtualMemoryBuffer other = r.allocate(4096)) {
            race(r, 20, (t, b, made) -> {
                switch (t % 7) {
                    case 1: b.copyFrom(0, new byte[64], 0, 64); b.copyTo(new byte[64]); break;
                    case 2: made.add(b.exportDescriptor()); made.add(b.exportChunks(0)); break;
                    case 3: made.add(b.share(() -> { })); break;
                    case 4: made.add(r.modifyAllocation(b, 3 * r.granularity())); made.add(r.modifyAllocation(b, 1)); break;
                    case 5: b.copyFromAsync(0, pinned, 0, 64, s); b.fillAsync(64, 64, (byte) 1, s); b.recordUse(s); break;
                    case 6: other.copyFrom(0, b, 0, 64); b.copyFrom(100, other, 0, 64); made.add(b.lease("x")); break;
                    default: b.allocationIds(); b.access(0); b.chunkSize(0); b.mappedSize(); b.withAddress(a -> { }); break;
                }
            });
            s.synchronize();
        }
        LiveObjects.assertBack(before, "after the close race");
        TestSupport.assertNoNewFds(fds, "after the close race");
        assertEquals(maps, TestSupport.memfdMappings(), "memfd mappings after the close race");
    }

    @Test
    void closeRacingByteBufferViewsOfHostMemory() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = BufferContractTest.hostResource()) {
            race(r, 20, (t, b, made) -> {
                ByteBuffer v = b.asByteBuffer();
                v.put(0, (byte) t);
                b.copyFrom(1, ByteBuffer.allocateDirect(8));
                if (t % 2 == 0) b.closeWhenUnused();
            });
        }
        LiveObjects.awaitBackAfterViewsAreCollected(before);
    }

    @Test
    void poolCloseRacingAllocateAndBufferClose() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long g = r.granularity();
            for (int round = 0; round < 20; round++) {
                VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build();
                ExecutorService ex = Executors.newFixedThreadPool(THREADS);
                CyclicBarrier start = new CyclicBarrier(THREADS);
                ConcurrentLinkedQueue<Throwable> unexpected = new ConcurrentLinkedQueue<>();
                List<Future<?>> fs = new ArrayList<>();
                for (int t = 0; t < THREADS; t++) {
                    final int thread = t;
                    fs.add(ex.submit(() -> {
                        try {
                            start.await();
                            if (thread == 0) {
                                Thread.yield();
                                pool.close();
                                return null;
                            }
                            for (int i = 0; i < 30; i++) {
                                try {
                                    VirtualMemoryBuffer b = thread % 2 == 0 ? pool.allocate(g * (1 + i % 3))
                                            : pool.allocateExported(g);
                                    b.fill((byte) 1);
                                    if (i % 3 == 0) pool.trim();
                                    b.close();
                                } catch (IllegalStateException closed) {
                                    if (!closed.getMessage().contains("closed")) unexpected.add(closed);
                                }
                            }
                        } catch (Throwable x) {
                            unexpected.add(x);
                        }
                        return null;
                    }));
                }
                for (Future<?> f : fs) f.get(60, TimeUnit.SECONDS);
                ex.shutdown();
                pool.close();
                for (PoolLifetime l : PoolLifetime.values()) {
                    assertEquals(0, pool.stats(l).liveCount(), "live after all closed, " + l);
                    assertEquals(0, pool.stats(l).liveBytes(), "live bytes after all closed, " + l);
                    assertEquals(0, pool.stats(l).retainedCount(), "retained after pool close, " + l);
                }
                if (!unexpected.isEmpty()) throw new AssertionError("unexpected: " + unexpected);
            }
        }
        LiveObjects.assertBack(before, "after pool close races");
    }
}
