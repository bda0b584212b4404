package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@link SharingServer#close()} waits for its connections under one deadline, not one per
 * connection, and sends what is already queued without fds (the DROPs of an unpublish just
 * before) before it closes their sockets.
 */
class ServerCloseTest {
    private final ExecutorService pool = Executors.newCachedThreadPool();
    private final CountDownLatch unblock = new CountDownLatch(1);

    @AfterEach
    void tearDown() {
        unblock.countDown();
        SharingServer.closeWaitMillis = SharingServer.CLOSE_WAIT_MILLIS;
        SendQueue.beforeSend = (q, i) -> {};
        SendQueue.beforeDirectSend = (q, i) -> {};
        pool.shutdownNow();
    }

    /**
     * Three connections whose ends hang (a listener that blocks on each disconnect); with a
     * 500 ms deadline close() must return long before one old per-connection wait (5 s each,
     * 15 s in all) would have.
     */
    @Test
    void closeHasOneDeadlineForAllConnections() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        SharingServer.closeWaitMillis = 500;
        List<FdSocket> clients = new ArrayList<>();
        try {
            SharingServer server = SharingServer.builder(sock).listener(new SharingListener() {
                @Override
                public void disconnected(PeerCredentials peer, String clientName) {
                    try {
                        unblock.await(60, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            }).build();
            for (int i = 0; i < 3; i++) {
                FdSocket s = FdSocket.connect(sock);
                clients.add(s);
                s.send(frame(1, 1, str("c" + i)), null);
                try (Frame f = FrameIO.read(s)) {
                    assertEquals(FrameType.HELLO_OK, f.type);
                }
            }
            await("three connections", 10, () -> server.connectionCount() == 3);
            Future<?> closing = pool.submit(server::close);
            closing.get(8, TimeUnit.SECONDS); // old code: 3 x 5 s; TimeoutException fails the test
            assertFalse(Files.exists(sock), "the socket file is gone");
            Future<?> again = pool.submit(server::close); // idempotent, returns once the first is done
            again.get(8, TimeUnit.SECONDS);
        } finally {
            unblock.countDown();
            for (FdSocket s : clients) s.close();
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }

    /**
     * cuvmm serve's stop: unpublish (the holder's DROP is offered to its connection's queue),
     * then close at once. The writer that takes the DROP is held until the queue is finishing,
     * so close() always comes first: the old close() closed the socket under the queued DROP
     * (the send failed, the client read the end of the stream with no DROP; about one stop in
     * seven on a loaded machine without the hold, and in cuvmm serve's ServeStopTest in CI).
     * Now close() lets the writer send the fd-less frames queued before it closes the socket.
     */
    @Test
    void aDropQueuedByUnpublishGoesOutBeforeCloseEndsTheConnection() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer server = SharingServer.builder(sock).build();
            server.publish("t", buf);
            SharingClient c = SharingClient.connect(sock, "holder");
            CountDownLatch dropped = new CountDownLatch(1);
            c.addDropListener(notice -> dropped.countDown());
            Attachment a = c.attach("t", r);
            // Whichever writer takes the DROP (the sender thread, or the reader still in its
            // direct write of the DESCRIPTOR) waits until the connection is finishing: set by
            // close() itself now, by the reader's end after close() closed the socket before.
            java.util.function.BiConsumer<SendQueue, SendQueue.Item> holdDrop = (q, item) -> {
                byte[] f = item.frame(); // header: magic u32, version u16, type u16 (big-endian)
                if ((((f[6] & 0xff) << 8) | (f[7] & 0xff)) != FrameType.DROP.code()) return;
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10); // a bound, not an assertion
                while (!q.isFinishing() && System.nanoTime() < until) Thread.yield();
            };
            SendQueue.beforeSend = holdDrop;
            SendQueue.beforeDirectSend = holdDrop;
            assertTrue(server.unpublish("t"));
            server.close();
            await("the client sees the end of the stream", 10, () -> !c.isConnected());
            // The stream is read in order: a DROP sent before the end was dispatched before it.
            assertTrue(a.isDropped(), "the lease holder read the end of the stream with no DROP before it");
            assertTrue(dropped.await(10, TimeUnit.SECONDS), "the drop listener ran");
            a.close();
            c.close();
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        assertFdsBack(base, "after the server closed under a dropped lease");
    }
}
