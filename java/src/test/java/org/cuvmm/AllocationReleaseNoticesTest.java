package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
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
            try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add)) {
                AllocationReleaseNotices.Registration closed = Driver.get().addAllocationReleaseListener(closedOnes::add);
                assertNotReleased(r, notices, "both registrations live");
                closedOnes.clear(); // it heard that release; from its close on it must hear nothing
                closed.close();
                closed.close(); // idempotent
                assertTrue(closed.isClosed());
                // The notice thread runs on for `reg`: a release now reaches `reg`, not `closed`.
                assertNotReleased(r, notices, "a release after the close, another listener still live");
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

    /**
     * The reviewer's sequence: A hears b1 and blocks in it; b2 is released (queued, not yet
     * delivered); B registers; A unblocks. B registered after b2's release: it must not hear
     * b2, but hears b3, released after it registered.
     */
    @Test
    void aRegistrationHearsNoReleaseQueuedBeforeIt() throws Exception {
        BlockingQueue<Long> heardByA = new LinkedBlockingQueue<>();
        BlockingQueue<Long> heardByB = new LinkedBlockingQueue<>();
        CountDownLatch inA = new CountDownLatch(1);
        CountDownLatch unblockA = new CountDownLatch(1);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b1 = r.allocate(2 * MiB);
            VirtualMemoryBuffer b2 = r.allocate(2 * MiB);
            long id1 = b1.allocationIds()[0], id2 = b2.allocationIds()[0];
            try (AllocationReleaseNotices.Registration a = Driver.get().addAllocationReleaseListener(id -> {
                if (id == id1) {
                    inA.countDown();
                    try {
                        unblockA.await(WAIT_SECONDS, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                heardByA.add(id);
            })) {
                b1.close();
                assertTrue(inA.await(WAIT_SECONDS, TimeUnit.SECONDS), "A was not told of b1");
                b2.close(); // queued while A is blocked: delivered after B registers
                try (AllocationReleaseNotices.Registration b = Driver.get().addAllocationReleaseListener(heardByB::add)) {
                    unblockA.countDown();
                    awaitNotice(heardByA, id2, "A registered before b2's release");
                    assertNotReleased(r, heardByB, "B registered after b2's release", id2, id1);
                }
            } finally {
                unblockA.countDown();
            }
        }
    }

    /** A start that fails registers nothing and leaves the queue off; the next registration works. */
    @Test
    void aNoticeThreadThatCannotStartRegistersNothing() throws Exception {
        awaitNoNoticeThread();
        java.util.function.Function<Runnable, Thread> factory = AllocationReleaseNotices.threadFactory;
        AllocationReleaseNotices.threadFactory = body -> {
            Thread started = new Thread(() -> { });
            started.start(); // a second start throws IllegalThreadStateException
            return started;
        };
        BlockingQueue<Long> lost = new LinkedBlockingQueue<>();
        try {
            assertThrows(IllegalThreadStateException.class, () -> Driver.get().addAllocationReleaseListener(lost::add));
        } finally {
            AllocationReleaseNotices.threadFactory = factory;
        }
        assertEquals(0, AllocationReleaseNotices.listenerCount(), "the failed registration was undone");
        assertFalse(AllocationReleaseNotices.delivering(), "no thread is believed to run");
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add)) {
            assertTrue(AllocationReleaseNotices.delivering(), "the next registration started a thread");
            assertNotReleased(r, notices, "a registration after a failed start");
        }
        assertTrue(lost.isEmpty(), "the failed registration heard " + lost);
    }

    /**
     * The notice thread dies (an Error outside any listener): after it had delivered, a new
     * thread takes over; one that dies before delivering anything turns the queue off until
     * the next registration, which turns it back on for every listener.
     */
    @Test
    void aDeadNoticeThreadIsReplacedOrTurnsTheQueueOff() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add)) {
            assertNotReleased(r, notices, "before the thread dies"); // it has delivered
            CountDownLatch died = new CountDownLatch(1);
            AllocationReleaseNotices.beforeTakeForTest = () -> {
                AllocationReleaseNotices.beforeTakeForTest = null; // once
                died.countDown();
                throw new OutOfMemoryError("test: the notice thread dies");
            };
            assertTrue(died.await(WAIT_SECONDS, TimeUnit.SECONDS), "the hook never ran");
            assertNotReleased(r, notices, "a new thread took over");

            // Dies every time: the replacement dies before delivering anything, the queue goes off.
            CountDownLatch diedTwice = new CountDownLatch(2);
            AllocationReleaseNotices.beforeTakeForTest = () -> {
                diedTwice.countDown();
                throw new OutOfMemoryError("test: the notice thread dies again");
            };
            assertTrue(diedTwice.await(WAIT_SECONDS, TimeUnit.SECONDS), "the replacement did not run");
            awaitNoNoticeThread();
            AllocationReleaseNotices.beforeTakeForTest = null;
            assertFalse(AllocationReleaseNotices.delivering(), "no replacement for a thread that delivered nothing");
            long unheard;
            try (VirtualMemoryBuffer b = r.allocate(2 * MiB)) {
                unheard = b.allocationIds()[0];
            }
            // The next registration turns the queue back on for both.
            BlockingQueue<Long> second = new LinkedBlockingQueue<>();
            try (AllocationReleaseNotices.Registration again = Driver.get().addAllocationReleaseListener(second::add)) {
                assertNotReleased(r, notices, "the earlier registration hears again", unheard);
                assertNotReleased(r, second, "the new registration hears", unheard);
            }
        } finally {
            AllocationReleaseNotices.beforeTakeForTest = null;
        }
    }

    /** A listener that always throws: its stack trace is logged once, each later throw in one line. */
    @Test
    void aListenerThatAlwaysThrowsLogsItsStackOnce() throws Exception {
        List<Throwable> thrown = new CopyOnWriteArrayList<>(); // per record: its throwable, or a marker
        Throwable none = new Throwable("no stack trace logged");
        System.Logger original = AllocationReleaseNotices.log;
        AllocationReleaseNotices.log = new System.Logger() {
            @Override public String getName() { return original.getName(); }
            @Override public boolean isLoggable(Level level) { return true; }
            @Override public void log(Level level, java.util.ResourceBundle bundle, String msg, Throwable t) {
                if (msg != null && msg.contains("test: always throws")) thrown.add(t == null ? none : t);
            }
            @Override public void log(Level level, java.util.ResourceBundle bundle, String format, Object... params) {
                if (format != null && format.contains("test: always throws")) thrown.add(none);
            }
        };
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             AllocationReleaseNotices.Registration bad = Driver.get().addAllocationReleaseListener(id -> {
                 throw new IllegalStateException("test: always throws");
             });
             AllocationReleaseNotices.Registration good = Driver.get().addAllocationReleaseListener(notices::add)) {
            for (int i = 0; i < 3; i++) assertNotReleased(r, notices, "release " + i);
        } finally {
            AllocationReleaseNotices.log = original;
        }
        assertTrue(thrown.size() >= 3, "one record per throw: " + thrown.size());
        assertTrue(thrown.get(0) != none, "the first throw is logged with its stack trace");
        for (int i = 1; i < thrown.size(); i++) {
            assertTrue(thrown.get(i) == none, "throw " + (i + 1) + " is logged in one line, without a stack trace");
        }
    }

    /** Waits (bounded) until no notice thread runs (an earlier test's may still be ending). */
    private static void awaitNoNoticeThread() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_SECONDS);
        for (Thread notice = noticeThread(); notice != null; notice = noticeThread()) {
            long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            assertTrue(left > 0, "the notice thread still runs: " + notice);
            notice.join(left);
        }
    }

    private static Thread noticeThread() {
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().equals(AllocationReleaseNotices.THREAD_NAME)) return t;
        }
        return null;
    }
}
