package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.ref.Reference;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

import org.cuvmm.LeakDetection;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A pooled buffer never closed comes back through the pool's accounting, whether or not it
 * was sampled to record its allocation site (leakSampleRate 1: every buffer; 0: none): it is
 * warned and counted, a local one is kept for reuse, an exported one is released. No thread
 * does it: the pool takes leaks back on its slow paths (here {@code stats} and a miss).
 */
class PoolLeakTest {
    @ParameterizedTest(name = "leakSampleRate {0}")
    @ValueSource(ints = {1, 0})
    void leakedLocalBufferIsReportedAndReusedLeakedExportedIsReleased(int leakSampleRate) throws Exception {
        Map<String, Long> liveBefore = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(leakSampleRate)
                     .build()) {
            long g = resource.granularity();
            long reports = LeakDetection.reportedLeaks();
            VirtualMemoryBuffer leakedLocal = leak(pool, false);
            VirtualMemoryBuffer leakedExported = leak(pool, true);
            assertStats(pool.stats(PoolLifetime.LOCAL), 1, g, 0, 0, "while the local buffer is leaked");
            // Still reachable up to here, so no collection can take it back before the check above.
            Reference.reachabilityFence(leakedLocal);
            Reference.reachabilityFence(leakedExported);
            leakedLocal = null;
            leakedExported = null;
            awaitLeaks(pool, 1, 1);

            assertTrue(LeakDetection.reportedLeaks() >= reports + 2, "both leaks reported with the core's warning");
            PoolStats local = pool.stats(PoolLifetime.LOCAL);
            assertStats(local, 0, 0, 1, g, "a leaked local buffer comes back for reuse");
            assertEquals(1, local.leaks());
            assertEquals(g, local.peakLiveBytes());
            PoolStats exported = pool.stats(PoolLifetime.EXPORTED);
            assertStats(exported, 0, 0, 0, 0, "a leaked exported buffer is released: a lost lease may still map it");
            assertEquals(1, exported.leaks());

            // The slot really came back: the next allocation of its class reuses it, the peak stays.
            long misses = local.misses();
            try (VirtualMemoryBuffer again = pool.allocate(1)) {
                assertEquals(misses, pool.stats(PoolLifetime.LOCAL).misses(), "the leaked slot is reused");
                assertStats(pool.stats(PoolLifetime.LOCAL), 1, g, 0, 0, "reusing the leaked slot");
            }
            assertEquals(g, pool.stats(PoolLifetime.LOCAL).peakLiveBytes(), "peak after reuse");
        }
        LiveObjects.assertBack(liveBefore, "after the pool closed");
    }

    /**
     * A buffer closed in time is never reported, even once it is collected: {@value #HELD}
     * buffers live at once (so {@value #HELD} slots, each of which would keep a stale watch if
     * close did not drop it), all closed, then collected; then a marker leaks in the other
     * lifetime. Only the marker is reported.
     */
    @ParameterizedTest(name = "leakSampleRate {0}")
    @ValueSource(ints = {1, 0})
    void closedBuffersAreNeverReportedAsLeaks(int leakSampleRate) throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(leakSampleRate)
                     .build()) {
            long reports = LeakDetection.reportedLeaks();
            List<WeakReference<VirtualMemoryBuffer>> closed = allocateHeldAndClose(pool);
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, HELD, HELD * resource.granularity(), "after the close");
            // Collect the closed buffers first: any watch they left behind is enqueued before the marker's.
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (closed.stream().anyMatch(r -> !r.refersTo(null)) && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
            }
            assertTrue(closed.stream().allMatch(r -> r.refersTo(null)), "the closed buffers were collected");

            Reference.reachabilityFence(leak(pool, true)); // the marker, in the other lifetime
            awaitLeaks(pool, 0, 1); // stats drains the whole queue: watches enqueued before the marker's too

            assertEquals(reports + 1, LeakDetection.reportedLeaks(), "only the marker was reported");
            assertEquals(0, pool.stats(PoolLifetime.LOCAL).leaks(), "no closed local buffer counted as a leak");
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, HELD, HELD * resource.granularity(),
                    "after the marker came back");
        }
    }

    private static final int HELD = 16;

    /** {@value #HELD} buffers live at once, then all closed; weak references to them. */
    private static List<WeakReference<VirtualMemoryBuffer>> allocateHeldAndClose(VirtualMemoryPool pool) {
        List<VirtualMemoryBuffer> held = new ArrayList<>();
        for (int i = 0; i < HELD; i++) held.add(pool.allocate(1));
        List<WeakReference<VirtualMemoryBuffer>> refs = new ArrayList<>();
        for (VirtualMemoryBuffer b : held) {
            refs.add(new WeakReference<>(b));
            b.close();
        }
        return refs;
    }

    /**
     * A leak comes back at the pool's next miss, with no thread of the pool's own: the miss
     * takes the leaked slot back and reuses it instead of making new memory.
     */
    @org.junit.jupiter.api.Test
    void leakComesBackAtTheNextMissWithNoThreadOfItsOwn() throws Exception {
        Set<Thread> threadsBefore = Thread.getAllStackTraces().keySet();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("next-miss").leakSampleRate(0)
                     .build()) {
            LifetimePool local = pool.of(PoolLifetime.LOCAL);
            PoolTestSupport.leakOneAndAwaitItsWatch(pool);
            assertEquals(0, local.leaks(), "nothing takes a leak back before the pool's next slow path");

            try (VirtualMemoryBuffer again = pool.allocate(1)) { // no idle slot: the miss path drains the queue
                assertEquals(1, local.leaks(), "the miss took the leak back");
                assertEquals(1, local.misses(), "and reused its slot instead of making new memory");
                assertEquals(1, local.liveCount());
            }
        }
        // An open pool starts no thread, and this one closed with nothing live, so it started
        // none either. (Another test's pool closed while its buffers were live may run its own
        // "cuvmm-pool-leaks <name>" thread meanwhile: not this pool's.)
        Set<String> poolThreads = Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.getName().endsWith(" next-miss") || !threadsBefore.contains(t)
                        && t.getName().startsWith("cuvmm") && !t.getName().startsWith("cuvmm-pool-leaks "))
                .map(Thread::getName).collect(Collectors.toSet());
        assertEquals(Set.of(), poolThreads, "threads the pool started");
    }

    /**
     * A buffer still live when its pool closes, then leaked: its memory is released with no
     * call on the pool after the close (it waited for a stats() call before: found by an
     * independent probe). The closed pool's leak thread takes it back and ends.
     */
    @Test
    void aBufferLeakedAfterItsPoolClosedIsReleasedWithNoFurtherPoolCall() throws Exception {
        Map<String, Long> liveBefore = LiveObjects.now();
        long reports = LeakDetection.reportedLeaks();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("leaked-after-close").build();
            VirtualMemoryBuffer local = leak(pool, false);
            VirtualMemoryBuffer exported = leak(pool, true);
            pool.close(); // both still live: released when closed, or when found leaked
            Reference.reachabilityFence(local);
            Reference.reachabilityFence(exported);
            local = null;
            exported = null;
            awaitTakenBackByTheLeakThread(liveBefore, reports + 2, "cuvmm-pool-leaks leaked-after-close",
                    "two buffers leaked after their pool closed, no pool call since");
            assertEquals(2, pool.stats(PoolLifetime.LOCAL).leaks() + pool.stats(PoolLifetime.EXPORTED).leaks());
        }
    }

    /**
     * A pool closed while a buffer is live runs its leak thread only until that buffer is
     * closed: a check of the process's threads soon after sees it gone.
     */
    @Test
    void aClosedPoolsLeakThreadEndsOnceItsLastBufferIsClosed() throws Exception {
        String thread = "cuvmm-pool-leaks closed-then-freed";
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("closed-then-freed").build();
            VirtualMemoryBuffer live = pool.allocate(1);
            pool.close();
            assertTrue(Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals(thread)),
                    "closed with a live buffer: the pool watches it");
            live.close();
            long until = System.nanoTime() + 10_000_000_000L;
            while (Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals(thread))) {
                assertTrue(System.nanoTime() < until, "the leak thread ended after the last live buffer closed");
                Thread.sleep(10);
            }
            assertEquals(0, pool.stats(PoolLifetime.LOCAL).liveCount());
        }
    }

    /**
     * A close that runs while an allocation is inside the pool (its memory made, not yet
     * counted live) sees no live buffer; the allocation then returns a live buffer of a closed
     * pool. Leaked, it is still taken back with no further pool call: the allocation starts
     * the leak thread the close did not (an independent probe saw it kept until a stats()
     * call, 3 runs in 3).
     */
    @Test
    void aBufferAllocatedWhileItsPoolClosedIsStillWatchedForLeaks() throws Exception {
        String thread = "cuvmm-pool-leaks closed-mid-allocate";
        Map<String, Long> liveBefore = LiveObjects.now();
        long reports = LeakDetection.reportedLeaks();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("closed-mid-allocate").build();
            VirtualMemoryBuffer b;
            LifetimePool.beforeCountedLive = () -> {
                LifetimePool.beforeCountedLive = null;
                pool.close(); // nothing live yet: no leak thread from the close
                assertTrue(Thread.getAllStackTraces().keySet().stream().noneMatch(t -> t.getName().equals(thread)),
                        "the close saw no live buffer");
            };
            try {
                b = pool.allocate(1);
            } finally {
                LifetimePool.beforeCountedLive = null;
            }
            assertTrue(pool.isClosed());
            assertEquals(1, pool.stats(PoolLifetime.LOCAL).liveCount(), "a live buffer of a closed pool");
            assertTrue(Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals(thread)),
                    "the allocation that went live after the close started the leak thread");
            b.fill((byte) 1);
            Reference.reachabilityFence(b);
            b = null;
            awaitTakenBackByTheLeakThread(liveBefore, reports + 1, thread,
                    "a buffer leaked after its pool closed mid-allocation, no pool call since");
        }
    }

    /**
     * Collects garbage until the native objects are back to {@code liveBefore} (at most 20 s),
     * checks the core warned at least up to {@code reportsAtLeast}, then waits (at most 10 s)
     * for the closed pool's leak thread {@code thread} to end, nothing being live.
     */
    private static void awaitTakenBackByTheLeakThread(Map<String, Long> liveBefore, long reportsAtLeast, String thread,
            String what) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (!LiveObjects.now().equals(liveBefore) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        LiveObjects.assertBack(liveBefore, what);
        assertTrue(LeakDetection.reportedLeaks() >= reportsAtLeast, "reported with the core's warning: " + what);
        long until = System.nanoTime() + 10_000_000_000L;
        while (Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals(thread))) {
            assertTrue(System.nanoTime() < until, "the closed pool's leak thread ended once nothing was live: " + what);
            Thread.sleep(10);
        }
    }

    /** A buffer, written to and never closed; the caller drops it. */
    private static VirtualMemoryBuffer leak(VirtualMemoryPool pool, boolean exported) {
        VirtualMemoryBuffer b = exported ? pool.allocateExported(1) : pool.allocate(1);
        b.fill((byte) 1);
        return b;
    }

    /** Collects garbage until the pool has counted the leaks (at most 20 s, then fails with the stats). */
    private static void awaitLeaks(VirtualMemoryPool pool, long local, long exported) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while ((pool.stats(PoolLifetime.LOCAL).leaks() < local || pool.stats(PoolLifetime.EXPORTED).leaks() < exported)
                && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        assertEquals(local, pool.stats(PoolLifetime.LOCAL).leaks(),
                "local leaks counted: " + pool.stats(PoolLifetime.LOCAL));
        assertEquals(exported, pool.stats(PoolLifetime.EXPORTED).leaks(),
                "exported leaks counted: " + pool.stats(PoolLifetime.EXPORTED));
    }

    /**
     * With allocation sites captured but the buffer not sampled (leakSampleRate 0), the report
     * says why no site is shown instead of telling the user to set the property already set
     * (an independent probe).
     */
    @Test
    void anUnsampledLeakWithCaptureOnSaysWhyNoSiteIsShown() throws Exception {
        String before = System.getProperty(LeakDetection.CAPTURE_PROPERTY);
        System.setProperty(LeakDetection.CAPTURE_PROPERTY, "true");
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("unsampled").leakSampleRate(0)
                     .build()) {
            long reports = LeakDetection.reportedLeaks();
            PoolTestSupport.leakOneAndAwaitItsWatch(pool);
            assertEquals(1, pool.stats(PoolLifetime.LOCAL).leaks(), "stats() took the leak back");
            assertEquals(reports + 1, LeakDetection.reportedLeaks());
            String report = LeakDetection.lastReport();
            assertTrue(report.contains("Its allocation site was not recorded although -D" + LeakDetection.CAPTURE_PROPERTY
                    + " is true"), report);
            assertTrue(report.contains("leakSampleRate(1)"), report);
            assertTrue(report.contains(" of pool unsampled (local) was never closed"), "the report names the pool: " + report);
        } finally {
            if (before == null) System.clearProperty(LeakDetection.CAPTURE_PROPERTY);
            else System.setProperty(LeakDetection.CAPTURE_PROPERTY, before);
        }
    }
}
