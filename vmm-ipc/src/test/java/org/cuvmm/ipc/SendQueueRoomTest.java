package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link SendQueue#awaitRoom}: the connection's reader waits there, before an ATTACH, for
 * room in a full queue (a consumer that stops reading). It must wait while the queue is full
 * (in the condition, not by polling), return as soon as the peer reads and the sender thread
 * takes items, and return when the writer dies (the peer gone).
 */
class SendQueueRoomTest {
    private static final int CAPACITY = 4;

    /**
     * Offers 60 KB frames until the socket's buffers and then the queue are full and stay
     * full for 300 ms (the sender thread blocked in send: the queue fills before the socket
     * does, and the writer keeps taking items until the socket is full too).
     */
    private static void fill(SendQueue q) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        long fullSince = 0;
        for (;;) {
            long now = System.nanoTime();
            if (now > until) throw new AssertionError("the queue never stayed full");
            if (q.offer(new SendQueue.Item(new byte[60_000], null, null))) {
                fullSince = 0;
                continue;
            }
            if (fullSince == 0) fullSince = now;
            else if (now - fullSince > TimeUnit.MILLISECONDS.toNanos(300)) return;
            Thread.sleep(5);
        }
    }

    /**
     * Starts {@code q}'s sender thread, fills the socket and the queue, starts a thread in
     * {@code awaitRoom(2)} and checks (after {@code settleMillis}) that it still waits.
     */
    private static CompletableFuture<Void> fullQueueWithAWaiter(SendQueue q, long settleMillis) throws Exception {
        q.start();
        fill(q);
        CompletableFuture<Void> done = awaitRoomOnAThread(q);
        Thread.sleep(settleMillis);
        assertFalse(done.isDone(), "awaitRoom returned with the queue full");
        return done;
    }

    private static CompletableFuture<Void> awaitRoomOnAThread(SendQueue q) {
        CompletableFuture<Void> done = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            q.awaitRoom(2);
            done.complete(null);
        }, "room-test-reader");
        t.setDaemon(true);
        t.start();
        return done;
    }

    private java.util.Map<String, Integer> fds;
    private FdSocket[] p;
    private SendQueue q;

    @BeforeEach
    void setUp() throws Exception {
        fds = IpcTestSupport.fdSnapshot();
        p = FdSocket.pair();
        q = new SendQueue(p[0], CAPACITY, "room-test-write");
    }

    /**
     * Closes the pair and waits until both fds are really closed: a thread still inside a call
     * on a socket (the sender blocked in send, the peer's reader in receive) closes it as it
     * leaves, after close() returned. Without the wait a later test's fd baseline counted
     * them and then saw them go (FdSocketTest in CI: {socket=2 -> 1}).
     */
    @AfterEach
    void tearDown() throws InterruptedException {
        p[0].close();
        p[1].close();
        IpcTestSupport.assertFdsBack(fds, "after the test's socket pair was closed");
    }

    @Test
    void waitsWhileFullAndReturnsOnceThePeerReads() throws Exception {
        CompletableFuture<Void> done = fullQueueWithAWaiter(q, 300);
        assertEquals(0, q.remainingCapacity());
        // Waiting in the queue's condition (woken by a take), not sleeping in a poll loop.
        Thread waiter = Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.getName().equals("room-test-reader")).findFirst().orElseThrow();
        String stack = java.util.Arrays.toString(waiter.getStackTrace());
        assertTrue(stack.contains("awaitNanos") && !stack.contains("Thread.sleep"), stack);
        // The peer reads: the sender thread sends, takes the next items, and signals room.
        Thread drain = new Thread(() -> {
            try {
                for (;;) {
                    if (p[1].receive(65_536, 0).endOfStream()) return;
                }
            } catch (java.io.IOException e) {
                // closed by the test's end
            }
        }, "room-test-peer");
        drain.setDaemon(true);
        drain.start();
        done.get(10, TimeUnit.SECONDS);
        q.finish();
    }

    @Test
    void returnsWhenTheWriterDies() throws Exception {
        CompletableFuture<Void> done = fullQueueWithAWaiter(q, 200);
        p[1].close(); // the peer is gone: the blocked send fails, the writer dies
        done.get(10, TimeUnit.SECONDS);
        IpcTestSupport.await("the writer to die", 10, q::isDead);
        assertTrue(q.isDead());
    }
}
