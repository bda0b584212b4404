package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link SharingClient#close()} while aliases keep leases (the client drains): a release made
 * meanwhile is sent, the last one ends the connection, and no thread outlives the connection.
 */
class ClientDrainTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    /** Live threads of this test's client whose name starts with {@code prefix} (the name ends with the socket path). */
    private long threads(String prefix) {
        String name = prefix + " " + sock;
        return Thread.getAllStackTraces().keySet().stream().filter(t -> t.getName().equals(name) && t.isAlive()).count();
    }

    /**
     * An attachment the client's close() did not close (attach() registered it after close()
     * took its snapshot, or its own close() was in progress): closing it afterwards must still
     * send RELEASE, and being the last lease, end the connection.
     */
    @Test
    void anAttachmentClosedAfterTheClientClosedReleasesItsLeaseAndEndsTheConnection() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            server.publish("c", published);
            SharingClient client = SharingClient.connect(sock, "race");
            Attachment a = client.attach("c", importer);
            client.forget(a); // as if attach() registered it after close() took its snapshot
            client.close();
            assertEquals(1, server.leaseCount("c"), "close() did not see the attachment: its lease is held");
            a.close();
            assertTrue(a.isReleased());
            await("the lease released by the attachment's close after the client's", 10,
                    () -> server.leaseCount("c") == 0);
            await("the connection ended with the last lease", 10, () -> server.connectionCount() == 0);
            await("the reader thread ended", 10, () -> threads("cuvmm-ipc-client-read") == 0);
        }
    }

    /**
     * The connection ends (server closed) while the client drains, after the event thread
     * was started by a release: the event thread must end with it, though an alias still
     * lives (it may live as long as the process).
     */
    @Test
    void theEventThreadEndsWhenTheConnectionEndsWhileDraining() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            SharingServer server = SharingServer.builder(sock).build();
            server.publish("c", published);
            SharingClient client = SharingClient.connect(sock, "drain");
            Attachment a1 = client.attach("c", importer);
            Attachment a2 = client.attach("c", importer);
            VirtualMemoryBuffer alias1 = importer.modifyAllocation(a1.buffer(), importer.granularity());
            VirtualMemoryBuffer alias2 = importer.modifyAllocation(a2.buffer(), importer.granularity());
            client.close();
            alias1.close(); // released through the event thread
            await("one lease released", 10, () -> server.leaseCount("c") == 1);
            server.close();
            await("the reader sees the end", 10, () -> threads("cuvmm-ipc-client-read") == 0);
            await("the event thread ended", 10, () -> threads("cuvmm-ipc-client-events") == 0);
            alias2.close(); // the server already freed its lease
            assertEquals(0, threads("cuvmm-ipc-client-events"), "no event thread started after the end");
        }
    }

    /**
     * The event thread is created without taking the client's public monitor: a release
     * from an alias (or the cleaner) never waits for a caller that synchronizes on the client.
     */
    @Test
    void aReleaseFromAnAliasDoesNotTakeTheClientsMonitor() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "monitor")) {
            server.publish("m", published);
            Attachment a = client.attach("m", importer);
            VirtualMemoryBuffer alias = importer.modifyAllocation(a.buffer(), importer.granularity());
            a.close();
            CompletableFuture<Void> closer;
            synchronized (client) {
                closer = CompletableFuture.runAsync(alias::close);
                try {
                    closer.get(10, TimeUnit.SECONDS);
                } catch (java.util.concurrent.TimeoutException e) {
                    throw new AssertionError("closing the last alias waited for the client's monitor", e);
                }
            }
            await("the lease released", 10, () -> server.leaseCount("m") == 0);
        }
    }

    /** pendingReleases() counts open attachments and closed ones an alias still maps; the connection drains until 0. */
    @Test
    void pendingReleasesCountsWhatKeepsTheConnectionWhileDraining() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            server.publish("p", published);
            SharingClient client = SharingClient.connect(sock, "pending");
            assertEquals(0, client.pendingReleases());
            Attachment a1 = client.attach("p", importer);
            Attachment a2 = client.attach("p", importer);
            assertEquals(2, client.pendingReleases());
            VirtualMemoryBuffer alias = importer.modifyAllocation(a1.buffer(), importer.granularity());
            a1.close();
            assertEquals(2, client.pendingReleases(), "a1's alias still maps the memory");
            a2.close();
            assertEquals(1, client.pendingReleases());
            client.close();
            assertFalse(client.isConnected(), "no request accepted once close() was called");
            assertEquals(1, client.pendingReleases(), "draining: the alias's lease");
            assertEquals(1, server.connectionCount());
            alias.close();
            await("the last release ends the connection", 10, () -> server.connectionCount() == 0);
            assertEquals(0, client.pendingReleases());
            await("the reader thread ended", 10, () -> threads("cuvmm-ipc-client-read") == 0);
        }
    }

    /** closeNow() ends a draining connection at once: the server frees the lease an alias still maps. */
    @Test
    void closeNowEndsTheDrainingAtOnce() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            published.fill((byte) 5);
            server.publish("n", published);
            SharingClient client = SharingClient.connect(sock, "now");
            Attachment a = client.attach("n", importer);
            VirtualMemoryBuffer alias = importer.modifyAllocation(a.buffer(), importer.granularity());
            Attachment open = client.attach("n", importer);
            client.close();
            assertEquals(1, server.leaseCount("n"), "the alias keeps its lease while draining");
            client.closeNow();
            await("the server freed the lease with the connection", 10, () -> server.leaseCount("n") == 0);
            await("the connection ended", 10, () -> server.connectionCount() == 0);
            assertEquals(0, client.pendingReleases());
            assertTrue(open.isClosed(), "close() had closed it");
            byte[] one = new byte[1];
            alias.copyTo(0, one, 0, 1); // the hazard: still mapped here, though the producer has it back
            assertEquals(5, one[0]);
            alias.close(); // nothing to release any more
            await("the reader thread ended", 10, () -> threads("cuvmm-ipc-client-read") == 0);
            await("the event thread ended", 10, () -> threads("cuvmm-ipc-client-events") == 0);
        }
    }

    /** closeNow() on a client with open attachments closes their buffers without sending RELEASE. */
    @Test
    void closeNowClosesOpenAttachments() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            server.publish("o", published);
            SharingClient client = SharingClient.connect(sock, "now-open");
            Attachment a = client.attach("o", importer);
            client.closeNow();
            assertTrue(a.isClosed());
            assertTrue(a.buffer().isClosed());
            assertFalse(client.isConnected());
            await("the server freed the lease with the connection", 10, () -> server.leaseCount("o") == 0);
            client.close(); // idempotent after closeNow
        }
    }
}
