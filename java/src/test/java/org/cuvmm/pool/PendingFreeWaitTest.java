package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.gate;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * {@link VirtualMemoryPool#allocate(long)}'s javadoc: a host-ordered allocation that reuses
 * memory whose stream-ordered free is still pending waits on the calling thread for that
 * free's event; an interrupt does not end the wait and the interrupt flag is left as it was.
 */
class PendingFreeWaitTest {
    @Test
    void anInterruptedCallerWaitsForThePendingFreeAndKeepsItsFlag() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build();
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            long size = r.granularity();
            CountDownLatch hold = gate(s);
            AtomicReference<VirtualMemoryBuffer> got = new AtomicReference<>();
            AtomicReference<Throwable> failed = new AtomicReference<>();
            AtomicBoolean flagAfter = new AtomicBoolean();
            try {
                VirtualMemoryBuffer first = pool.allocate(size, s);
                first.close(s); // its free waits behind the gate: the only idle memory of its class is pending
                Thread caller = new Thread(() -> {
                    Thread.currentThread().interrupt();
                    try {
                        got.set(pool.allocate(size));
                    } catch (Throwable t) {
                        failed.set(t);
                    }
                    flagAfter.set(Thread.currentThread().isInterrupted());
                }, "pending-free-caller");
                caller.start();
                boolean sawWaiting = false;
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (!sawWaiting && caller.isAlive() && System.nanoTime() < deadline) {
                    for (StackTraceElement e : caller.getStackTrace()) {
                        if (e.getClassName().equals("org.cuvmm.Event") && e.getMethodName().equals("synchronize")) {
                            sawWaiting = true;
                        }
                    }
                    Thread.sleep(1);
                }
                assertTrue(sawWaiting, "the interrupted caller was never seen waiting for the pending free's event");
                Thread.sleep(50);
                assertTrue(caller.isAlive(), "the interrupt ended the wait before the free was done");
                hold.countDown();
                caller.join(TimeUnit.SECONDS.toMillis(30));
                assertFalse(caller.isAlive(), "the allocation did not return after the free was done");
                if (failed.get() != null) throw new AssertionError("the allocation failed", failed.get());
                assertNotNull(got.get());
                assertTrue(flagAfter.get(), "the interrupt flag is left as it was");
                assertEquals(1, pool.stats(PoolLifetime.LOCAL).hostWaits(), "one host-side wait for a pending free");
                got.get().close();
            } finally {
                hold.countDown();
                s.synchronize();
            }
        }
    }
}
