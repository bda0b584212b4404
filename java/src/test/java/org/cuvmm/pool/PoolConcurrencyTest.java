package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.MiB;
import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayDeque;
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
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.BufferLease;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/**
 * 8 threads allocate (both lifetimes), tag, lease, hand leases to each other, give buffers
 * up, trim and change caps at random. Every buffer carries its owner's tag until it is
 * closed, so two live buffers sharing memory would be caught; at the end the pool's
 * accounting and the driver's counters are back to zero.
 */
class PoolConcurrencyTest {
    private static final int THREADS = 8;
    private static final int OPS = 1500;

    @Test
    void eightThreadsOfMixedWorkLeaveNothingBehind() throws Exception {
        DriverCounters c = PoolTestSupport.counters();
        Map<String, Long> liveBefore = LiveObjects.now();
        Map<String, Long> callsBefore = c.calls();
        ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
        ConcurrentLinkedQueue<Leased> leases = new ConcurrentLinkedQueue<>();
        AtomicLong sequence = new AtomicLong();
        ExecutorService threads = Executors.newFixedThreadPool(THREADS);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            try (VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(4)
                    .retentionCap(PoolLifetime.LOCAL, 24 * g).retentionCap(PoolLifetime.EXPORTED, 12 * g).build()) {
                CountDownLatch start = new CountDownLatch(1);
                List<Future<?>> futures = new ArrayList<>();
                for (int t = 0; t < THREADS; t++) {
                    final int seed = t;
                    futures.add(threads.submit(() -> {
                        SplittableRandom rnd = new SplittableRandom(seed);
                        ArrayDeque<Owned> mine = new ArrayDeque<>();
                        start.await();
                        for (int i = 0; i < OPS; i++) {
                            try {
                                int op = rnd.nextInt(100);
                                if (op < 35 && mine.size() < 6) { // allocate local
                                    long seq = sequence.incrementAndGet();
                                    VirtualMemoryBuffer b = pool.allocate(1 + rnd.nextLong(5 * MiB));
                                    PoolTestSupport.tag(b, seed, seq);
                                    mine.add(new Owned(b, seq));
                                } else if (op < 50 && mine.size() < 6) { // allocate exported, lease to consumers
                                    long seq = sequence.incrementAndGet();
                                    VirtualMemoryBuffer b = pool.allocateExported(1 + rnd.nextLong(5 * MiB));
                                    PoolTestSupport.tag(b, seed, seq);
                                    int consumers = rnd.nextInt(3);
                                    for (int k = 0; k < consumers; k++) {
                                        leases.add(new Leased(b.lease("consumer " + seed + "/" + seq + "/" + k), seed, seq));
                                    }
                                    if (rnd.nextBoolean()) {
                                        b.closeWhenUnused(); // the owner gives it up now
                                    } else {
                                        mine.add(new Owned(b, seq)); // ... or later
                                    }
                                } else if (op < 80 && !mine.isEmpty()) { // give up a buffer
                                    Owned o = rnd.nextBoolean() ? mine.poll() : mine.pollLast();
                                    if (!PoolTestSupport.hasTag(o.buffer, seed, o.seq)) {
                                        throw new AssertionError("memory of a live buffer was handed out again: "
                                                + o.buffer);
                                    }
                                    if (o.buffer.leaseCount() > 0) {
                                        o.buffer.closeWhenUnused();
                                    } else {
                                        o.buffer.close();
                                    }
                                } else if (op < 95) { // a consumer releases
                                    Leased l = leases.poll();
                                    if (l != null) {
                                        if (!PoolTestSupport.hasTag(l.lease.buffer(), l.owner, l.seq)) {
                                            throw new AssertionError("leased memory was handed out again: "
                                                    + l.lease.buffer());
                                        }
                                        l.lease.close();
                                    }
                                } else if (op < 97) {
                                    pool.trim(rnd.nextBoolean() ? PoolLifetime.LOCAL : PoolLifetime.EXPORTED);
                                } else {
                                    pool.setRetentionCap(PoolLifetime.LOCAL, (8 + rnd.nextInt(24)) * g);
                                }
                            } catch (Throwable e) {
                                failures.add(e);
                            }
                        }
                        for (Owned o : mine) {
                            if (!PoolTestSupport.hasTag(o.buffer, seed, o.seq)) {
                                failures.add(new AssertionError("memory of a live buffer was handed out again"));
                            }
                            o.buffer.closeWhenUnused();
                        }
                        return null;
                    }));
                }
                start.countDown();
                for (Future<?> f : futures) f.get(300, TimeUnit.SECONDS);
                for (Leased l : leases) l.lease.close();
                if (!failures.isEmpty()) {
                    AssertionError e = new AssertionError(failures.size() + " failures; first: " + failures.peek());
                    failures.forEach(e::addSuppressed);
                    throw e;
                }
                for (PoolLifetime lifetime : PoolLifetime.values()) {
                    PoolStats s = pool.stats(lifetime);
                    assertEquals(0, s.liveCount(), lifetime + ": live buffers after every close");
                    assertEquals(0, s.liveBytes(), lifetime + ": live bytes");
                    assertEquals(0, s.liveRequestedBytes(), lifetime + ": live requested bytes");
                    assertTrue(s.hits() > 0 && s.misses() > 0, lifetime + ": both hits and misses " + s);
                    assertTrue(s.retainedBytes() <= pool.retentionCap(lifetime), lifetime + " within its cap: " + s);
                    assertEquals(s.retainedBytes(), pool.trim(lifetime), lifetime + ": trim returns what was retained");
                    assertStats(pool.stats(lifetime), 0, 0, 0, 0, "after trim");
                    System.out.println("[pool] 8 threads, " + lifetime.key() + ": " + s);
                }
            }
        } finally {
            threads.shutdownNow();
        }
        LiveObjects.assertBack(liveBefore, "after 8 threads, trim and close");
        Map<String, Long> calls = c.calls();
        long creates = calls.get("cuMemCreate") - callsBefore.get("cuMemCreate");
        assertTrue(creates > 0);
        assertEquals(creates, calls.get("cuMemRelease") - callsBefore.get("cuMemRelease"), "every cuMemCreate released");
        assertEquals(calls.get("cuMemMap") - callsBefore.get("cuMemMap"),
                calls.get("cuMemUnmap") - callsBefore.get("cuMemUnmap"), "every cuMemMap unmapped");
        assertEquals(calls.get("cuMemAddressReserve") - callsBefore.get("cuMemAddressReserve"),
                calls.get("cuMemAddressFree") - callsBefore.get("cuMemAddressFree"), "every reservation freed");
    }

    private static final class Owned {
        final VirtualMemoryBuffer buffer;
        final long seq;

        Owned(VirtualMemoryBuffer buffer, long seq) {
            this.buffer = buffer;
            this.seq = seq;
        }
    }

    private static final class Leased {
        final BufferLease lease;
        final long owner;
        final long seq;

        Leased(BufferLease lease, long owner, long seq) {
            this.lease = lease;
            this.owner = owner;
            this.seq = seq;
        }
    }
}
