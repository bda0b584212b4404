package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The server's only accepting thread must outlive an Error thrown on its path, including
 * one thrown by the logger itself. An independent probe at the fd limit saw
 * java.util.logging's formatter throw an Error (EMFILE while it loaded the time-zone data),
 * and the accept thread died for good: later clients connected into the backlog and were
 * never answered. Here a listener throws an Error on the first connection and every log
 * call throws too (test seam {@link SharingServer#beforeLog}); the second client must be served, and the failed connection must not
 * count against the connection limit.
 */
class AcceptLoopSurvivesTest {
    private Path sock;
    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        SharingServer.beforeLog = () -> {
            throw new Error("a broken logger (a test)");
        };
    }

    @AfterEach
    void tearDown() {
        SharingServer.beforeLog = null;
        ServerConnection.beforeReaderStart = null;
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void anErrorFromAListenerAndFromTheLoggerStopsNoAccepting() throws Exception {
        AtomicInteger connects = new AtomicInteger();
        SharingListener breaksOnce = new SharingListener() {
            @Override
            public void connected(PeerCredentials peer) {
                if (connects.incrementAndGet() == 1) throw new Error("a listener that breaks (a test)");
            }
        };
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).listener(breaksOnce).build()) {
            server.publish("b", b);
            for (int i = 0; i < 2; i++) {
                try (SharingClient c = SharingClient.builder(sock).timeout(Duration.ofSeconds(5)).build();
                     Attachment a = c.attach("b", r)) {
                    assertEquals(b.size(), a.buffer().size(), "client " + (i + 1) + " served");
                }
            }
            assertEquals(2, connects.get());
            await("every connection ended and none left counted", 10, () -> server.connectionCount() == 0);
        }
    }

    /**
     * A connection whose reader thread cannot start (its sender already running): the client
     * sees the connection closed, the next client is served, the failed one is not counted
     * against the limit, its sender thread ends, and the listeners see it go.
     */
    @Test
    void aConnectionWhoseThreadsCannotStartLeavesNothingBehind() throws Exception {
        long sendersBefore = senderThreads();
        AtomicInteger connected = new AtomicInteger();
        AtomicInteger disconnected = new AtomicInteger();
        SharingListener counts = new SharingListener() {
            @Override
            public void connected(PeerCredentials peer) { connected.incrementAndGet(); }

            @Override
            public void disconnected(PeerCredentials peer, String clientName) { disconnected.incrementAndGet(); }
        };
        ServerConnection.beforeReaderStart = () -> {
            ServerConnection.beforeReaderStart = null; // the first connection only
            throw new OutOfMemoryError("unable to create native thread (a test)");
        };
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).maxConnections(1).listener(counts).build()) {
            server.publish("b", b);
            assertThrows(java.io.IOException.class,
                    () -> SharingClient.builder(sock).timeout(Duration.ofSeconds(5)).build().close());
            try (SharingClient c = SharingClient.builder(sock).timeout(Duration.ofSeconds(5)).build();
                 Attachment a = c.attach("b", r)) {
                assertEquals(b.size(), a.buffer().size(), "the next client served, the limit of 1 not used up");
            }
            await("every connection ended and none left counted", 10, () -> server.connectionCount() == 0);
            await("both connections reported gone", 10, () -> disconnected.get() == 2);
            assertEquals(2, connected.get());
        }
        await("the failed connection's sender thread ended", 10, () -> senderThreads() <= sendersBefore);
    }

    private static long senderThreads() {
        return Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.getName().startsWith("cuvmm-ipc-conn-") && t.getName().endsWith("-write")).count();
    }
}
