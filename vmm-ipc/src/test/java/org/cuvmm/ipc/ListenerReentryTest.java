package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Listeners that call back into the library (an independent soak probe found each of these
 * stalling or failing): a DROP listener that re-attaches at the connection's id limit, a
 * server listener that closes the server, a DROP listener that throws an Error, and a client
 * timeout of centuries at the id limit.
 */
class ListenerReentryTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
    }

    @AfterEach
    void tearDown() {
        IpcTestSupport.deleteTree(sock.getParent());
    }

    /**
     * The attach is refused TOO_MANY_IDS, the cache gives back its idle mappings and waits for
     * FORGOTTEN: the FORGET goes out from the listener's own thread (the event thread). It was
     * queued behind the listener, and the attach waited its whole timeout, then failed.
     */
    @Test
    void aDropListenerAttachesAtTheIdLimit() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b0 = resource.allocate(resource.granularity());
             VirtualMemoryBuffer b1 = resource.allocate(resource.granularity());
             VirtualMemoryBuffer b2 = resource.allocate(resource.granularity());
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(2).build();
             SharingClient client = SharingClient.builder(sock).protocolVersion(2).timeout(Duration.ofSeconds(20))
                     .build()) {
            server.publish("n0", b0);
            server.publish("n1", b1);
            server.publish("n2", b2);
            Attachment held = client.attach("n0", resource);
            client.attach("n1", resource).close(); // an idle cached entry: 2 ids held, the limit
            CompletableFuture<String> result = new CompletableFuture<>();
            client.addDropListener(notice -> {
                long start = System.nanoTime();
                try {
                    notice.attachment().close();
                    try (Attachment next = client.attach("n2", resource)) {
                        result.complete("attached " + next.name());
                    }
                } catch (Exception e) {
                    result.complete("failed after " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start) + " ms: "
                            + e);
                }
            });
            server.unpublish("n0");
            assertEquals("attached n2", result.get(60, TimeUnit.SECONDS));
            assertTrue(held.isClosed());
        }
    }

    /**
     * close() from a listener on a connection's reader thread does not wait for that thread
     * (it joined itself for the whole close timeout, 10 s).
     */
    @Test
    void aListenerClosesTheServer() throws Exception {
        long closeWait = SharingServer.closeWaitMillis;
        // A minute: a close that waits for its own thread waits all of it; one that does not
        // returns in milliseconds. The bound below sits halfway.
        SharingServer.closeWaitMillis = 60_000;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = resource.allocate(resource.granularity())) {
            CompletableFuture<Long> closeMillis = new CompletableFuture<>();
            SharingServer server = SharingServer.builder(sock).build();
            server.addListener(new SharingListener() {
                @Override
                public void released(LeaseEvent e) {
                    long start = System.nanoTime();
                    server.close();
                    closeMillis.complete(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
                }
            });
            server.publish("b", b);
            try (SharingClient client = SharingClient.connect(sock)) {
                client.attach("b", resource).close();
            }
            long took = closeMillis.get(120, TimeUnit.SECONDS);
            assertTrue(took < 30_000, "close() from the reader's listener took " + took + " ms (it waited for its own "
                    + "thread)");
            assertTrue(server.isClosed());
        } finally {
            SharingServer.closeWaitMillis = closeWait;
        }
    }

    /** Every DROP listener hears the DROP, even after one threw an Error. */
    @Test
    void aDropListenerThatThrowsAnErrorDoesNotSilenceTheOthers() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = resource.allocate(resource.granularity());
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient client = SharingClient.connect(sock)) {
            List<Long> heard = new CopyOnWriteArrayList<>();
            client.addDropListener(notice -> {
                throw new AssertionError("a listener's own failure");
            });
            client.addDropListener(notice -> heard.add(notice.leaseId()));
            for (int round = 0; round < 3; round++) {
                server.publish("b", b);
                Attachment a = client.attach("b", resource);
                server.unpublish("b");
                long lease = a.leaseId();
                IpcTestSupport.await("round " + round + ": the second listener heard the DROP", 10,
                        () -> heard.contains(lease));
                a.close();
            }
        }
    }

    /** A timeout of centuries is accepted, and the TOO_MANY_IDS retry waits with it (it overflowed). */
    @Test
    void aTimeoutOfCenturiesAtTheIdLimit() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b0 = resource.allocate(resource.granularity());
             VirtualMemoryBuffer b1 = resource.allocate(resource.granularity());
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(1).build();
             SharingClient client = SharingClient.builder(sock).protocolVersion(2).build()) {
            client.setTimeout(java.time.temporal.ChronoUnit.FOREVER.getDuration());
            server.publish("n0", b0);
            server.publish("n1", b1);
            client.attach("n0", resource).close(); // the one id allowed, held by an idle entry
            try (Attachment a = client.attach("n1", resource)) {
                assertEquals("n1", a.name());
            }
        }
    }
}
