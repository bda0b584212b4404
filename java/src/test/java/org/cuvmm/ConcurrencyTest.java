package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
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

    /**
     * A copy is complete, for every thread, when it returns. A reader that learns of a write
     * only from the buffer's own memory (a flag byte that the writer's <em>next</em>
     * {@code copyFrom} sets) must then read every byte of the earlier {@code copyFrom}.
     * Between the two threads there is no join, latch, lock or volatile: each learns of the
     * other's progress only by polling bytes of the buffer (the writer waits for an ack byte
     * before the next round). So the only ordering is cuvmm's own: a copy returns after the
     * driver finished it (the stream is synchronized), and the flag copy starts after the
     * data copy returned. It fails if a copy could return before its bytes land, or if two
     * copies could become visible out of order. (Before issue 8 this test joined the writer
     * thread, which orders everything by itself, so it could not fail.)
     */
    @Test
    void aCopyIsCompleteForEveryThreadWhenItReturns() throws Exception {
        final int data = (int) (4 * MiB);
        final int flag = data;       // the round whose data is complete, set by the writer
        final int ack = data + 1;    // the round the reader has checked, set by the reader
        final int rounds = 20;
        ExecutorService two = Executors.newFixedThreadPool(2);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(data + 2)) {
            b.fill(flag, 2, (byte) 0); // before the threads start (starting them orders this)
            Future<?> writer = two.submit(() -> {
                for (int round = 1; round <= rounds; round++) {
                    awaitByte(b, ack, round - 1, "writer: the reader's ack of round " + (round - 1));
                    b.copyFrom(0, org.cuvmm.testing.TestData.pattern(data, round), 0, data);
                    b.copyFrom(flag, new byte[] {(byte) round}, 0, 1);
                }
                return null;
            });
            Future<?> reader = two.submit(() -> {
                byte[] seen = new byte[data];
                for (int round = 1; round <= rounds; round++) {
                    awaitByte(b, flag, round, "reader: the flag of round " + round);
                    b.copyTo(0, seen, 0, data);
                    byte[] want = org.cuvmm.testing.TestData.pattern(data, round);
                    int at = java.util.Arrays.mismatch(want, seen);
                    if (at >= 0) {
                        throw new AssertionError("round " + round + ": the flag was visible but byte " + at + " of the "
                                + "data copied before it was not (0x" + Integer.toHexString(seen[at] & 0xFF)
                                + ", expected 0x" + Integer.toHexString(want[at] & 0xFF) + ")");
                    }
                    b.copyFrom(ack, new byte[] {(byte) round}, 0, 1);
                }
                return null;
            });
            reader.get(120, TimeUnit.SECONDS); // the reader's own check is the assertion
            writer.get(120, TimeUnit.SECONDS);
        } finally {
            two.shutdownNow();
        }
    }

    /** Polls byte {@code at} of {@code b} (through cuvmm copies only) until it is {@code value}; bounded. */
    private static void awaitByte(VirtualMemoryBuffer b, long at, int value, String what) {
        byte[] one = new byte[1];
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        do {
            b.copyTo(at, one, 0, 1);
            if (one[0] == (byte) value) return;
            Thread.onSpinWait();
        } while (System.nanoTime() < deadline);
        throw new AssertionError(what + ": byte " + at + " is still " + one[0] + " after 60 s (expected: " + value + ")");
    }
}
