package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Promises of {@link SharingClient}, {@link Attachment} and {@link ImportCache} as their
 * javadoc states them, each test citing the sentence it checks. Only what
 * {@link ClientContractTest} does not already check.
 */
class SharingClientJavadocContractTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    /**
     * Builder.clientName: "0 to 255 bytes of UTF-8"; bad input names the argument and value.
     * addDropListener: a null listener is named.
     */
    @Test
    void theClientNameIsCheckedByName() throws Exception {
        SharingClient.Builder b = SharingClient.builder(sock);
        b.clientName("").clientName("x".repeat(255));
        ServerContractTest.assertThrowsSaying(IllegalArgumentException.class, () -> b.clientName("x".repeat(256)),
                "clientName", "256", "255");
        ServerContractTest.assertThrowsSaying(NullPointerException.class, () -> b.clientName(null), "clientName");
        ServerContractTest.assertThrowsSaying(IllegalArgumentException.class, () -> b.timeout(Duration.ZERO), "timeout");
        ServerContractTest.assertThrowsSaying(IllegalArgumentException.class, () -> b.cacheMaxEntries(-1),
                "cacheMaxEntries", "-1");
        ServerContractTest.assertThrowsSaying(IllegalArgumentException.class, () -> b.cacheMaxBytes(-5),
                "cacheMaxBytes", "-5");
        ServerContractTest.assertThrowsSaying(IllegalArgumentException.class, () -> b.protocolVersion(3),
                "protocolVersion", "3");
    }

    /**
     * ImportCache.isEnabled: "True when attachments may be served from kept mappings";
     * SharingClient.importCache: "on a version-1 connection it stays empty". A version-1
     * connection never serves an attachment from the cache, so it is not enabled there.
     */
    @Test
    void theImportCacheOfAVersionOneConnectionIsNotEnabled() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build();
             SharingClient v1 = SharingClient.builder(sock).protocolVersion(1).build();
             SharingClient v2 = SharingClient.builder(sock).protocolVersion(2).build()) {
            s.publish("b", buf);
            v1.attach("b", r).close();
            v1.attach("b", r).close();
            assertEquals(0, v1.importCache().stats().hits());
            assertFalse(v1.importCache().isEnabled(), "version 1 never serves from kept mappings");
            assertEquals(CoreSupport.canShare(), v2.importCache().isEnabled());
        }
        // The default client falling back to version 1 on a version-1 server: not enabled either.
        try (SharingServer s = SharingServer.builder(sock).maxProtocolVersion(1).build();
             SharingClient fellBack = SharingClient.connect(sock)) {
            assertEquals(1, fellBack.protocolVersion());
            assertFalse(fellBack.importCache().isEnabled(), "version 1 after the fallback");
        }
    }

    /**
     * pendingReleases: "one per open attachment"; attachments(): "The attachments not yet
     * closed". isConnected: "until close() or closeNow() is called or the connection ends".
     */
    @Test
    void pendingReleasesAndAttachmentsCountOpenAttachments() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            assertEquals(0, c.pendingReleases());
            Attachment a1 = c.attach("b", r);
            Attachment a2 = c.attach("b", r);
            assertEquals(2, c.pendingReleases());
            assertEquals(2, c.attachments().size());
            a1.close();
            assertEquals(1, c.pendingReleases());
            assertEquals(List.of(a2), c.attachments());
            a2.close();
            assertEquals(0, c.pendingReleases());
            assertTrue(c.attachments().isEmpty());
        }
    }

    /**
     * pendingReleases: "0 once the connection has ended (the server freed them all)";
     * isConnected: false once "the connection ends (closed by either side)".
     */
    @Test
    void pendingReleasesIsZeroOnceTheServerEndsTheConnection() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            s.publish("b", buf);
            try (SharingClient c = SharingClient.connect(sock)) {
                Attachment a = c.attach("b", r);
                s.close();
                await("the client sees the end", 5, () -> !c.isConnected());
                assertEquals(0, c.pendingReleases());
                a.close();
                assertTrue(a.isClosed());
            }
        }
    }

    /**
     * closeNow: "Ends the connection at once, whatever still maps the memory, then closes the
     * buffers of the open attachments (no RELEASE is sent: the server frees every lease of this
     * connection when it ends)". Idempotent; pendingReleases then 0.
     */
    @Test
    void closeNowClosesTheAttachmentsAndTheServerFreesTheLeases() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment a = c.attach("b", r);
            VirtualMemoryBuffer alias = r.modifyAllocation(a.buffer(), a.buffer().size());
            c.closeNow();
            assertTrue(a.isClosed());
            assertTrue(a.buffer().isClosed());
            assertFalse(c.isConnected());
            assertEquals(0, c.pendingReleases());
            assertTrue(c.attachments().isEmpty());
            await("the server frees the lease", 5, () -> s.totalLeaseCount() == 0);
            c.closeNow();
            c.close();
            alias.close();
        }
    }

    /**
     * Attachment.isDropped: "Also after close(), for a DROP that arrived while an alias or view
     * of the buffer still kept the lease (its DropNotice carries a null attachment then)" (an
     * independent probe read false there). attachments(): "a snapshot taken now, unmodifiable".
     */
    @Test
    void aDropForAClosedAttachmentWhoseAliasKeepsTheLeaseIsStillSeenOnIt() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            java.util.concurrent.CompletableFuture<DropNotice> notice = new java.util.concurrent.CompletableFuture<>();
            c.addDropListener(notice::complete);
            Attachment a = c.attach("b", r);
            List<Attachment> snapshot = c.attachments();
            assertEquals(List.of(a), snapshot);
            assertThrows(UnsupportedOperationException.class, snapshot::clear);
            VirtualMemoryBuffer alias = r.modifyAllocation(a.buffer(), a.buffer().size());
            a.close();
            assertTrue(a.isClosed());
            assertFalse(a.isReleased(), "the alias keeps the lease");
            assertFalse(a.isDropped());
            s.unpublish("b");
            DropNotice n = notice.get(10, java.util.concurrent.TimeUnit.SECONDS);
            assertEquals(a.leaseId(), n.leaseId());
            assertEquals(null, n.attachment(), "closed: the notice carries no attachment");
            assertTrue(a.isDropped(), "the closed attachment whose lease was dropped says so");
            alias.close();
            await("the lease released", 5, a::isReleased);
        }
    }

    /**
     * Attachment.isReleased: "True once nothing in this process maps the memory any more, so
     * the lease is being (or has been) given back"; Attachment.close: "If the connection has
     * ended, the server already freed the lease and only the buffer is closed. Idempotent."
     */
    @Test
    void anAttachmentClosedAfterTheConnectionEndedIsClosedAndReleased() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            assertFalse(a.isReleased());
            assertFalse(a.isDropped());
            s.unpublish("b");
            await("the DROP", 5, a::isDropped);
            a.close();
            assertTrue(a.isReleased());
            assertTrue(a.isClosed());
            a.close();
            assertEquals(0, s.totalLeaseCount());
        }
    }

    /**
     * ImportCache.Stats: "forgets: ids sent in FORGET frames", "evictions ... (not the entries
     * the connection's end lets go)"; entries "leave both counts the moment ... the
     * connection ends".
     */
    @Test
    void theConnectionsEndEmptiesTheCountsButIsNoEviction() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            c.attach("b", r).close();
            if (!c.importCache().isEnabled()) {
                c.close();
                return;
            }
            assertEquals(1, c.importCache().stats().entries());
            c.close();
            ImportCache.Stats st = c.importCache().stats();
            assertEquals(0, st.entries());
            assertEquals(0, st.bytes());
            assertEquals(0, st.evictions(), "the connection's end is not an eviction");
            assertEquals(0, st.forgets(), "nothing was sent in a FORGET");
        }
    }

    /**
     * Class javadoc: "Both threads end with the connection" (the reader and the event
     * thread), here a connection the server ended while the client was never closed; and
     * Attachment.close: "If the connection has ended, the server already freed the lease and
     * only the buffer is closed"; close(): closes every open attachment, without throwing.
     */
    @Test
    void theClientsThreadsEndWhenTheServerEndsTheConnection() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment a = c.attach("b", r);
            s.unpublish("b"); // a DROP starts the event thread
            await("the DROP", 5, a::isDropped);
            String clientThreads = "cuvmm-ipc-client-";
            assertFalse(clientThreadsOf(clientThreads).isEmpty());
            s.close();
            await("the client sees the end", 5, () -> !c.isConnected());
            await("the client's threads end with the connection: " + clientThreadsOf(clientThreads), 10,
                    () -> clientThreadsOf(clientThreads).isEmpty());
            c.close(); // the connection has ended: only the buffers are closed, nothing thrown
            assertTrue(a.isClosed());
            assertTrue(a.buffer().isClosed());
            assertTrue(c.attachments().isEmpty());
        }
    }

    private List<String> clientThreadsOf(String prefix) {
        List<String> out = new java.util.ArrayList<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive() && t.getName().startsWith(prefix) && t.getName().endsWith(sock.toString())) out.add(t.getName());
        }
        return out;
    }

    /**
     * ImportCache.maxEntries / maxBytes: "The most entries kept (0: caching disabled)", "The
     * most mapped bytes kept"; SharingClient.Builder: the values given.
     */
    @Test
    void theCachesBoundsAreTheBuildersValues() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxEntries(3).cacheMaxBytes(12345).build();
             SharingClient d = SharingClient.connect(sock)) {
            assertEquals(3, c.importCache().maxEntries());
            assertEquals(12345, c.importCache().maxBytes());
            assertEquals(ImportCache.DEFAULT_MAX_ENTRIES, d.importCache().maxEntries());
            assertEquals(ImportCache.DEFAULT_MAX_BYTES, d.importCache().maxBytes());
            assertEquals(1L << 30, ImportCache.DEFAULT_MAX_BYTES, "1 GiB");
        }
    }

    /**
     * ImportCache.Stats: "evictions: entries evicted by the LRU bound, an EVICT, ... counted
     * when evicted"; "forgets: ids sent in FORGET frames"; entries "leave both counts the
     * moment [they are] evicted (..., an EVICT, ...)"; class javadoc: "When the producer
     * releases an allocation (EVICT) the client unmaps it once no lease of its own maps it and
     * tells the server (FORGET)".
     */
    @Test
    void anEvictIsCountedAsAnEvictionAndAForget() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            VirtualMemoryBuffer buf = r.allocate(r.granularity());
            s.publish("b", buf);
            c.attach("b", r).close();
            if (!c.importCache().isEnabled()) {
                buf.close();
                return;
            }
            assertEquals(0, c.importCache().stats().evictions());
            s.unpublish("b");
            buf.close(); // EVICT
            await("the FORGET read by the server", 10, () -> s.stats().idsHeld() == 0);
            ImportCache.Stats st = c.importCache().stats();
            assertEquals(0, st.entries());
            assertEquals(0, st.bytes());
            assertEquals(1, st.evictions(), st.toString());
            assertEquals(1, st.forgets(), st.toString());
        }
    }

    /**
     * addDropListener: "Called on the client's event thread for each DROP notice" (a null
     * listener is named); removeDropListener: no effect for one never added, or null.
     */
    @Test
    void dropListenersAreCheckedAndRemovingAStrangerDoesNothing() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            ServerContractTest.assertThrowsSaying(NullPointerException.class, () -> c.addDropListener(null), "listener");
            c.removeDropListener(null);
            c.removeDropListener(n -> { });
            assertTrue(c.isConnected());
        }
    }
}
