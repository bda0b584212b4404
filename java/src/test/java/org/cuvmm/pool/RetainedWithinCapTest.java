package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * "Each lifetime keeps at most its retention cap of idle capacity" ({@link VirtualMemoryPool},
 * "Retention"), and {@link PoolStats#retainedBytes()} is "capacity of the idle buffers kept for
 * reuse". Memory between lists (a miss's new memory not yet live, a returned buffer the pool
 * does not keep, not yet forgotten) is neither, and a cap lowered while a buffer returns holds
 * once both calls are done. Each test runs its steps at the pool's test seams on one thread:
 * no timing involved.
 */
class RetainedWithinCapTest {
    /**
     * A pool with cap 0 never keeps a buffer, so no reading of its retained figures may be
     * above 0. It read 1 retained buffer (one granule) during every miss: the new memory was
     * in the footprint before it counted as live (failed on the old code: retained 1).
     */
    @Test
    void aPoolWithCapZeroReadsNothingRetainedDuringAMiss() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("cap0-miss")
                     .retentionCap(PoolLifetime.LOCAL, 0).build()) {
            AtomicReference<PoolStats> during = new AtomicReference<>();
            Thread me = Thread.currentThread();
            LifetimePool.beforeCountedLive = () -> {
                if (Thread.currentThread() != me) return;
                LifetimePool.beforeCountedLive = null;
                during.set(pool.stats(PoolLifetime.LOCAL));
            };
            VirtualMemoryBuffer b;
            try {
                b = pool.allocate(1);
            } finally {
                LifetimePool.beforeCountedLive = null;
            }
            PoolStats s = during.get();
            assertNotNull(s, "the seam ran");
            assertEquals(1, s.misses(), "a miss: " + s);
            assertStats(s, 0, 0, 0, 0, "during a miss of a pool with cap 0 (its memory made, not yet live)");
            assertStats(pool.stats(PoolLifetime.LOCAL), 1, b.mappedSize(), 0, 0, "after the miss");
            b.close();
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 0, 0, "after the close");
        }
    }

    /**
     * The same pool during a close: the buffer is released, not kept (its class is over the
     * cap). It read 1 retained buffer between the live count's drop and the release (failed on
     * the old code: retained 1).
     */
    @Test
    void aPoolWithCapZeroReadsNothingRetainedDuringAClose() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("cap0-close")
                     .retentionCap(PoolLifetime.LOCAL, 0).build()) {
            VirtualMemoryBuffer b = pool.allocate(1);
            long capacity = b.mappedSize();
            AtomicReference<PoolStats> during = new AtomicReference<>();
            Thread me = Thread.currentThread();
            LifetimePool.afterLiveCountDroppedForTest = () -> {
                if (Thread.currentThread() != me) return;
                LifetimePool.afterLiveCountDroppedForTest = null;
                during.set(pool.stats(PoolLifetime.LOCAL)); // no lock held: the slot is not pushed
            };
            try {
                b.close();
            } finally {
                LifetimePool.afterLiveCountDroppedForTest = null;
            }
            PoolStats s = during.get();
            assertNotNull(s, "the seam ran");
            assertStats(s, 0, 0, 0, 0, "during the close of a buffer over the cap (live count dropped, not yet released)");
            PoolStats after = pool.stats(PoolLifetime.LOCAL);
            assertStats(after, 0, 0, 0, 0, "after the close");
            assertEquals(1, after.evictions(), "released for exceeding the cap alone: " + after);
            assertEquals(capacity, after.evictedBytes(), "its capacity: " + after);
        }
    }

    /**
     * Cap: one granule. A buffer of one granule closes while another allocation's miss has
     * made its memory and not yet counted it live. The closed buffer's memory is all that is
     * idle, exactly the cap: nothing goes over it, so nothing may be evicted. The new memory
     * counted as retained made the close evict it (failed on the old code: retained 0,
     * evictions 1), and the next allocation of that class was a miss.
     */
    @Test
    void aCloseDuringAMissEvictsNothingTheCapAllows() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            try (VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("close-during-miss")
                    .retentionCap(PoolLifetime.LOCAL, g).build()) {
                VirtualMemoryBuffer first = pool.allocate(1);
                Thread me = Thread.currentThread();
                LifetimePool.beforeCountedLive = () -> {
                    if (Thread.currentThread() != me) return;
                    LifetimePool.beforeCountedLive = null;
                    first.close(); // no lock held here: the allocation has its memory, not yet live
                };
                VirtualMemoryBuffer second;
                try {
                    second = pool.allocate(1);
                } finally {
                    LifetimePool.beforeCountedLive = null;
                }
                PoolStats s = pool.stats(PoolLifetime.LOCAL);
                assertEquals(2, s.misses(), "the second allocation was a miss (nothing was idle when it looked): " + s);
                assertEquals(0, s.evictions(), "idle capacity never went over the cap of " + g + " bytes: " + s);
                assertStats(s, 1, g, 1, g, "after a close during a miss");
                second.close();
                PoolStats after = pool.stats(PoolLifetime.LOCAL);
                assertStats(after, 0, 0, 1, g, "after both closes (the second over the cap: one evicted)");
                assertEquals(1, after.evictions(), after.toString());
                try (VirtualMemoryBuffer third = pool.allocate(1)) {
                    assertEquals(1, pool.stats(PoolLifetime.LOCAL).hits(), "served from idle memory");
                }
            }
        }
    }

    /**
     * {@code setRetentionCap(LOCAL, 0)} runs while a closed buffer is on its way to the free
     * list (kept: the cap was unbounded when its close looked). Once both calls are done, the
     * pool holds nothing idle: the close reads the cap after linking the buffer, so it evicts
     * it. The close used the cap it read before, unbounded, and left one granule retained
     * above a cap of 0 until the next release (failed on the old code with this seam: retained
     * 1, evictions 0).
     */
    @Test
    void aCapLoweredWhileABufferReturnsHoldsOnceBothAreDone() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("cap-while-returning").build()) {
            VirtualMemoryBuffer b = pool.allocate(1);
            long capacity = b.mappedSize();
            AtomicReference<Long> releasedBySet = new AtomicReference<>();
            Thread me = Thread.currentThread();
            LifetimePool.beforePushForTest = () -> {
                if (Thread.currentThread() != me) return;
                LifetimePool.beforePushForTest = null;
                releasedBySet.set(pool.setRetentionCap(PoolLifetime.LOCAL, 0)); // nothing idle yet
            };
            try {
                b.close();
            } finally {
                LifetimePool.beforePushForTest = null;
            }
            assertEquals(0L, releasedBySet.get(), "the seam ran, and the buffer was not yet idle there");
            PoolStats s = pool.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.retentionCapBytes());
            assertStats(s, 0, 0, 0, 0, "after setRetentionCap(0) and a close that raced it");
            assertEquals(1, s.evictions(), "the close evicted its own buffer: " + s);
            assertEquals(capacity, s.evictedBytes(), s.toString());
        }
    }
}
