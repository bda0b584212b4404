package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A DROP that finds its connection's send queue full (of replies to a client that pipelines
 * requests, and reads) is sent once room frees, not lost (an independent probe lost 1 in 500
 * that way), even when it is parked right after the queue drained. The queue is held full
 * by stalling the connection's sender thread (test seams: no direct writes, a blocking
 * {@link SendQueue#beforeSend}).
 */
class DropQueueFullTest {
    private static final int PIPELINED = 300; // more replies than the queue's 256 frames

    private Path sock;
    private Map<String, Integer> fds;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        fds = IpcTestSupport.fdSnapshot();
    }

    @AfterEach
    void tearDown() throws Exception {
        SendQueue.directWrites = true;
        SendQueue.beforeSend = (q, i) -> {};
        ServerConnection.afterNoticeRefused = null;
        IpcTestSupport.deleteTree(sock.getParent());
        IpcTestSupport.assertFdsBack(fds, "after the test");
    }

    @Test
    void aDropThatFindsTheQueueFullIsSentOnceRoomFrees() throws Exception {
        // 300 requests: the reader fills the queue and waits for room, so it also looks at the
        // parked DROP after its next frame.
        assertEquals(1, dropsSeen(PIPELINED, false), "the DROP of the held lease, after the replies queued before it");
    }

    /**
     * The DROP's offer is refused, and before it is parked again the writer sends everything
     * queued (its looks after each take find nothing parked); the reader has answered every
     * request (257: one in the stalled sender's hand, 256 queued) and reads nothing more. The
     * offering thread must look again after parking it: the DROP was stranded until the
     * client's next frame (found by a review of the parking change).
     */
    @Test
    void aDropParkedJustAfterTheQueueDrainedIsStillSent() throws Exception {
        assertEquals(1, dropsSeen(257, true), "the DROP parked after the last take, sent all the same");
    }

    /**
     * Holds a lease on "x", stalls the sender, pipelines {@code pipelined} ATTACHes of an
     * unknown name until the queue is full, unpublishes "x" and lets the sender go (with
     * {@code drainBeforePark}: only once the refused DROP's offer returned, and the DROP is
     * parked again only once the queue is empty), and counts the DROPs the client reads
     * without sending anything more.
     */
    private int dropsSeen(int pipelined, boolean drainBeforePark) throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer x = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("x", x);
            try (FdSocket s = FdSocket.connect(sock)) {
                long lease = IpcTestSupport.helloAndAttachV1(s, "drop-queue-full", "x");

                CountDownLatch go = new CountDownLatch(1);
                AtomicReference<SendQueue> stalled = new AtomicReference<>();
                SendQueue.directWrites = false;
                SendQueue.beforeSend = (q, item) -> {
                    stalled.compareAndSet(null, q);
                    try {
                        go.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                };
                int id = 3;
                for (int i = 0; i < pipelined; i++) s.send(IpcTestSupport.frame(3, id++, str("nope")), null);
                // The sender holds its first frame; the reader fills the queue (256).
                IpcTestSupport.await("the connection's send queue full", 20,
                        () -> stalled.get() != null && stalled.get().size() >= 256);
                if (drainBeforePark) {
                    ServerConnection.afterNoticeRefused = () -> {
                        ServerConnection.afterNoticeRefused = null;
                        go.countDown();
                        long until = System.nanoTime() + 10_000_000_000L; // a bound, not an assertion
                        while (stalled.get().size() > 0 && System.nanoTime() < until) Thread.onSpinWait();
                        try {
                            Thread.sleep(100); // the writer's look after its last take is over
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    };
                }
                assertTrue(server.unpublish("x"));
                go.countDown();

                int drops = 0;
                int replies = 0;
                long deadline = System.nanoTime() + 20_000_000_000L;
                while (replies < pipelined || System.nanoTime() < deadline) {
                    Frame f;
                    try {
                        f = FrameIO.readBefore(s, 1, 1, deadline);
                    } catch (FrameIO.Stalled e) {
                        break;
                    }
                    if (f == null) break;
                    try (f) {
                        if (f.type == FrameType.DROP) {
                            drops++;
                            assertEquals(lease, ((Messages.Drop) f.message).leaseId());
                        } else {
                            replies++;
                        }
                    }
                    if (replies == pipelined) deadline = Math.min(deadline, System.nanoTime() + 1_000_000_000L);
                }
                assertEquals(pipelined, replies, "every pipelined request answered");
                return drops;
            } finally {
                SendQueue.directWrites = true;
                SendQueue.beforeSend = (q, i) -> {};
                ServerConnection.afterNoticeRefused = null;
            }
        }
    }
}
