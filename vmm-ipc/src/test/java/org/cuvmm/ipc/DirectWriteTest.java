package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The connection's reader writes a reply itself when nothing else is being sent ({@link
 * SendQueue#flush()}, the "direct write"), and leaves it to the sender thread otherwise: frames
 * still leave in queue order (a reply, a DROP or EVICT offered meanwhile), a full socket hands
 * the rest to the sender thread without reordering or cutting a frame, and once the queue is
 * finishing no frame with fds is sent, whoever holds the writer token (docs/PROTOCOL.md section
 * 12, "Threads").
 */
class DirectWriteTest {
    @AfterEach
    void tearDown() {
        SendQueue.beforeSend = (q, i) -> {};
        SendQueue.beforeDirectSend = (q, i) -> {};
        SendQueue.directWrites = true;
    }

    /**
     * Starts the sender thread and waits (bounded) until it is parked with nothing to send:
     * a thread that starts late would otherwise find the test's first item queued and take it
     * itself, before the direct write the test is about (seen once in a CI run).
     */
    private static void startParked(SendQueue q) throws InterruptedException {
        q.start();
        IpcTestSupport.await("the sender thread to park", 10, () -> q.writerState() == Thread.State.WAITING);
    }

    private static byte[] msg(int seq, int length) {
        ByteBuffer b = ByteBuffer.allocate(length);
        b.putInt(seq);
        while (b.hasRemaining()) b.put((byte) seq);
        return b.array();
    }

    private static int seqOf(ReceivedMessage m) { return seqOf(m.data()); }

    private static int seqOf(byte[] frame) { return ByteBuffer.wrap(frame).getInt(0); }

    /** An fd-less item whose owner counts its releases. */
    private static SendQueue.Item item(byte[] frame, AtomicInteger releases) {
        return new SendQueue.Item(frame, null, releases::incrementAndGet);
    }

    @Test
    void aReplyIsWrittenByTheReaderWithoutTheSenderThread() throws Exception {
        FdSocket[] p = FdSocket.pair();
        AtomicInteger senderTook = new AtomicInteger();
        SendQueue.beforeSend = (q, i) -> senderTook.incrementAndGet();
        SendQueue q = new SendQueue(p[0], 8, "direct-test-write");
        startParked(q);
        try (FdSocket peer = p[1]) {
            AtomicInteger released = new AtomicInteger();
            assertTrue(q.put(item(msg(1, 24), released)));
            try (ReceivedMessage m = peer.receive(24)) {
                assertEquals(1, seqOf(m));
            }
            assertEquals(0, senderTook.get(), "the sender thread took the reply: no direct write");
            assertEquals(1, q.directSends());
            assertEquals(1, released.get(), "the item's owner is released once it is sent");
            q.finish();
            q.join(5000);
            assertFalse(q.isAlive());
        }
    }

    @Test
    void aDropOfferedDuringADirectWriteFollowsItAndPrecedesTheNextReply() throws Exception {
        FdSocket[] p = FdSocket.pair();
        SendQueue q = new SendQueue(p[0], 8, "direct-test-write");
        q.start();
        AtomicInteger released = new AtomicInteger();
        // While the reader holds the token for reply 1, another thread offers DROP 2: it must
        // not overtake reply 1, and reply 3 (put afterwards) must not overtake it.
        SendQueue.beforeDirectSend = (queue, i) -> {
            if (seqOf(i.frame()) != 1) return;
            Thread t = new Thread(() -> queue.offer(item(msg(2, 40), released)));
            t.start();
            try {
                t.join(10_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
        try (FdSocket peer = p[1]) {
            assertTrue(q.put(item(msg(1, 24), released)));
            assertTrue(q.put(item(msg(3, 24), released)));
            try (ReceivedMessage a = peer.receive(24); ReceivedMessage b = peer.receive(40);
                 ReceivedMessage c = peer.receive(24)) {
                assertEquals(1, seqOf(a));
                assertEquals(2, seqOf(b), "the DROP offered during the direct write came second");
                assertEquals(3, seqOf(c));
            }
            IpcTestSupport.await("every item released", 10, () -> released.get() == 3);
        } finally {
            q.finish();
            q.join(5000);
        }
    }

    /**
     * While the sender thread holds the token (stalled on an EVICT it took), a reply the reader
     * queues is not written directly: it follows the EVICT.
     */
    @Test
    void aReplyQueuedWhileTheSenderThreadSendsFollowsWhatItTook() throws Exception {
        FdSocket[] p = FdSocket.pair();
        SendQueue q = new SendQueue(p[0], 8, "direct-test-write");
        CountDownLatch senderHolds = new CountDownLatch(1);
        CountDownLatch go = new CountDownLatch(1);
        SendQueue.beforeSend = (queue, i) -> {
            if (seqOf(i.frame()) != 1) return;
            senderHolds.countDown();
            try {
                go.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
        q.start();
        AtomicInteger released = new AtomicInteger();
        try (FdSocket peer = p[1]) {
            assertTrue(q.offer(item(msg(1, 40), released))); // an EVICT from a release notice
            assertTrue(senderHolds.await(10, TimeUnit.SECONDS));
            assertTrue(q.put(item(msg(2, 24), released))); // the reader's reply: queued behind
            assertEquals(0, q.directSends(), "written directly while the sender thread held the token");
            go.countDown();
            try (ReceivedMessage a = peer.receive(40); ReceivedMessage b = peer.receive(24)) {
                assertEquals(1, seqOf(a));
                assertEquals(2, seqOf(b));
            }
        } finally {
            go.countDown();
            q.finish();
            q.join(5000);
        }
    }

    /**
     * A peer that does not read: direct writes fill the socket, the frame that does not fit
     * (whole or the rest of it) goes to the sender thread, first in line; when the peer reads,
     * every frame arrives whole and in order.
     */
    @Test
    void aFullSocketHandsTheRestToTheSenderThreadInOrder() throws Exception {
        FdSocket[] p = FdSocket.pair();
        // Room for every frame in the queue (put never waits: nobody reads yet), and 1.6 MiB
        // of frames, more than a Unix socket's send buffer (about 200 KiB by default).
        SendQueue q = new SendQueue(p[0], 512, "direct-test-write");
        AtomicInteger senderTook = new AtomicInteger();
        SendQueue.beforeSend = (queue, i) -> senderTook.incrementAndGet();
        q.start();
        int frames = 400;
        int length = 4099; // not a divisor of the socket buffer: a partial send is likely
        AtomicInteger released = new AtomicInteger();
        try (FdSocket peer = p[1]) {
            for (int i = 0; i < frames; i++) assertTrue(q.put(item(msg(i, length), released)));
            assertTrue(q.directSends() > 0, "no direct write");
            // The frames that did not fit are queued when put returns; the sender thread takes
            // the first of them when it next runs (it may not have run yet).
            IpcTestSupport.await("the socket to fill and the sender thread to take the rest (" + q.directSends()
                    + " direct writes)", 10, () -> senderTook.get() > 0);
            for (int i = 0; i < frames; i++) {
                try (ReceivedMessage m = peer.receive(length)) {
                    assertArrayEquals(msg(i, length), m.data(), "frame " + i);
                }
            }
            IpcTestSupport.await("every item released", 10, () -> released.get() == frames);
        } finally {
            q.finish();
            q.join(5000);
        }
    }

    /**
     * The connection starts ending (the watchdog's finish) while the reader is writing frames
     * directly: the frame being written when it came completes, the DESCRIPTOR queued behind it
     * is never sent (its fds closed), nothing is queued any more, and the socket closes.
     */
    @Test
    void endingDuringADirectWriteSendsNoFrameWithFdsAfterIt() throws Exception {
        FdSocket[] p = FdSocket.pair();
        SendQueue q = new SendQueue(p[0], 8, "direct-test-write");
        startParked(q);
        int[] pipe = IpcTestSupport.pipe();
        AtomicInteger released = new AtomicInteger();
        AtomicInteger descriptorReleased = new AtomicInteger();
        SendQueue.beforeDirectSend = (queue, i) -> {
            if (seqOf(i.frame()) == 1) queue.finish();
        };
        try (FdSocket peer = p[1]) {
            NativeIo.closeQuietly(pipe[1]);
            assertTrue(q.tryOffer(item(msg(1, 24), released)));
            assertTrue(q.tryOffer(new SendQueue.Item(msg(2, 48), new int[] {pipe[0]}, () -> {
                descriptorReleased.incrementAndGet();
                NativeIo.closeQuietly(pipe[0]);
            })));
            q.flush();
            assertFalse(q.put(item(msg(3, 24), released)), "queued after finish()");
            try (ReceivedMessage a = peer.receive(24)) {
                assertEquals(1, seqOf(a), "the frame being written when finish() came");
                assertEquals(0, a.fdCount());
            }
            try (ReceivedMessage end = peer.receive(48)) {
                assertTrue(end.endOfStream(), "after the ending: " + end);
                assertEquals(0, end.length(), "a frame after the ending");
                assertEquals(0, end.fdCount(), "fds sent after the ending");
            }
            q.join(5000);
            assertFalse(q.isAlive());
            assertEquals(1, descriptorReleased.get(), "the DESCRIPTOR's fds closed exactly once");
            assertFalse(IpcTestSupport.isOpen(pipe[0]));
            assertEquals(2, released.get(), "frames 1 and 3 released");
            assertEquals(1, q.directSends());
        }
    }

    /** finish() comes while the reader is about to write a frame with fds directly: it is not sent. */
    @Test
    void aFrameWithFdsIsNotWrittenDirectlyOnceEnding() throws Exception {
        FdSocket[] p = FdSocket.pair();
        SendQueue q = new SendQueue(p[0], 8, "direct-test-write");
        startParked(q);
        int[] pipe = IpcTestSupport.pipe();
        AtomicInteger released = new AtomicInteger();
        SendQueue.beforeDirectSend = (queue, i) -> {
            if (i.fds() != null) queue.finish();
        };
        try (FdSocket peer = p[1]) {
            NativeIo.closeQuietly(pipe[1]);
            q.tryOffer(new SendQueue.Item(msg(7, 48), new int[] {pipe[0]}, () -> {
                released.incrementAndGet();
                NativeIo.closeQuietly(pipe[0]);
            }));
            q.flush();
            try (ReceivedMessage end = peer.receive(48)) {
                assertTrue(end.endOfStream());
                assertEquals(0, end.length());
                assertEquals(0, end.fdCount());
            }
            q.join(5000);
            assertEquals(1, released.get());
            assertEquals(0, q.directSends());
        }
    }
}
