package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.gate;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A pooled buffer leaked with stream work still queued on it comes back to the pool only
 * after that work, as a leaked unpooled buffer's cleaner waits for it (VMM_DESIGN, leaks).
 * It used to come back at once (an independent probe): the next owner of the memory had its
 * bytes overwritten by the leaked owner's fill, and a trim() released the memory under the
 * queued fill, which then faulted the device (a sticky CUDA_ERROR_ILLEGAL_ADDRESS).
 */
class PoolLeakStreamWorkTest {
    /** A pooled buffer with a fill queued on the (held) stream, dropped without close; its address. */
    private static long leakWithQueuedFill(VirtualMemoryPool pool, long size, Stream stream) {
        VirtualMemoryBuffer b = pool.allocate(size);
        b.fillAsync(0, size, (byte) 0x55, stream);
        return b.address();
    }

    /** Collects until the pool has found the leak (counted when found, before the slot comes back). */
    private static void awaitLeakFound(VirtualMemoryPool pool) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (pool.stats(PoolLifetime.LOCAL).leaks() < 1 && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20); // stats() is a slow path: it reads the pool's leak queue
        }
        assertEquals(1, pool.stats(PoolLifetime.LOCAL).leaks(), "the leak was found");
    }

    @Test
    void theNextOwnerDoesNotGetMemoryUnderTheLeakedOwnersQueuedFill() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("leak-stream").build();
             Stream stream = Stream.create(0)) {
            long g = resource.granularity();
            CountDownLatch gate = gate(stream);
            try {
                long leakedAt = leakWithQueuedFill(pool, g, stream);
                awaitLeakFound(pool);
                try (VirtualMemoryBuffer next = pool.allocate(g)) {
                    assertTrue(next.address() != leakedAt, "the leaked memory is not handed out while its fill is "
                            + "queued");
                    next.fill((byte) 0x11);
                    gate.countDown();
                    stream.synchronize();
                    byte[] bytes = new byte[(int) g];
                    next.copyTo(bytes);
                    int overwritten = 0;
                    for (byte x : bytes) if (x != 0x11) overwritten++;
                    assertEquals(0, overwritten, "bytes of the next owner overwritten by the leaked owner's fill");
                }
            } finally {
                gate.countDown();
            }
            // Once the fill ran, the slot comes back (on the release thread) and is reused.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (pool.stats(PoolLifetime.LOCAL).retainedCount() < 2 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertEquals(2, pool.stats(PoolLifetime.LOCAL).retainedCount(), "both slots idle in the pool");
        }
    }

    @Test
    void aTrimDoesNotReleaseMemoryUnderTheLeakedOwnersQueuedFill() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("leak-trim").build();
             Stream stream = Stream.create(0)) {
            long g = resource.granularity();
            CountDownLatch gate = gate(stream);
            try {
                leakWithQueuedFill(pool, g, stream);
                awaitLeakFound(pool);
                assertEquals(0, pool.trim(), "nothing idle to release: the leaked slot waits for its fill");
            } finally {
                gate.countDown();
            }
            stream.synchronize(); // CUDA_ERROR_ILLEGAL_ADDRESS when the fill ran on released memory
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            long trimmed = 0;
            while (trimmed == 0 && System.nanoTime() < deadline) {
                Thread.sleep(10);
                trimmed = pool.trim();
            }
            assertEquals(g, trimmed, "after the fill the slot came back and a trim releases it");
        }
    }
}
