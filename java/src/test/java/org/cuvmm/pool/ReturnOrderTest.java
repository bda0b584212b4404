package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * The order of a pooled buffer's return: once the live count reads the buffer as gone, its
 * memory is where {@link VirtualMemoryPool#trim(PoolLifetime)} finds it. A thread that watches
 * the accounting (stats, the bean's {@code Count}) and trims once nothing is live must not
 * miss memory a close is still handing back.
 */
class ReturnOrderTest {
    /** What the watching thread read, and what its trim released (-1: it did not trim). */
    private record Seen(long liveCount, long retainedCount, long trimmed) {}

    /**
     * At the seam right after the closed buffer's live count dropped, another thread reads the
     * accounting and, as a monitor waiting for the last buffer would, trims when it reads
     * nothing live. The closing thread goes on only once that thread has read, and has either
     * finished its trim or is waiting for a free list's lock (the return holds it until the
     * memory is linked), so the outcome does not depend on timing. Failed on the old order
     * (the count dropped before the memory was pushed: the trim released 0 bytes, and the
     * memory stayed retained after it).
     */
    @Test
    void aBufferReadAsNoLongerLiveIsFoundByTheNextTrim() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("return-order").build()) {
            VirtualMemoryBuffer b = pool.allocate(1);
            long capacity = b.mappedSize();
            int sizeIdx = pool.sizeClasses().sizeIdx(1);
            AtomicReference<Seen> seen = new AtomicReference<>();
            AtomicReference<Throwable> failed = new AtomicReference<>();
            AtomicReference<Thread> watcherRef = new AtomicReference<>();
            Thread closing = Thread.currentThread();
            LifetimePool.afterLiveCountDroppedForTest = () -> {
                // Only this test's close: a return on another thread (a background release of
                // an earlier test's buffer) must neither take nor clear the seam.
                if (Thread.currentThread() != closing) return;
                LifetimePool.afterLiveCountDroppedForTest = null;
                CountDownLatch read = new CountDownLatch(1);
                Thread watcher = new Thread(() -> {
                    try {
                        PoolStats s = pool.stats(PoolLifetime.LOCAL);
                        read.countDown();
                        long trimmed = s.liveCount() == 0 ? pool.trim(PoolLifetime.LOCAL) : -1;
                        seen.set(new Seen(s.liveCount(), s.retainedCount(), trimmed));
                    } catch (Throwable t) {
                        failed.set(t);
                    } finally {
                        read.countDown();
                    }
                }, "return-order watcher");
                watcherRef.set(watcher);
                watcher.start();
                try {
                    if (!read.await(30, TimeUnit.SECONDS)) throw new IllegalStateException("the watcher did not read");
                    long deadline = System.nanoTime() + 30_000_000_000L;
                    while (watcher.isAlive() && !waitsForAStripeLock(watcher)) {
                        if (System.nanoTime() > deadline) throw new IllegalStateException("the watcher neither ended "
                                + "nor waits for a free list's lock: " + Arrays.toString(watcher.getStackTrace()));
                        Thread.sleep(1);
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException(e);
                }
            };
            try {
                b.close();
            } finally {
                LifetimePool.afterLiveCountDroppedForTest = null;
            }
            Thread watcher = watcherRef.get();
            assertNotNull(watcher, "the seam ran");
            watcher.join(30_000);
            assertTrue(!watcher.isAlive(), "the watcher ended");
            if (failed.get() != null) throw new AssertionError("the watcher failed", failed.get());
            Seen s = seen.get();
            assertEquals(0, s.liveCount(), "the seam runs after the live count dropped: " + s);
            assertEquals(1, s.retainedCount(), "read as retained: " + s);
            PoolStats after = pool.stats(PoolLifetime.LOCAL);
            assertEquals(capacity, s.trimmed(), "a trim after the buffer read as no longer live (" + s
                    + ") released it; afterwards: retained " + after.retainedCount() + " (" + after.retainedBytes()
                    + " bytes)");
            assertStats(after, 0, 0, 0, 0, "after the close and the trim");
            assertTrue(pool.of(PoolLifetime.LOCAL).idleSlots(sizeIdx).isEmpty(), "nothing idle is left");
        }
    }

    /** {@code t} is inside a free list's lock acquisition (spinning, yielding or parked). */
    private static boolean waitsForAStripeLock(Thread t) {
        for (StackTraceElement f : t.getStackTrace()) {
            if (f.getClassName().equals(FreeListStripeFields.class.getName()) && f.getMethodName().equals("lockContended")) {
                return true;
            }
        }
        return false;
    }
}
