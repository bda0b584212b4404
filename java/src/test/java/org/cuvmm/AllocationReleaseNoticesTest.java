package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.Test;

/**
 * {@link Driver#addAllocationReleaseListener}: a listener hears the id of every allocation
 * really released (close, last alias, trim, eviction, pool close, import unmapped), never a
 * pool return, on the notice thread, in release order; a throwing listener breaks nothing.
 *
 * <p>"Not reported" is checked with a sentinel: an allocation released <em>after</em> the one
 * in question; notices come in release order, so if the sentinel's comes first, the other was
 * not released. Notices of allocations a test did not make (an earlier test's leak, released
 * by the cleaner meanwhile) are skipped.
 */
class AllocationReleaseNoticesTest {
    private static final long WAIT_SECONDS = 30;

    /**
     * Waits (bounded) for the notice of {@code expected}, skipping others; fails if one of
     * {@code forbidden} comes first.
     */
    private static void awaitNotice(BlockingQueue<Long> notices, long expected, String what, long... forbidden)
            throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_SECONDS);
        for (;;) {
            Long id = notices.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            assertNotNull(id, "no release notice of allocation " + expected + " (" + what + ") within " + WAIT_SECONDS + " s");
            if (id == expected) return;
            for (long f : forbidden) {
                if (id == f) throw new AssertionError(what + ": allocation " + f + " was reported released");
            }
        }
    }

    /** Releases a fresh allocation and checks that none of {@code ids} is reported before it. */
    private static void assertNotReleased(VirtualMemoryResource r, BlockingQueue<Long> notices, String what, long... ids)
            throws InterruptedException {
        long sentinel;
        try (VirtualMemoryBuffer b = r.allocate(2 * MiB)) {
            sentinel = b.allocationIds()[0];
        }
        awaitNotice(notices, sentinel, what, ids);
    }

    @Test
    void closeOfTheLastHolderReportsOnTheNoticeThread() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        Thread[] ranOn = new Thread[1];
        try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(id -> {
                 ranOn[0] = Thread.currentThread();
                 notices.add(id);
             });
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(4 * MiB);
            long id = b.allocationIds()[0];
            VirtualMemoryBuffer alias = r.modifyAllocation(b, MiB);
            b.close();
            assertNotReleased(r, notices, "the alias still maps the allocation", id);
            alias.close();
            awaitNotice(notices, id, "the last alias's close");
            assertEquals(AllocationReleaseNotices.THREAD_NAME, ranOn[0].getName());
        }
    }

    @Test
    void aPoolReturnIsNotAReleaseButTrimEvictionAndCloseAre() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build();
            try {
                VirtualMemoryBuffer b = pool.allocateExported(2 * MiB);
                long trimmed = b.allocationIds()[0];
                b.close();
                assertNotReleased(r, notices, "a pool return releases nothing", trimmed);
                pool.trim();
                awaitNotice(notices, trimmed, "trim");

                VirtualMemoryBuffer kept = pool.allocate(2 * MiB);
                long closedWithPool = kept.allocationIds()[0];
                kept.close();
                VirtualMemoryBuffer evicted = pool.allocate(6 * MiB);
                long evictedId = evicted.allocationIds()[0];
                pool.setRetentionCap(PoolLifetime.LOCAL, 2 * MiB); // 6 MiB can never be retained
                evicted.close();
                awaitNotice(notices, evictedId, "eviction", closedWithPool);
                assertNotReleased(r, notices, "the 2 MiB slot is retained", closedWithPool);
                pool.close();
                awaitNotice(notices, closedWithPool, "pool close");
            } finally {
                pool.close();
            }
        }
    }

    @Test
    void anImportReportsItsOwnAllocationWhenUnmapped() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB)) {
            long importedId;
            try (BufferDescriptor d = src.exportDescriptor(); VirtualMemoryBuffer imported = r.importBuffer(d)) {
                importedId = imported.allocationIds()[0];
            }
            awaitNotice(notices, importedId, "the import's close", src.allocationIds()[0]);
        }
    }

    @Test
    void aStreamOrderedCloseReportsOnceTheReaperReleased() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream stream = Stream.create(0)) {
            VirtualMemoryBuffer b = r.allocate(2 * MiB);
            long id = b.allocationIds()[0];
            java.util.concurrent.CountDownLatch gate = StreamTestSupport.gate(stream);
            b.fillAsync(0, 2 * MiB, (byte) 1, stream);
            b.close(stream);
            assertNotReleased(r, notices, "the stream has not passed the close", id);
            gate.countDown();
            awaitNotice(notices, id, "close(stream), released by cuvmm's reaper");
        }
    }

    @Test
    void aThrowingListenerIsLoggedAndOthersStillHear() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration bad = Driver.get().addAllocationReleaseListener(id -> {
                 throw new IllegalStateException("test: a failing release listener");
             });
             AllocationReleaseNotices.Registration good = Driver.get().addAllocationReleaseListener(notices::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(2 * MiB);
            long id = b.allocationIds()[0];
            b.close();
            assertTrue(b.isClosed());
            awaitNotice(notices, id, "close, with a throwing listener registered first");
            assertNotReleased(r, notices, "delivery goes on after a throw");
        }
    }

    @Test
    void aClosedRegistrationHearsNothingAndTheThreadEndsWithTheLast() throws Exception {
        BlockingQueue<Long> closedOnes = new LinkedBlockingQueue<>();
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            AllocationReleaseNotices.Registration closed = Driver.get().addAllocationReleaseListener(closedOnes::add);
            closed.close();
            closed.close(); // idempotent
            assertTrue(closed.isClosed());
            try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add)) {
                assertNotReleased(r, notices, "a fresh registration hears releases");
            }
            assertTrue(closedOnes.isEmpty(), "a closed registration heard " + closedOnes);
            Thread notice = noticeThread();
            if (notice != null) notice.join(TimeUnit.SECONDS.toMillis(WAIT_SECONDS));
            assertFalse(notice != null && notice.isAlive(), "the notice thread still runs with no listener");
            // Registering again after the thread ended turns the queue back on.
            try (AllocationReleaseNotices.Registration again = Driver.get().addAllocationReleaseListener(notices::add)) {
                assertNotReleased(r, notices, "a registration after the thread ended");
            }
        }
    }

    private static Thread noticeThread() {
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().equals(AllocationReleaseNotices.THREAD_NAME)) return t;
        }
        return null;
    }
}
