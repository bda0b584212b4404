package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.cuvmm.BufferOrigin;
import org.cuvmm.DriverCounters;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** Reuse, class choice, capacity, caps, eviction order, trim and accounting, one thread. */
class VirtualMemoryPoolTest {
    private VirtualMemoryResource resource;
    private long g; // granularity
    private Map<String, Long> liveBefore;

    @BeforeEach
    void open() {
        liveBefore = LiveObjects.now();
        resource = VirtualMemoryResource.create(0);
        g = resource.granularity();
    }

    @AfterEach
    void close() {
        resource.close();
        LiveObjects.assertBack(liveBefore, "after the test closed its pool and buffers");
    }

    private VirtualMemoryPool pool() {
        return VirtualMemoryPool.builder().resource(resource).build();
    }

    @Test
    void memoryStillMappedByAnAliasIsNotReused() {
        try (VirtualMemoryPool pool = pool()) {
            VirtualMemoryBuffer pooled = pool.allocate(g);
            long address = pooled.address();
            VirtualMemoryBuffer alias = resource.modifyAllocation(pooled, g); // same mapping, new holder
            pooled.close();
            VirtualMemoryBuffer next = pool.allocate(g);
            assertNotEquals(address, next.address(), "memory an alias still maps must not be handed out again");
            alias.fill((byte) 1); // the alias keeps its memory
            next.close();
            alias.close();
            VirtualMemoryBuffer again = pool.allocate(g);
            again.close();
        }
    }

    @Test
    void closedBufferIsReusedWithItsCapacityAndNoDriverCall() {
        DriverCounters c = PoolTestSupport.counters();
        try (VirtualMemoryPool pool = pool()) {
            long reqSize = g + g / 2; // one and a half granules: class of 2 granules
            VirtualMemoryBuffer first = pool.allocate(reqSize);
            assertEquals(BufferOrigin.POOLED, first.origin());
            assertEquals(reqSize, first.size());
            assertEquals(2 * g, first.mappedSize(), "capacity is the size class");
            long address = first.address();
            first.fill((byte) 5);
            first.close();
            assertTrue(first.isClosed());
            first.close(); // idempotent
            assertThrows(IllegalStateException.class, first::address, "use after close throws");

            long total = c.totalCalls();
            VirtualMemoryBuffer second = pool.allocate(2 * g - 1);
            assertEquals(total, c.totalCalls(), "no driver call for a reuse");
            assertEquals(address, second.address(), "the same memory");
            assertEquals(2 * g - 1, second.size());
            assertEquals(2 * g, second.mappedSize());
            byte[] b = new byte[1];
            second.copyTo(g, b, 0, 1);
            assertEquals(5, b[0], "the memory came back as it was left: the pool does not clear it");
            PoolStats s = pool.stats(PoolLifetime.LOCAL);
            assertEquals(1, s.hits());
            assertEquals(1, s.misses());
            second.close();
        }
    }

    @Test
    void smallestFittingClassFirstThenLargerWithinTwice() {
        try (VirtualMemoryPool pool = pool()) {
            SizeClasses classes = pool.sizeClasses();
            LifetimePool local = pool.of(PoolLifetime.LOCAL);
            VirtualMemoryBuffer two = pool.allocate(2 * g);
            VirtualMemoryBuffer three = pool.allocate(3 * g);
            VirtualMemoryBuffer five = pool.allocate(5 * g);
            long a2 = two.address(), a3 = three.address(), a5 = five.address();
            two.close();
            three.close();
            five.close();

            // 1.5 granules: its own class (2 granules) has an idle buffer.
            VirtualMemoryBuffer b = pool.allocate(g + 1);
            assertEquals(a2, b.address(), "exact class first, although larger ones are idle");
            assertEquals(0, pool.stats(PoolLifetime.LOCAL).largerClassHits());
            // 1 granule: its class is empty; 2 granules would do but is taken; 3 is more than twice 1.
            VirtualMemoryBuffer one = pool.allocate(g);
            assertNotEquals(a3, one.address(), "a 3-granule buffer is more than twice a 1-granule class");
            assertEquals(g, one.mappedSize());
            assertEquals(4, pool.stats(PoolLifetime.LOCAL).misses());
            b.close(); // 2 granules idle again
            VirtualMemoryBuffer reuse = pool.allocate(g - 7);
            assertEquals(a2, reuse.address(), "the smallest larger class within twice");
            assertEquals(2 * g, reuse.mappedSize(), "it keeps its capacity");
            assertEquals(g - 7, reuse.size());
            assertEquals(1, pool.stats(PoolLifetime.LOCAL).largerClassHits());
            // 4 granules: class 4 empty; 5 granules is within twice: taken.
            VirtualMemoryBuffer four = pool.allocate(4 * g);
            assertEquals(a5, four.address());
            assertEquals(5 * g, four.mappedSize());

            reuse.close();
            four.close();
            one.close();
            // Capacity preserved: each went back to the list of its own class.
            assertEquals(List.of(a2), addresses(local.idleSlots(classes.sizeIdx(2 * g))));
            assertEquals(List.of(a5), addresses(local.idleSlots(classes.sizeIdx(5 * g))));
            assertEquals(List.of(a3), addresses(local.idleSlots(classes.sizeIdx(3 * g))));
            assertEquals(1, local.idleSlots(0).size());
        }
    }

    private static List<Long> addresses(List<PoolSlot> slots) {
        return slots.stream().map(s -> s.range.address()).collect(java.util.stream.Collectors.toList());
    }

    @Test
    void accountingAtEveryStepCapEvictionOrderLoweringAndTrim() {
        DriverCounters c = PoolTestSupport.counters();
        try (VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource)
                .retentionCap(PoolLifetime.LOCAL, 4 * g).build()) {
            PoolLifetime L = PoolLifetime.LOCAL;
            assertStats(pool.stats(L), 0, 0, 0, 0, "when built");
            assertEquals(4 * g, pool.retentionCap(L));
            VirtualMemoryBuffer a = pool.allocate(g);
            assertStats(pool.stats(L), 1, g, 0, 0, "after a");
            VirtualMemoryBuffer b = pool.allocate(g / 2);
            assertStats(pool.stats(L), 2, 2 * g, 0, 0, "after b");
            VirtualMemoryBuffer cc = pool.allocate(2 * g);
            assertStats(pool.stats(L), 3, 4 * g, 0, 0, "after c");
            VirtualMemoryBuffer d = pool.allocate(g);
            assertStats(pool.stats(L), 4, 5 * g, 0, 0, "after d");
            assertEquals(g + g / 2 + 2 * g + g, pool.stats(L).liveRequestedBytes());
            assertEquals(5 * g, pool.stats(L).peakLiveBytes());
            long addrB = b.address(), addrC = cc.address(), addrD = d.address(), addrA = a.address();

            a.close();
            assertStats(pool.stats(L), 3, 4 * g, 1, g, "after closing a");
            cc.close();
            assertStats(pool.stats(L), 2, 2 * g, 2, 3 * g, "after closing c");
            b.close();
            assertStats(pool.stats(L), 1, g, 3, 4 * g, "after closing b: at the cap, nothing evicted");
            assertEquals(0, pool.stats(L).evictions());
            long releases = c.calls("cuMemRelease");
            d.close(); // 5 granules idle > cap 4: the least recently freed (a) goes
            assertStats(pool.stats(L), 0, 0, 3, 4 * g, "after closing d: a evicted");
            assertEquals(1, pool.stats(L).evictions());
            assertEquals(g, pool.stats(L).evictedBytes());
            assertEquals(5 * g, pool.stats(L).peakLiveBytes(), "peak stays");
            assertEquals(0, pool.stats(L).liveRequestedBytes());
            if (PoolTestSupport.onHostDriver()) assertEquals(releases + 1, c.calls("cuMemRelease"));
            LifetimePool local = pool.of(L);
            assertEquals(List.of(addrD, addrB), addresses(local.idleSlots(0)), "newest first; a is gone");
            assertFalse(addresses(local.idleSlots(0)).contains(addrA));

            // Lowering the cap evicts at once, oldest first: c (freed before b), then b.
            assertEquals(3 * g, pool.setRetentionCap(L, g));
            assertStats(pool.stats(L), 0, 0, 1, g, "after lowering the cap to 1 granule");
            assertEquals(List.of(addrD), addresses(local.idleSlots(0)));
            assertEquals(List.of(), addresses(local.idleSlots(1)));
            assertEquals(3, pool.stats(L).evictions());
            assertEquals(4 * g, pool.stats(L).evictedBytes());

            // A buffer larger than the cap is released when closed, never kept.
            VirtualMemoryBuffer big = pool.allocate(2 * g);
            assertStats(pool.stats(L), 1, 2 * g, 1, g, "big live");
            big.close();
            assertStats(pool.stats(L), 0, 0, 1, g, "big released at close");
            assertEquals(4, pool.stats(L).evictions());

            // trim releases every idle buffer and says how much; live buffers stay.
            VirtualMemoryBuffer live = pool.allocate(3 * g);
            live.fill((byte) 1);
            assertEquals(g, pool.trim());
            assertStats(pool.stats(L), 1, 3 * g, 0, 0, "after trim with one live buffer");
            assertEquals(g, pool.stats(L).trimmedBytes());
            assertEquals(0, pool.trim(), "nothing idle left");
            live.fill((byte) 2); // still usable
            pool.setRetentionCap(L, Long.MAX_VALUE);
            live.close();
            assertStats(pool.stats(L), 0, 0, 1, 3 * g, "after closing the live buffer");
            assertEquals(3 * g, pool.trim(L));
            assertStats(pool.stats(L), 0, 0, 0, 0, "after the last trim");
            assertStats(pool.stats(PoolLifetime.EXPORTED), 0, 0, 0, 0, "the other lifetime never moved");
        }
    }

    @Test
    void lifetimesAreSeparatePools() {
        try (VirtualMemoryPool pool = pool()) {
            VirtualMemoryBuffer local = pool.allocate(g);
            long localAddress = local.address();
            local.close();
            VirtualMemoryBuffer exported = pool.allocateExported(g);
            assertNotEquals(localAddress, exported.address(), "idle local memory is not handed out as exported");
            long exportedAddress = exported.address();
            exported.close();
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 1, g, "local");
            assertStats(pool.stats(PoolLifetime.EXPORTED), 0, 0, 1, g, "exported");
            VirtualMemoryBuffer again = pool.allocate(g);
            assertEquals(localAddress, again.address());
            again.close();
            assertEquals(2 * g, pool.trim());
            assertNotEquals(localAddress, exportedAddress);
        }
    }

    @Test
    void closingThePoolReleasesIdleMemoryAndLaterReturns() {
        VirtualMemoryPool pool = pool();
        VirtualMemoryBuffer idle = pool.allocate(g);
        VirtualMemoryBuffer live = pool.allocate(2 * g);
        idle.close();
        pool.close();
        assertTrue(pool.isClosed());
        pool.close(); // idempotent
        assertStats(pool.stats(PoolLifetime.LOCAL), 1, 2 * g, 0, 0, "after close: idle released, live kept");
        live.fill((byte) 3); // a live buffer outlives its pool
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> pool.allocate(g));
        assertTrue(e.getMessage().contains("is closed"), e.getMessage());
        live.close();
        assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 0, 0, "a buffer closed after its pool is released");
        assertEquals(3 * g, pool.stats(PoolLifetime.LOCAL).trimmedBytes());
    }

    @Test
    void badRequestsAndSettingsAreRefusedWithMessages() {
        try (VirtualMemoryPool pool = pool()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> pool.allocate(-1));
            assertEquals("reqSize: -1 (expected: >= 0)", e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> pool.allocate(Long.MAX_VALUE));
            assertTrue(e.getMessage().startsWith("reqSize: " + Long.MAX_VALUE + " (expected: 1 to "), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> pool.setRetentionCap(PoolLifetime.LOCAL, -5));
            assertEquals("capBytes: -5 (expected: >= 0)", e.getMessage());
            assertThrows(NullPointerException.class, () -> pool.stats(null));
            try (VirtualMemoryBuffer empty = pool.allocate(0)) {
                assertEquals(0, empty.size());
                assertEquals(BufferOrigin.ALLOCATED, empty.origin(), "the resource's empty buffer, not pooled");
            }
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 0, 0, "nothing pooled for size 0");
        }
        NullPointerException npe = assertThrows(NullPointerException.class, () -> VirtualMemoryPool.builder().build());
        assertTrue(npe.getMessage().startsWith("resource: null (expected: "), npe.getMessage());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> VirtualMemoryPool.builder().resource(resource).retentionCap(PoolLifetime.EXPORTED, -1).build());
        assertTrue(e.getMessage().startsWith("retentionCap(EXPORTED): -1"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> VirtualMemoryPool.builder().resource(resource).leakSampleRate(-2).build());
        assertTrue(e.getMessage().startsWith("leakSampleRate: -2"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> VirtualMemoryPool.builder().resource(resource).name(" ").build());
        assertTrue(e.getMessage().startsWith("name: \" \""), e.getMessage());

        try (VirtualMemoryResource noIpc = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .handleType(HandleType.NONE).build());
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(noIpc).build()) {
            IllegalStateException ise = assertThrows(IllegalStateException.class, () -> pool.allocateExported(g));
            assertTrue(ise.getMessage().contains("POSIX_FD"), ise.getMessage());
            pool.allocate(g).close(); // local works
        }
        VirtualMemoryResource closed = VirtualMemoryResource.create(0);
        closed.close();
        assertThrows(IllegalStateException.class, () -> VirtualMemoryPool.builder().resource(closed).build());
    }
}
