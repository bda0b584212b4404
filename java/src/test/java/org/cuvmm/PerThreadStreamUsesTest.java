package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * A buffer records one use, and holds one event, per stream it was used on, and forgets the
 * uses of closed streams once their work completed (StreamUses: "so that a buffer used with a
 * new stream per task keeps a bounded record"). The per-thread stream ({@link Stream#perThread})
 * is a stream of its own on every thread, keyed per thread, and never closes: a long-lived
 * buffer used through it from short-lived threads (a thread per task) kept one use and one
 * CUDA event per thread it ever saw, until its own close (50 threads: 50 uses, 50
 * cuEventCreate). The per-thread stream of a thread that has ended now counts as closed.
 */
class PerThreadStreamUsesTest {
    private static void onANewThread(Runnable body) throws InterruptedException {
        Thread t = new Thread(body, "a short-lived thread");
        t.start();
        t.join(TimeUnit.SECONDS.toMillis(StreamTestSupport.WAIT_SECONDS));
        assertFalse(t.isAlive(), "the thread did not end");
    }

    @Test
    void theUsesOfEndedThreadsPerThreadStreamsAreForgottenOnceComplete() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity())) {
            for (int i = 0; i < 20; i++) {
                onANewThread(() -> {
                    Stream mine = Stream.perThread(0);
                    b.fillAsync(0, 64, (byte) 1, mine);
                    mine.synchronize();
                });
            }
            assertEquals(1, b.streamUsesIfAny().size(), "uses kept after 20 threads, each of which used the buffer "
                    + "on its per-thread stream, waited for it and ended (only the last one's is left: nothing "
                    + "used the buffer on a new stream after it)");
        }
    }

    /** Late, never early: an ended thread's use whose work has not completed is kept, and close waits for it. */
    @Test
    void anEndedThreadsUseIsKeptWhileItsWorkRuns() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            CountDownLatch gate = new CountDownLatch(1);
            onANewThread(() -> {
                Stream mine = Stream.perThread(0);
                mine.launchHostFunction(() -> StreamTestSupport.await(gate, "the gate"));
                b.fillAsync(0, 64, (byte) 7, mine); // held behind the gate; the thread ends without waiting
            });
            onANewThread(() -> {
                Stream mine = Stream.perThread(0);
                b.fillAsync(64, 64, (byte) 1, mine); // a first use: prunes what it may
                mine.synchronize();
            });
            assertEquals(2, b.streamUsesIfAny().size(), "the ended thread's use was forgotten while its work was queued");
            Thread closer = new Thread(b::close, "closer");
            closer.start();
            closer.join(200);
            assertTrue(closer.isAlive(), "close() returned while the ended thread's fill was still held");
            gate.countDown();
            closer.join(TimeUnit.SECONDS.toMillis(StreamTestSupport.WAIT_SECONDS));
            assertFalse(closer.isAlive(), "close() did not return after the gate opened");
        }
    }
}
