package org.cuvmm.pool;

import java.util.Map;
import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.BufferLease;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/**
 * Exported buffers: leased memory is never reused; it comes back once the owner gave it up
 * and every lease is gone. {@code buffer.lease("consumer")} stands in for a consumer process
 * (the sharing server takes the same lease per consumer).
 */
class ExportedLifetimeTest {
    @Test
    void leasedBufferIsNotReusedUntilEveryLeaseIsReleased() {
        Map<String, Long> liveBefore = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build()) {
            long g = resource.granularity();
            PoolLifetime E = PoolLifetime.EXPORTED;
            VirtualMemoryBuffer shared = pool.allocateExported(g);
            long address = shared.address();
            shared.fill((byte) 9);
            try (BufferDescriptor d = shared.exportDescriptor()) {
                assertEquals(1, d.fds().length, "pooled exported memory exports like any buffer");
            }
            BufferLease first = shared.lease("consumer 1");
            BufferLease second = shared.lease("consumer 2");

            IllegalStateException refused = assertThrows(IllegalStateException.class, shared::close);
            assertTrue(refused.getMessage().contains("consumer 1") && refused.getMessage().contains("consumer 2"),
                    refused.getMessage());
            assertFalse(shared.isClosed(), "a refused close changes nothing");
            assertStats(pool.stats(E), 1, g, 0, 0, "after the refused close");

            shared.closeWhenUnused(); // the owner gives it up; consumers still map it
            assertTrue(shared.isClosePending());
            assertStats(pool.stats(E), 1, g, 0, 0, "owner gave up, two leases held");

            VirtualMemoryBuffer other = pool.allocateExported(g);
            assertNotEquals(address, other.address(), "leased memory is not handed out again");
            assertEquals(2, pool.stats(E).misses());

            first.close();
            assertFalse(shared.isClosed(), "one lease still held");
            assertStats(pool.stats(E), 2, 2 * g, 0, 0, "one lease released");
            VirtualMemoryBuffer third = pool.allocateExported(g);
            assertNotEquals(address, third.address());

            byte[] b = new byte[1];
            second.buffer().copyTo(5, b, 0, 1); // the consumer's view is intact
            assertEquals(9, b[0]);
            second.close(); // the last lease: the pending close runs and the memory returns
            assertTrue(shared.isClosed());
            assertStats(pool.stats(E), 2, 2 * g, 1, g, "every lease released");

            VirtualMemoryBuffer reused = pool.allocateExported(g / 2);
            assertEquals(address, reused.address(), "now it is reused");
            assertEquals(1, pool.stats(E).hits());
            reused.close();
            other.close();
            third.close();
            assertStats(pool.stats(E), 0, 0, 3, 3 * g, "all closed");
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 0, 0, "the local pool was never involved");
            assertEquals(3 * g, pool.trim(E));
        }
        LiveObjects.assertBack(liveBefore, "after the pool and resource closed");
    }

    @Test
    void closeWhenUnusedWithoutLeasesReturnsAtOnce() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build()) {
            VirtualMemoryBuffer b = pool.allocateExported(1);
            b.closeWhenUnused();
            assertTrue(b.isClosed());
            assertStats(pool.stats(PoolLifetime.EXPORTED), 0, 0, 1, resource.granularity(), "returned at once");
        }
    }

    @Test
    void evictionAndTrimNeverTouchLeasedBuffers() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource)
                     .retentionCap(PoolLifetime.EXPORTED, 0).build()) {
            long g = resource.granularity();
            VirtualMemoryBuffer leased = pool.allocateExported(g);
            BufferLease lease = leased.lease("consumer");
            leased.closeWhenUnused();
            assertEquals(0, pool.trim());
            assertEquals(0, pool.setRetentionCap(PoolLifetime.EXPORTED, 0));
            leased.size();
            byte[] b = new byte[8];
            lease.buffer().copyTo(0, b, 0, 8); // still mapped and usable by the lease holder
            assertStats(pool.stats(PoolLifetime.EXPORTED), 1, g, 0, 0, "leased buffer untouched");
            lease.close();
            assertStats(pool.stats(PoolLifetime.EXPORTED), 0, 0, 0, 0, "cap 0: released when the lease ended");
            assertEquals(1, pool.stats(PoolLifetime.EXPORTED).evictions());
        }
    }

    /**
     * Rules 2 and 3 for pooled buffers: a lease and the owner's close race; exactly one wins,
     * and memory is never recycled while a lease holds it.
     */
    @Test
    void leaseRacingTheOwnersCloseNeverLetsLeasedMemoryBeReused() throws Exception {
        final int rounds = 2000;
        ExecutorService threads = Executors.newFixedThreadPool(2);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build()) {
            long g = resource.granularity();
            CyclicBarrier start = new CyclicBarrier(2);
            int leaseWon = 0, closeWon = 0;
            for (int i = 0; i < rounds; i++) {
                VirtualMemoryBuffer b = pool.allocateExported(g);
                boolean deferred = (i & 1) == 0;
                Future<Boolean> closer = threads.submit(() -> {
                    start.await();
                    if (deferred) {
                        b.closeWhenUnused();
                        return true;
                    }
                    try {
                        b.close();
                        return true;
                    } catch (IllegalStateException inUse) {
                        assertTrue(inUse.getMessage().contains("in use"), inUse.getMessage());
                        return false;
                    }
                });
                Future<BufferLease> leaser = threads.submit(() -> {
                    start.await();
                    try {
                        return b.lease("consumer");
                    } catch (IllegalStateException closed) {
                        assertTrue(closed.getMessage().contains("closed"), closed.getMessage());
                        return null;
                    }
                });
                boolean closedOrPending = closer.get(10, TimeUnit.SECONDS);
                BufferLease lease = leaser.get(10, TimeUnit.SECONDS);
                if (lease != null) {
                    leaseWon++;
                    assertFalse(b.isClosed(), "a held lease keeps the buffer open");
                    assertEquals(1, pool.stats(PoolLifetime.EXPORTED).liveCount());
                    try (VirtualMemoryBuffer next = pool.allocateExported(g)) {
                        assertNotEquals(b.address(), next.address(), "leased memory handed out again, round " + i);
                    }
                    lease.close();
                    if (!closedOrPending) b.close(); // the refused owner closes again
                } else {
                    closeWon++;
                    assertTrue(closedOrPending);
                    assertNull(lease);
                }
                assertTrue(b.isClosed());
                assertEquals(0, pool.stats(PoolLifetime.EXPORTED).liveCount(), "round " + i);
            }
            assertEquals(rounds, leaseWon + closeWon);
            assertStats(pool.stats(PoolLifetime.EXPORTED), 0, 0, pool.stats(PoolLifetime.EXPORTED).retainedCount(),
                    pool.stats(PoolLifetime.EXPORTED).retainedCount() * g, "after the races");
            assertTrue(pool.stats(PoolLifetime.EXPORTED).retainedCount() <= 2, "at most two buffers ever needed");
        } finally {
            threads.shutdownNow();
        }
    }
}
