package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicReference;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * {@link PoolStats#peakLiveBytes()}: "The highest liveBytes() since the pool was built", and a
 * snapshot "taken while the pool is quiet, it is exact". A live total a reader was shown must
 * not be above a later quiet snapshot's peak, also when it held only for an instant: an
 * allocation counted live while another buffer, not kept, was being returned. Steps at the
 * pool's seams on one thread: no timing involved.
 */
class PeakLiveTest {
    /**
     * Cap 0 (a returned buffer is released, not kept). Buffer a is live; an allocation of b is
     * counted live, and there a reader takes stats (live: a and b), then a is closed, before
     * b's allocation checks the peak. That check reads a footprint no longer above the peak
     * and skips. Failed on the old code: the quiet snapshot afterwards read peak one granule
     * after a snapshot had read two granules live.
     */
    @Test
    void aLiveTotalAReaderSawIsNeverAboveTheLaterPeak() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("peak-seen")
                     .retentionCap(PoolLifetime.LOCAL, 0).build()) {
            long g = resource.granularity();
            VirtualMemoryBuffer a = pool.allocate(1);
            AtomicReference<PoolStats> during = new AtomicReference<>();
            Thread me = Thread.currentThread();
            LifetimePool.afterCountedLiveForTest = () -> {
                if (Thread.currentThread() != me) return;
                LifetimePool.afterCountedLiveForTest = null;
                during.set(pool.stats(PoolLifetime.LOCAL));
                a.close(); // released (cap 0): leaves live and the footprint before b's peak check
            };
            VirtualMemoryBuffer b;
            try {
                b = pool.allocate(1);
            } finally {
                LifetimePool.afterCountedLiveForTest = null;
            }
            PoolStats seen = during.get();
            assertNotNull(seen, "the seam ran");
            assertEquals(2 * g, seen.liveBytes(), "a and b live: " + seen);
            assertEquals(2 * g, seen.peakLiveBytes(), "the snapshot that read them: " + seen);
            PoolStats quiet = pool.stats(PoolLifetime.LOCAL);
            assertEquals(g, quiet.liveBytes(), quiet.toString());
            assertEquals(2 * g, quiet.peakLiveBytes(), "a quiet snapshot after one that read " + seen.liveBytes()
                    + " bytes live: " + quiet);
            b.close();
        }
    }

    /** The same through the bean: a MemoryUsed read is never above a later PeakMemoryUsed. */
    @Test
    void aMemoryUsedTheBeanShowedIsNeverAboveTheLaterPeakMemoryUsed() throws Exception {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource)
                     .name("peak-bean-" + ProcessHandle.current().pid()).registerMBeans(true)
                     .retentionCap(PoolLifetime.LOCAL, 0).build()) {
            long g = resource.granularity();
            ObjectName local = pool.objectName(PoolLifetime.LOCAL);
            VirtualMemoryBuffer a = pool.allocate(1);
            AtomicReference<Object> used = new AtomicReference<>();
            Thread me = Thread.currentThread();
            LifetimePool.afterCountedLiveForTest = () -> {
                if (Thread.currentThread() != me) return;
                LifetimePool.afterCountedLiveForTest = null;
                try {
                    used.set(server.getAttribute(local, "MemoryUsed"));
                } catch (Exception e) {
                    used.set(e);
                }
                a.close();
            };
            VirtualMemoryBuffer b;
            try {
                b = pool.allocate(1);
            } finally {
                LifetimePool.afterCountedLiveForTest = null;
            }
            assertEquals(2 * g, used.get(), "MemoryUsed with a and b live");
            assertEquals(2 * g, server.getAttribute(local, "PeakMemoryUsed"), "read after that MemoryUsed");
            b.close();
        }
    }
}
