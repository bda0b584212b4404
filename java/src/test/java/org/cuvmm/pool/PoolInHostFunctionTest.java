package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

import javax.management.Attribute;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * Pool calls from inside a host function, where no CUDA call may be made (Stream.launchHostFunction).
 * An independent probe found setRetentionCap, the beans' RetentionCap and stats() (taking back a
 * leak) unmapping and releasing memory on the host-function thread. Now setRetentionCap is refused
 * there as trim() is, and every release that comes due there goes to cuvmm's release thread.
 */
class PoolInHostFunctionTest {
    private static final long MiB = 1L << 20;
    private static final int WAIT_SECONDS = 30;

    /** Runs {@code action} in a host function and returns what it returned or threw. */
    private static Object inHostFunction(Supplier<Object> action) {
        AtomicReference<Object> out = new AtomicReference<>();
        try (Stream s = Stream.create(0)) {
            s.launchHostFunction(() -> {
                try {
                    out.set(action.get());
                } catch (Throwable t) {
                    out.set(t);
                }
            });
            s.synchronize();
        }
        return out.get();
    }

    private static void idle(VirtualMemoryPool pool, int n) {
        List<VirtualMemoryBuffer> bs = new ArrayList<>();
        for (int i = 0; i < n; i++) bs.add(pool.allocate(MiB));
        for (VirtualMemoryBuffer b : bs) b.close(); // host-ordered: no event, released at once when due
    }

    @Test
    void setRetentionCapIsRefusedInAHostFunctionAsTrimIs() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
            idle(pool, 4);
            long released = PoolTestSupport.counters().calls("cuMemRelease");
            Object out = inHostFunction(() -> pool.setRetentionCap(PoolLifetime.LOCAL, 0));
            assertTrue(out instanceof IllegalStateException, String.valueOf(out));
            assertTrue(((Exception) out).getMessage().startsWith("VirtualMemoryPool.setRetentionCap: called from a host "
                    + "function"), ((Exception) out).getMessage());
            assertEquals(4, pool.stats(PoolLifetime.LOCAL).retainedCount(), "nothing was released");
            assertEquals(released, PoolTestSupport.counters().calls("cuMemRelease"));
            long retained = pool.stats(PoolLifetime.LOCAL).retainedBytes();
            assertTrue(retained >= 4 * MiB, "4 idle buffers: " + retained + " bytes");
            assertEquals(retained, pool.setRetentionCap(PoolLifetime.LOCAL, 0), "outside, it releases");
        }
    }

    @Test
    void theBeansRetentionCapIsRefusedAndItsReadsWorkInAHostFunction() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).name("in-host-function")
                     .registerMBeans(true).build()) {
            idle(pool, 3);
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            ObjectName name = pool.objectName(PoolLifetime.LOCAL);
            Object set = inHostFunction(() -> {
                try {
                    server.setAttribute(name, new Attribute("RetentionCap", 0L));
                    return null;
                } catch (Exception e) {
                    return e;
                }
            });
            assertNotNull(set, "the bean's setter was refused");
            assertTrue(String.valueOf(set).contains("called from a host function")
                    || String.valueOf(((Exception) set).getCause()).contains("called from a host function"), String.valueOf(set));
            Object read = inHostFunction(() -> {
                try {
                    return server.getAttribute(name, "RetainedCount");
                } catch (Exception e) {
                    return e;
                }
            });
            assertEquals(3L, ((Number) read).longValue(), String.valueOf(read));
            assertEquals(3, pool.stats(PoolLifetime.LOCAL).retainedCount());
        }
    }

    @Test
    void aLeakTakenBackByStatsInAHostFunctionIsReleasedOnTheReleaseThread() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).retentionCap(PoolLifetime.LOCAL, 0).build();
            try {
                long liveBefore = PoolTestSupport.counters().liveAllocations();
                PoolTestSupport.leakOneAndAwaitItsWatch(pool);
                Object out = inHostFunction(() -> pool.stats(PoolLifetime.LOCAL));
                assertTrue(out instanceof PoolStats, String.valueOf(out));
                PoolStats s = (PoolStats) out;
                assertEquals(1, s.leaks(), "stats() took the leak back: " + s);
                assertEquals(1, s.deferredReleases(), "its release was handed to the release thread: " + s);
                pool.awaitDeferredReleases(WAIT_SECONDS);
                assertEquals(liveBefore, PoolTestSupport.counters().liveAllocations(), "released once, there");
            } finally {
                pool.close();
            }
        }
    }

    /** A guard, not a reproduction: a buffer's close in a host function already went to another thread. */
    @Test
    void aReturnThatEvictsInAHostFunctionHandsTheReleaseOver() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).retentionCap(PoolLifetime.LOCAL, 0).build()) {
            long liveBefore = PoolTestSupport.counters().liveAllocations();
            VirtualMemoryBuffer b = pool.allocate(MiB);
            Object out = inHostFunction(() -> {
                b.close(); // cap 0: the return releases the memory
                return null;
            });
            assertNull(out);
            pool.awaitDeferredReleases(WAIT_SECONDS);
            assertEquals(liveBefore, PoolTestSupport.counters().liveAllocations(), "released once");
        }
    }
}
