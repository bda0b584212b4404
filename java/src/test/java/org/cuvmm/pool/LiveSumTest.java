package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * The live figures are sums over per-thread accounting cells, read one after another: a buffer
 * allocated on a cell the reader has passed and closed on a cell it has not reached yet counts
 * -1 in that read. {@link PoolStats} says a value under concurrency need not be one atomic cut,
 * but a live count (or capacity, or requested bytes) below 0 is no value the pool ever had.
 * Steps at the reader's seam between two cells, with the two threads' cells known: no timing.
 */
class LiveSumTest {
    /**
     * A stats() read passes the allocating thread's cell, the buffer is allocated there and
     * closed on another thread's cell, then the read goes on. It read liveCount -1 (failed on
     * the old code with the seam added); the figure is now never below 0.
     */
    @Test
    void aBufferAllocatedAndClosedDuringAReadNeverMakesALiveFigureNegative() throws Exception {
        ExecutorService other = null;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("live-sum").build()) {
            LifetimePool local = pool.of(PoolLifetime.LOCAL);
            assumeTrue(local.cellCount() >= 2, "one accounting cell (one CPU): its sum is exact");
            int mine = local.cellOfThisThread();
            int theirs = mine;
            for (int tries = 0; tries < 16 && theirs == mine; tries++) { // stripe indices are given round-robin
                if (other != null) other.shutdownNow();
                other = Executors.newSingleThreadExecutor();
                theirs = other.submit(local::cellOfThisThread).get(30, TimeUnit.SECONDS);
            }
            assumeTrue(theirs != mine, "found no thread with another accounting cell");
            ExecutorService otherThread = other;
            boolean iAllocate = mine < theirs; // allocate on the cell read first, close on the one read later
            int firstCell = Math.min(mine, theirs);
            pool.allocate(1).close(); // warm: the next allocation is a hit, no driver call in the seam
            AtomicReference<Throwable> failed = new AtomicReference<>();
            Thread me = Thread.currentThread();
            LifetimePool.afterCellReadForTest = i -> {
                if (Thread.currentThread() != me || i != firstCell) return;
                LifetimePool.afterCellReadForTest = null;
                try {
                    if (iAllocate) {
                        VirtualMemoryBuffer b = pool.allocate(1);
                        otherThread.submit(() -> b.close()).get(30, TimeUnit.SECONDS);
                    } else {
                        VirtualMemoryBuffer b = otherThread.submit(() -> pool.allocate(1)).get(30, TimeUnit.SECONDS);
                        b.close();
                    }
                } catch (Throwable t) {
                    failed.set(t);
                }
            };
            PoolStats s;
            try {
                s = pool.stats(PoolLifetime.LOCAL);
            } finally {
                LifetimePool.afterCellReadForTest = null;
            }
            if (failed.get() != null) throw new AssertionError("the seam's allocate/close failed", failed.get());
            assertTrue(s.liveCount() >= 0, "live count below 0: " + s);
            assertTrue(s.liveBytes() >= 0 && s.liveRequestedBytes() >= 0, "live bytes below 0: " + s);
            assertEquals(0, pool.stats(PoolLifetime.LOCAL).liveCount(), "quiet: exact");
        } finally {
            if (other != null) other.shutdownNow();
        }
    }
}
