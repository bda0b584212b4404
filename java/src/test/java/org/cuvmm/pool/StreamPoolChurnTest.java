package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.gate;
import org.junit.jupiter.api.BeforeEach;
import static org.junit.jupiter.api.Assumptions.assumeTrue;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.cuvmm.PinnedHostBuffer;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.HostDriverHooks;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Probes: stream-ordered pool frees racing trims, caps, pool close and stream work. */
class StreamPoolChurnTest {
    @BeforeEach
    void hostDriverOnly() { assumeTrue(PoolTestSupport.onHostDriver(), "host driver only: the test paces its streams with the host driver's stream delay (HostDriverHooks)"); }

    @AfterEach
    void resetDelay() { if (PoolTestSupport.onHostDriver()) HostDriverHooks.setStreamDelayMicros(0); }

    /**
     * Four threads, each with its own stream, allocate in stream order, fill asynchronously
     * with their own tag and check it through a pinned copy, and free in stream order on
     * their own or a neighbour's stream; a fifth trims and changes caps. Streams lag (stream
     * delay). A reuse not ordered after the previous owner's fill shows as a wrong byte.
     */
    @Test
    @Timeout(120)
    void crossStreamReuseKeepsOrderUnderTrimAndCaps() throws Exception {
        Map<String, Long> live = LiveObjects.now();
        Map<String, String> fds = OpenFds.byNumber();
        ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
        int threads = 4;
        ExecutorService ex = Executors.newFixedThreadPool(threads + 1);
        HostDriverHooks.setStreamDelayMicros(200);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            Stream[] streams = new Stream[threads];
            for (int i = 0; i < threads; i++) streams[i] = Stream.create(0);
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).retentionCap(PoolLifetime.LOCAL, 6 * g).build();
            AtomicBoolean stop = new AtomicBoolean();
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int me = t;
                fs.add(ex.submit(() -> {
                    SplittableRandom rnd = new SplittableRandom(me);
                    try (PinnedHostBuffer pin = PinnedHostBuffer.allocate(4096)) {
                        for (int i = 0; i < 300; i++) {
                            Stream s = streams[me];
                            long size = (1 + rnd.nextInt(3)) * g - rnd.nextInt(100);
                            VirtualMemoryBuffer b = rnd.nextInt(4) == 0 ? pool.allocate(size) : pool.allocate(size, s);
                            byte tag = (byte) (me * 64 + (i % 60) + 1);
                            b.fillAsync(0, b.size(), tag, s);
                            b.copyToAsync(0, pin, 0, 4096, s);
                            s.synchronize();
                            ByteBuffer v = pin.asByteBuffer();
                            for (int k = 0; k < 4096; k += 97) {
                                if (v.get(k) != tag) throw new AssertionError("thread " + me + " iter " + i + ": byte " + k + " = "
                                        + v.get(k) + ", expected " + tag);
                            }
                            // queue a late overwrite on our stream, then free on a random stream
                            b.fillAsync(0, b.size(), (byte) -1, s);
                            int how = rnd.nextInt(3);
                            if (how == 0) b.close(s);
                            else if (how == 1) b.close(streams[(me + 1) % threads]);
                            else b.close();
                        }
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                    return null;
                }));
            }
            Future<?> chaos = ex.submit(() -> {
                SplittableRandom rnd = new SplittableRandom(99);
                while (!stop.get()) {
                    try {
                        switch (rnd.nextInt(3)) {
                            case 0 -> pool.trim();
                            case 1 -> pool.setRetentionCap(PoolLifetime.LOCAL, rnd.nextInt(8) * g);
                            default -> pool.stats(PoolLifetime.LOCAL);
                        }
                        Thread.sleep(1);
                    } catch (Throwable e) {
                        failures.add(e);
                        return null;
                    }
                }
                return null;
            });
            for (Future<?> f : fs) f.get(100, TimeUnit.SECONDS);
            stop.set(true);
            chaos.get(10, TimeUnit.SECONDS);
            PoolStats st = pool.stats(PoolLifetime.LOCAL);
            assertEquals(0, st.liveCount(), st.toString());
            pool.close();
            for (Stream s : streams) s.synchronize();
            pool.awaitDeferredReleases(30);
            for (Stream s : streams) s.close();
        } finally {
            ex.shutdownNow();
            HostDriverHooks.setStreamDelayMicros(0);
        }
        if (!failures.isEmpty()) {
            AssertionError e = new AssertionError(failures.size() + " failures, first: " + failures.peek());
            failures.forEach(e::addSuppressed);
            throw e;
        }
        LiveObjects.assertBack(live, "after the soak");
        OpenFds.assertNoNewFds(fds, "after the soak");
    }

    /**
     * Stream-ordered frees on a gated stream, while other threads trim and close the pool:
     * nothing released under the pending work, everything released once the gate opens.
     */
    @Test
    @Timeout(60)
    void poolCloseRacingStreamOrderedFreesOnGatedStream() throws Exception {
        Map<String, Long> live = LiveObjects.now();
        Map<String, String> fds = OpenFds.byNumber();
        ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            for (int round = 0; round < 30; round++) {
                Stream s = Stream.create(0);
                Stream s2 = Stream.create(0);
                VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build();
                CountDownLatch gate = gate(s);
                List<VirtualMemoryBuffer> bufs = new ArrayList<>();
                for (int i = 0; i < 16; i++) {
                    VirtualMemoryBuffer b = pool.allocate(g * (1 + i % 3), s);
                    b.fillAsync(0, b.size(), (byte) i, s);
                    bufs.add(b);
                }
                CountDownLatch go = new CountDownLatch(1);
                Thread closer = new Thread(() -> {
                    try {
                        go.await();
                        for (int i = 0; i < bufs.size(); i += 2) bufs.get(i).close(i % 4 == 0 ? s : s2);
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                });
                Thread trimmer = new Thread(() -> {
                    try {
                        go.await();
                        pool.trim();
                        pool.close();
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                });
                closer.start();
                trimmer.start();
                go.countDown();
                for (int i = 1; i < bufs.size(); i += 2) bufs.get(i).close(s);
                closer.join(20_000);
                trimmer.join(20_000);
                assertTrue(!closer.isAlive() && !trimmer.isAlive(), "round " + round + ": a thread hung");
                gate.countDown();
                s.synchronize();
                s2.synchronize();
                pool.awaitDeferredReleases(30);
                s.close();
                s2.close();
                assertEquals(0, pool.stats(PoolLifetime.LOCAL).liveCount());
                assertEquals(0, pool.stats(PoolLifetime.LOCAL).retainedCount(), pool.stats(PoolLifetime.LOCAL).toString());
            }
        }
        if (!failures.isEmpty()) {
            AssertionError e = new AssertionError(failures.size() + " failures, first: " + failures.peek());
            failures.forEach(e::addSuppressed);
            throw e;
        }
        waitLeaksThreadsGone();
        LiveObjects.assertBack(live, "after the rounds");
        OpenFds.assertNoNewFds(fds, "after the rounds");
    }

    /**
     * A host-order allocate blocked in cuEventSynchronize (the previous owner's free is gated)
     * is interrupted: it must either finish once the gate opens or throw, and the memory must
     * stay with the pool (no leak, no double hand-out).
     */
    @Test
    @Timeout(60)
    void interruptingHostOrderAllocateBlockedOnPendingFree() throws Exception {
        Map<String, Long> live = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             Stream s = Stream.create(0)) {
            long g = resource.granularity();
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build();
            VirtualMemoryBuffer b = pool.allocate(g, s);
            CountDownLatch gate = gate(s);
            b.close(s);
            Object[] result = new Object[1];
            Thread t = new Thread(() -> {
                try {
                    result[0] = pool.allocate(g);
                } catch (Throwable e) {
                    result[0] = e;
                }
            });
            t.start();
            Thread.sleep(300);
            t.interrupt();
            t.join(2000);
            boolean hungAfterInterrupt = t.isAlive();
            gate.countDown();
            t.join(10_000);
            assertTrue(!t.isAlive(), "allocate did not return after the gate opened");
            if (result[0] instanceof VirtualMemoryBuffer vb) vb.close();
            else if (result[0] instanceof Throwable e) System.err.println("probe: interrupted allocate threw " + e);
            System.err.println("probe: hung after interrupt (until gate) = " + hungAfterInterrupt);
            PoolStats st = pool.stats(PoolLifetime.LOCAL);
            assertEquals(0, st.liveCount(), st.toString());
            pool.close();
            s.synchronize();
            pool.awaitDeferredReleases(30);
        }
        LiveObjects.assertBack(live, "after the interrupt");
    }

    /**
     * Buffers leaked with stream work queued on a gated stream, the pool closed meanwhile:
     * the leak thread takes them back only after the work, then ends; nothing stays.
     */
    @Test
    @Timeout(60)
    void leakedBuffersWithPendingWorkAfterPoolClose() throws Exception {
        Map<String, Long> live = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            Stream s = Stream.create(0);
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build();
            CountDownLatch gate = gate(s);
            leakSome(pool, s, g);
            VirtualMemoryBuffer kept = pool.allocate(g);
            pool.close();
            for (int i = 0; i < 5; i++) {
                System.gc();
                Thread.sleep(50);
            }
            PoolStats mid = pool.stats(PoolLifetime.LOCAL);
            assertEquals(5, mid.liveCount(), "leaks under pending work must stay live: " + mid);
            gate.countDown();
            s.synchronize();
            pool.awaitDeferredReleases(30);
            kept.close();
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (pool.stats(PoolLifetime.LOCAL).liveCount() != 0 && System.nanoTime() < deadline) Thread.sleep(20);
            PoolStats st = pool.stats(PoolLifetime.LOCAL);
            assertEquals(0, st.liveCount(), st.toString());
            assertEquals(4, st.leaks(), st.toString());
            s.close();
        }
        waitLeaksThreadsGone();
        LiveObjects.assertBack(live, "after the leaks");
    }

    private static void leakSome(VirtualMemoryPool pool, Stream s, long g) {
        for (int i = 0; i < 4; i++) {
            VirtualMemoryBuffer b = pool.allocate(g * (1 + i), s);
            b.fillAsync(0, b.size(), (byte) i, s);
        }
    }

    static void waitLeaksThreadsGone() throws InterruptedException {
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (System.nanoTime() < deadline) {
            boolean any = Thread.getAllStackTraces().keySet().stream().anyMatch(th -> th.getName().startsWith("cuvmm-pool-"));
            if (!any) return;
            Thread.sleep(50);
        }
        fail("a cuvmm-pool-* thread is still alive: " + Thread.getAllStackTraces().keySet());
    }
}
