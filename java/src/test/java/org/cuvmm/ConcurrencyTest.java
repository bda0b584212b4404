package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** 8 threads share a table of buffers and allocate, grow, copy and close at random. */
class ConcurrencyTest {
    private static final int THREADS = 8;
    private static final int SLOTS = 16;
    private static final int OPS = 400;

    @Test
    void randomAllocateGrowCopyCloseLeavesNothingBehind() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        java.util.Map<String, String> fdsBefore = TestSupport.fdTargets();
        ExecutorService pool = Executors.newFixedThreadPool(THREADS);
        ConcurrentLinkedQueue<Throwable> unexpected = new ConcurrentLinkedQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            AtomicReferenceArray<VirtualMemoryBuffer> slots = new AtomicReferenceArray<>(SLOTS);
            List<Future<?>> futures = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                final int seed = t;
                futures.add(pool.submit(() -> {
                    SplittableRandom rnd = new SplittableRandom(seed);
                    byte[] scratch = new byte[8192];
                    for (int i = 0; i < OPS; i++) {
                        int slot = rnd.nextInt(SLOTS);
                        VirtualMemoryBuffer b = slots.get(slot);
                        try {
                            switch (rnd.nextInt(5)) {
                                case 0: { // allocate into an empty slot
                                    VirtualMemoryBuffer n = r.allocate(1 + rnd.nextInt((int) (3 * MiB)));
                                    if (!slots.compareAndSet(slot, null, n)) n.close();
                                    break;
                                }
                                case 1: { // grow and replace
                                    if (b == null) break;
                                    VirtualMemoryBuffer g = r.modifyAllocation(b, b.size() + rnd.nextInt((int) (4 * MiB)));
                                    if (slots.compareAndSet(slot, b, g)) closeQuietly(b); else g.close();
                                    break;
                                }
                                case 2: // write then read back within one buffer
                                case 3: {
                                    if (b == null || b.size() < scratch.length) break;
                                    long off = rnd.nextLong(b.size() - scratch.length + 1);
                                    rnd.nextBytes(scratch);
                                    b.copyFrom(off, scratch, 0, scratch.length);
                                    b.copyTo(off, new byte[scratch.length], 0, scratch.length);
                                    break;
                                }
                                default: { // close and clear
                                    if (b != null && slots.compareAndSet(slot, b, null)) closeQuietly(b);
                                }
                            }
                        } catch (IllegalStateException expectedRace) {
                            // another thread closed or is closing this buffer: the documented outcome
                            String m = String.valueOf(expectedRace.getMessage());
                            if (!m.contains("closed") && !m.contains("in use")) unexpected.add(expectedRace);
                        } catch (Throwable t2) {
                            unexpected.add(t2);
                        }
                    }
                }));
            }
            for (Future<?> f : futures) f.get(120, TimeUnit.SECONDS);
            for (int i = 0; i < SLOTS; i++) {
                VirtualMemoryBuffer b = slots.getAndSet(i, null);
                if (b != null) closeUntilDone(b);
            }
        } finally {
            pool.shutdownNow();
        }
        assertTrue(unexpected.isEmpty(), () -> "unexpected failures: " + unexpected);
        LiveObjects.assertBack(before, "after the random run");
        TestSupport.assertNoNewFds(fdsBefore, "after the random run");
    }

    /** A close refused because another thread is still inside a call is retried. */
    private static void closeQuietly(VirtualMemoryBuffer b) {
        closeUntilDone(b);
    }

    private static void closeUntilDone(VirtualMemoryBuffer b) {
        for (;;) {
            try {
                b.close();
                return;
            } catch (IllegalStateException inUse) {
                Thread.onSpinWait();
            }
        }
    }

    @Test
    void dataWrittenByOneThreadIsSeenByAnother() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            byte[] data = org.cuvmm.testing.TestData.pattern(4096, 9);
            Thread w = new Thread(() -> b.copyFrom(0, data, 0, data.length));
            w.start();
            w.join();
            byte[] back = new byte[data.length];
            b.copyTo(0, back, 0, back.length);
            assertArrayEquals(data, back);
        }
    }
}
