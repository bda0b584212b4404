package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
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
}
