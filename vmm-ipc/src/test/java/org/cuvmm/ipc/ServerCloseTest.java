package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** {@link SharingServer#close()} waits for its connections under one deadline, not one per connection. */
class ServerCloseTest {
    private final ExecutorService pool = Executors.newCachedThreadPool();
    private final CountDownLatch unblock = new CountDownLatch(1);

    @AfterEach
    void tearDown() {
        unblock.countDown();
        SharingServer.closeWaitMillis = SharingServer.CLOSE_WAIT_MILLIS;
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
}
