package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.ServerContractTest.assertThrowsSaying;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferOrigin;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The documented contract of the public client side of vmm-ipc, one method at a time:
 * {@link SharingClient} and its {@link SharingClient.Builder}, {@link Attachment},
 * {@link DropNotice} and {@link ImportCache}'s public view: argument checks, {@code @throws}
 * clauses (also after close), idempotence, return values, timeouts and thread safety.
 */
class ClientContractTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    // ---------------------------------------------------------------- builder

    @Test
    void builderChecksItsArgumentsByName() {
        assertThrowsSaying(NullPointerException.class, () -> SharingClient.builder(null), "path");
        assertThrowsSaying(IllegalArgumentException.class, () -> SharingClient.builder(Path.of("")), "path", "107");
        SharingClient.Builder b = SharingClient.builder(sock);
        assertThrowsSaying(NullPointerException.class, () -> b.clientName(null), "clientName");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.clientName("n".repeat(256)), "clientName", "256",
                "255");
        b.clientName("").clientName("n".repeat(255)); // 0 to 255 bytes
        assertThrowsSaying(IllegalArgumentException.class, () -> b.protocolVersion(3), "protocolVersion", "3");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.protocolVersion(-1), "protocolVersion", "-1");
        b.protocolVersion(0).protocolVersion(1).protocolVersion(2);
        assertThrowsSaying(IllegalArgumentException.class, () -> b.cacheMaxEntries(-1), "cacheMaxEntries", "-1");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.cacheMaxBytes(-1), "cacheMaxBytes", "-1");
        assertThrowsSaying(NullPointerException.class, () -> b.timeout(null), "timeout");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.timeout(Duration.ZERO), "timeout", "PT0S", "> 0");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.timeout(Duration.ofMillis(-5)), "timeout");
    }

    @Test
    void connectToNothingNamesThePathAndLeaksNothing() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        assertThrowsSaying(IOException.class, () -> SharingClient.connect(sock), sock.toString(), "running cuvmm server");
        assertThrowsSaying(IOException.class, () -> SharingClient.connect(sock, "named"), sock.toString());
        assertFdsBack(base, "after refused connects");
    }

    @Test
    void theBuilderValuesAreReported() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxEntries(3).cacheMaxBytes(1 << 20).build();
             SharingClient off = SharingClient.builder(sock).cacheMaxEntries(0).build();
             SharingClient v1 = SharingClient.builder(sock).protocolVersion(1).build()) {
            assertEquals(2, c.protocolVersion());
            assertEquals(2, c.serverVersion());
            assertEquals(Protocol.MAX_FDS_PER_FRAME, c.serverMaxFds());
            assertEquals(3, c.importCache().maxEntries());
            assertEquals(1 << 20, c.importCache().maxBytes());
            assertFalse(off.importCache().isEnabled(), "cacheMaxEntries(0) disables caching");
            assertEquals(1, v1.protocolVersion());
            assertEquals(1, v1.serverVersion());
            assertEquals(ImportCache.DEFAULT_MAX_ENTRIES, v1.importCache().maxEntries());
            assertEquals(ImportCache.DEFAULT_MAX_BYTES, v1.importCache().maxBytes());
            assertTrue(c.isConnected());
            assertEquals(0, c.pendingReleases());
            assertTrue(c.attachments().isEmpty());
        }
    }

    // ---------------------------------------------------------------- attach

    @Test
    void attachChecksItsArgumentsBeforeAnyRequest() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock);
             VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryResource local = VirtualMemoryResource.create(0,
                     VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build())) {
            assertThrowsSaying(NullPointerException.class, () -> c.attach(null, r), "name");
            assertThrowsSaying(IllegalArgumentException.class, () -> c.attach("", r), "name", "1 to 255");
            assertThrowsSaying(IllegalArgumentException.class, () -> c.attach("n".repeat(256), r), "256");
            assertThrowsSaying(NullPointerException.class, () -> c.attach("b", null), "resource");
            assertThrowsSaying(IllegalArgumentException.class, () -> c.attach("b", local), "resource", "POSIX_FD");
            VirtualMemoryResource closed = VirtualMemoryResource.create(0);
            closed.close();
            assertThrowsSaying(IllegalStateException.class, () -> c.attach("b", closed), "resource", "closed");
            SharingException unknown = assertThrowsSaying(SharingException.class, () -> c.attach("nope", r), "'nope'",
                    "published: []");
            assertEquals(ErrorCode.UNKNOWN_NAME, unknown.code());
            assertTrue(c.isConnected(), "a refused attach leaves the connection usable");
        }
    }

    @Test
    void attachAfterCloseOrTheServersEndThrowsIOExceptionSayingSo() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            c.close();
            IOException e = assertThrowsSaying(IOException.class, () -> c.attach("b", r), "closed");
            assertFalse(e instanceof SharingException, "not the server's refusal: " + e);
            SharingClient d = SharingClient.connect(sock);
            s.close();
            await("the client sees the server's end", 5, () -> !d.isConnected());
            assertThrows(IOException.class, () -> d.attach("b", r));
            assertEquals(0, d.pendingReleases(), "0 once the connection has ended");
            d.close();
            d.closeNow();
        }
    }

    @Test
    void anAttachmentReportsItsNameLeaseAndBuffer() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            assertEquals("b", a.name());
            assertTrue(a.leaseId() != 0);
            assertEquals(buf.size(), a.buffer().size());
            assertEquals(BufferOrigin.SHARED_VIEW, a.buffer().origin(), "version 2 with the cache on");
            assertFalse(a.isClosed());
            assertFalse(a.isReleased());
            assertFalse(a.isDropped());
            assertEquals(List.of(a), c.attachments());
            assertEquals(1, c.pendingReleases());
            assertTrue(a.toString().contains("'b'") && a.toString().contains("lease " + a.leaseId()), a.toString());
            List<Attachment> snapshot = c.attachments();
            a.close();
            assertEquals(List.of(a), snapshot, "attachments() is a snapshot");
            assertTrue(c.attachments().isEmpty());
            assertTrue(a.isClosed());
            assertTrue(a.isReleased());
            assertTrue(a.buffer().isClosed());
            assertEquals(0, c.pendingReleases());
            assertEquals(0, s.totalLeaseCount(), "close() waits for RELEASED");
            a.close(); // idempotent
            assertEquals(0, s.totalLeaseCount());
        }
    }

    @Test
    void theImportCacheCountsHitsAndMisses() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(2 * r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock);
             SharingClient off = SharingClient.builder(sock).cacheMaxEntries(0).build()) {
            s.publish("b", buf);
            c.attach("b", r).close();
            c.attach("b", r).close();
            ImportCache.Stats st = c.importCache().stats();
            assertEquals(1, st.misses());
            assertEquals(1, st.hits());
            assertEquals(1, st.entries());
            assertEquals(buf.size(), st.bytes());
            assertEquals(buf.chunkCount(), st.idsHeld());
            assertEquals(buf.chunkCount(), st.fdsKept());
            assertEquals(buf.chunkCount(), st.fdsReceived(), "the second attach received no fd");
            assertTrue(c.importCache().toString().contains("1 hits"), c.importCache().toString());
            off.attach("b", r).close();
            off.attach("b", r).close();
            assertEquals(0, off.importCache().stats().hits(), "no cache: no hit");
            assertEquals(0, off.importCache().stats().entries());
        }
    }

    // ---------------------------------------------------------------- close, closeNow, isConnected, pendingReleases

    @Test
    void closeAndCloseNowAreIdempotentInAnyOrder() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment a = c.attach("b", r);
            c.close();
            assertTrue(a.isClosed(), "close() closes the attachments");
            assertFalse(c.isConnected());
            assertEquals(0, c.pendingReleases());
            assertEquals(0, s.totalLeaseCount(), "each release waited for its RELEASED");
            c.close();
            c.closeNow();
            assertTrue(c.toString().contains("closed"), c.toString());
            SharingClient d = SharingClient.connect(sock);
            Attachment b = d.attach("b", r);
            d.closeNow();
            assertTrue(b.isClosed(), "closeNow() closes the attachments' buffers");
            assertFalse(d.isConnected());
            d.closeNow();
            d.close();
            await("the server frees the lease of a connection that ended", 5, () -> s.totalLeaseCount() == 0);
            await("connections gone", 5, () -> s.connectionCount() == 0);
        }
        assertFdsBack(base, "after close/closeNow in every order");
    }

    @Test
    void closeKeepsTheLeaseOfAnAliasAndReleasesItWhenTheAliasGoes() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment a = c.attach("b", r);
            VirtualMemoryBuffer alias = r.modifyAllocation(a.buffer(), a.buffer().size());
            a.close();
            assertTrue(a.isClosed());
            assertFalse(a.isReleased(), "the alias still maps the memory");
            assertEquals(1, c.pendingReleases());
            assertTrue(c.attachments().isEmpty());
            c.close();
            assertFalse(c.isConnected(), "false from close() on, while the connection drains");
            assertEquals(1, c.pendingReleases());
            assertEquals(1, s.totalLeaseCount(), "the server keeps the alias's lease");
            assertThrows(IOException.class, () -> c.attach("b", r), "no new request while draining");
            alias.close();
            assertTrue(a.isReleased());
            await("the alias's RELEASE", 5, () -> s.totalLeaseCount() == 0);
            await("the connection closes after the last release", 5, () -> s.connectionCount() == 0);
            assertEquals(0, c.pendingReleases());
        }
    }

    // ---------------------------------------------------------------- drop notices

    @Test
    void aDropNoticeNamesTheLeaseAndItsAttachmentOnTheEventThread() throws Exception {
        BlockingQueue<Object[]> notices = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            assertThrowsSaying(NullPointerException.class, () -> c.addDropListener(null), "listener");
            c.addDropListener(n -> notices.add(new Object[] {n, Thread.currentThread().getName(), n.attachment().isDropped()}));
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            assertTrue(s.unpublish("b"));
            Object[] got = notices.poll(10, TimeUnit.SECONDS);
            assertNotNull(got, "a DROP notice");
            DropNotice n = (DropNotice) got[0];
            assertEquals(a.leaseId(), n.leaseId());
            assertEquals("b", n.name());
            assertSame(a, n.attachment());
            assertTrue(((String) got[1]).startsWith("cuvmm-ipc-client-events"), (String) got[1]);
            assertTrue((Boolean) got[2], "isDropped() is true when the listener runs");
            assertTrue(a.isDropped());
            assertEquals(1, s.totalLeaseCount(), "leases stay counted until released");
            a.close();
            assertEquals(0, s.totalLeaseCount());
        }
    }

    @Test
    void aRemovedDropListenerHearsNothing() throws Exception {
        BlockingQueue<DropNotice> kept = new LinkedBlockingQueue<>();
        BlockingQueue<DropNotice> removed = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            java.util.function.Consumer<DropNotice> gone = removed::add;
            c.addDropListener(gone);
            c.addDropListener(kept::add);
            c.removeDropListener(gone);
            s.publish("b", buf);
            try (Attachment a = c.attach("b", r)) {
                s.unpublish("b");
                assertNotNull(kept.poll(10, TimeUnit.SECONDS));
                assertTrue(removed.isEmpty());
            }
        }
    }

    /**
     * DropNotice: "attachment: this client's attachment of that lease, or null when it was
     * already closed". An attachment closed while an alias keeps its lease: the server still
     * counts the lease, so unpublish sends it a DROP.
     */
    @Test
    void aDropForAClosedAttachmentWhoseAliasKeepsTheLeaseIsNotified() throws Exception {
        BlockingQueue<DropNotice> notices = new LinkedBlockingQueue<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            c.addDropListener(notices::add);
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            VirtualMemoryBuffer alias = r.modifyAllocation(a.buffer(), a.buffer().size());
            a.close();
            assertEquals(1, s.totalLeaseCount(), "the alias keeps the lease");
            s.unpublish("b");
            DropNotice n = notices.poll(10, TimeUnit.SECONDS);
            assertNotNull(n, "the DROP of a lease this client still holds is notified");
            assertEquals(a.leaseId(), n.leaseId());
            assertEquals("b", n.name());
            assertNull(n.attachment(), "null: the attachment was already closed");
            alias.close();
            await("the alias's release", 5, () -> s.totalLeaseCount() == 0);
        }
    }

    // ---------------------------------------------------------------- timeouts

    @Test
    void setTimeoutChecksItsArgumentAndBoundsTheWaitForAReply() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdServerSocket listen = FdServerSocket.bind(sock);
        CountDownLatch attachSeen = new CountDownLatch(1);
        Thread fake = silentServer(listen, attachSeen);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingClient c = SharingClient.connect(sock)) {
            assertThrowsSaying(NullPointerException.class, () -> c.setTimeout(null), "timeout");
            assertThrowsSaying(IllegalArgumentException.class, () -> c.setTimeout(Duration.ZERO), "timeout", "PT0S");
            assertThrowsSaying(IllegalArgumentException.class, () -> c.setTimeout(Duration.ofSeconds(-1)), "timeout");
            c.setTimeout(Duration.ofSeconds(Long.MAX_VALUE)); // centuries: accepted, saturated
            c.setTimeout(Duration.ofMillis(200));
            IOException e = assertThrowsSaying(IOException.class, () -> c.attach("b", r), "no reply to ATTACH", "PT0.2S");
            assertFalse(e instanceof SharingException);
            assertEquals(0, attachSeen.getCount());
            assertTrue(c.isConnected(), "a timed-out request leaves the connection open");
        } finally {
            listen.close();
            fake.join(10_000);
        }
        assertFdsBack(base, "after the timed-out request");
    }

    @Test
    void theBuildersTimeoutBoundsTheHello() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdServerSocket listen = FdServerSocket.bind(sock);
        Thread fake = IpcTestSupport.startFakeServer("fake mute server", listen, s -> {
            FrameIO.read(s).close(); // the HELLO, never answered
            FrameIO.read(s).close(); // until the client goes
        });
        try {
            assertThrowsSaying(IOException.class,
                    () -> SharingClient.builder(sock).timeout(Duration.ofMillis(200)).build(), "HELLO", "PT0.2S");
        } finally {
            listen.close();
            fake.join(10_000);
        }
        assertFdsBack(base, "after the timed-out HELLO");
    }

    // ---------------------------------------------------------------- threads

    @Test
    void eightThreadsAttachAndCloseOnOneClientWithoutLeaks() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(2 * r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            s.publish("c", buf);
            SharingClient c = SharingClient.connect(sock);
            IpcTestSupport.race(8, 120, me -> {
                for (int i = 0; i < 40; i++) {
                    try (Attachment a = c.attach((me + i) % 2 == 0 ? "b" : "c", r)) {
                        a.buffer().fill(me, 1, (byte) me);
                        c.attachments();
                        c.pendingReleases();
                        c.importCache().stats();
                    }
                }
            });
            assertEquals(0, c.pendingReleases());
            assertEquals(0, s.totalLeaseCount());
            c.close();
            await("connection gone", 5, () -> s.connectionCount() == 0);
        }
        assertFdsBack(base, "after 8 threads x 40 attach/close rounds on one client");
    }

    @Test
    void eightThreadsCloseOneClientAtOnce() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            for (int round = 0; round < 5; round++) {
                SharingClient c = SharingClient.connect(sock);
                List<Attachment> held = new ArrayList<>();
                for (int i = 0; i < 4; i++) held.add(c.attach("b", r));
                IpcTestSupport.race(8, 60, me -> {
                    if (me == 7) c.closeNow();
                    else if (me % 2 == 0) c.close();
                    else held.get(me / 2).close();
                });
                assertFalse(c.isConnected());
                for (Attachment a : held) assertTrue(a.isClosed(), "closed: " + a);
            }
            await("leases freed", 10, () -> s.totalLeaseCount() == 0);
            await("connections gone", 10, () -> s.connectionCount() == 0);
        }
        assertFdsBack(base, "after racing close/closeNow/Attachment.close");
    }

    // ---------------------------------------------------------------- a server that does not answer RELEASE

    /**
     * A fake version-2 server: answers HELLO, answers each ATTACH with a one-chunk DESCRIPTOR
     * (a fresh id and the fd of {@code memory}), and each RELEASE per {@code releaseReply}
     * (null: never); counts the RELEASEs it reads.
     */
    private Thread fakeServer(FdServerSocket listen, VirtualMemoryBuffer memory, Messages.Error releaseReply,
                              java.util.concurrent.atomic.AtomicInteger releases) {
        long[] next = {1};
        return IpcTestSupport.startFakeV2Server("fake server", listen, (s, f) -> {
            if (f.type == FrameType.ATTACH) {
                long id = next[0]++;
                try (org.cuvmm.BufferDescriptor d = memory.exportDescriptor()) {
                    FrameIO.write(s, IpcTestSupport.oneFreshChunk(100 + id, memory.size(), id), f.requestId, d.fds(), 2);
                }
            } else if (f.type == FrameType.RELEASE) {
                releases.incrementAndGet();
                if (releaseReply != null) FrameIO.write(s, releaseReply, f.requestId, null, 2);
            }
        });
    }

    @Test
    void aReleaseNotAnsweredInTimeThrowsUncheckedIOExceptionWithTheAttachmentClosed() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        java.util.concurrent.atomic.AtomicInteger releases = new java.util.concurrent.atomic.AtomicInteger();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer memory = r.allocate(r.granularity())) {
            FdServerSocket listen = FdServerSocket.bind(sock);
            Thread fake = fakeServer(listen, memory, null, releases);
            try {
                // The short timeout only around the unanswered RELEASEs: the HELLO and the
                // ATTACHes (an export each on the fake server) must not time out on a loaded machine.
                SharingClient c = SharingClient.builder(sock).cacheMaxEntries(0).build();
                Attachment a = c.attach("b", r);
                c.setTimeout(Duration.ofMillis(300));
                assertThrowsSaying(java.io.UncheckedIOException.class, a::close, "no reply to RELEASE");
                assertTrue(a.isClosed(), "closed all the same");
                assertTrue(a.isReleased(), "its RELEASE was sent");
                await("the fake server read the RELEASE", 10, () -> releases.get() == 1);
                a.close(); // idempotent: nothing more is sent
                // client.close(): the first unanswered release throws; the rest go without waiting
                c.setTimeout(Duration.ofSeconds(30));
                Attachment b1 = c.attach("b", r);
                Attachment b2 = c.attach("b", r);
                Attachment b3 = c.attach("b", r);
                c.setTimeout(Duration.ofMillis(300));
                assertThrowsSaying(java.io.UncheckedIOException.class, c::close, "RELEASE");
                assertTrue(b1.isClosed() && b2.isClosed() && b3.isClosed(), "the attachments are closed all the same");
                await("every RELEASE sent", 10, () -> releases.get() == 4);
                await("the connection ends once they are out", 10, () -> c.pendingReleases() == 0);
                c.close(); // a second call: nothing left to close
                assertFalse(c.isConnected());
            } finally {
                listen.close();
                fake.join(10_000);
            }
        }
        assertFdsBack(base, "after the unanswered releases");
    }

    @Test
    void aReleaseTheServerRefusesThrowsIllegalStateExceptionWithTheServersWords() throws Exception {
        java.util.concurrent.atomic.AtomicInteger releases = new java.util.concurrent.atomic.AtomicInteger();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer memory = r.allocate(r.granularity())) {
            FdServerSocket listen = FdServerSocket.bind(sock);
            Thread fake = fakeServer(listen, memory, new Messages.Error(ErrorCode.UNKNOWN_LEASE, "no such lease here"),
                    releases);
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(0).build()) {
                Attachment a = c.attach("b", r);
                IllegalStateException e = assertThrowsSaying(IllegalStateException.class, a::close, "'b'",
                        "lease " + a.leaseId(), "no such lease here");
                assertTrue(e.getCause() instanceof SharingException se && se.code() == ErrorCode.UNKNOWN_LEASE, "cause: "
                        + e.getCause());
                assertTrue(a.isClosed());
                assertEquals(0, c.pendingReleases(), "the lease no longer counts whatever the outcome");
            } finally {
                listen.close();
                fake.join(10_000);
            }
        }
    }

    @Test
    void aRelativeSocketPathWorksOnBothSides() throws Exception {
        Path relative = Path.of("").toAbsolutePath().relativize(sock);
        assertFalse(relative.isAbsolute());
        try (SharingServer s = SharingServer.builder(relative).build(); SharingClient c = SharingClient.connect(relative)) {
            assertEquals(sock, s.socketPath(), "the socket file's absolute path");
            assertTrue(c.isConnected());
        }
    }

    @Test
    void cacheMaxBytesZeroAlsoDisablesTheCache() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxBytes(0).build()) {
            assertFalse(c.importCache().isEnabled());
            assertEquals(0, c.importCache().maxBytes());
        }
    }

    // ---------------------------------------------------------------- in use on another thread

    /** Holds {@code b} in use on a thread of its own until {@code done} is counted down. */
    private static Thread holdInUse(VirtualMemoryBuffer b, CountDownLatch inUse, CountDownLatch done) {
        Thread t = new Thread(() -> b.withAddress(address -> {
            inUse.countDown();
            try {
                done.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }), "holds the buffer");
        t.start();
        return t;
    }

    @Test
    void closeRefusesAnAttachmentInUseOnAnotherThreadAndASecondCallClosesIt() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment busy = c.attach("b", r);
            Attachment idle = c.attach("b", r);
            CountDownLatch inUse = new CountDownLatch(1);
            CountDownLatch done = new CountDownLatch(1);
            Thread holder = holdInUse(busy.buffer(), inUse, done);
            assertTrue(inUse.await(10, TimeUnit.SECONDS));
            assertThrowsSaying(IllegalStateException.class, busy::close, "in use");
            assertFalse(busy.isClosed(), "a refused close leaves it open");
            assertThrows(IllegalStateException.class, c::close);
            assertTrue(idle.isClosed(), "the others are closed all the same");
            assertFalse(busy.isClosed(), "that attachment stays open");
            assertEquals(1, s.totalLeaseCount(), "and keeps its lease");
            assertEquals(1, c.pendingReleases());
            assertFalse(c.isConnected());
            assertThrows(IOException.class, () -> c.attach("b", r), "no new request is accepted meanwhile");
            done.countDown();
            holder.join(10_000);
            c.close(); // a second call closes what the first could not
            assertTrue(busy.isClosed());
            assertEquals(0, s.totalLeaseCount());
            assertEquals(0, c.pendingReleases());
            await("the connection ends", 5, () -> s.connectionCount() == 0);
        }
    }

    @Test
    void closeNowLeavesAnAttachmentInUseOpenToBeClosedLater() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment busy = c.attach("b", r);
            CountDownLatch inUse = new CountDownLatch(1);
            CountDownLatch done = new CountDownLatch(1);
            Thread holder = holdInUse(busy.buffer(), inUse, done);
            assertTrue(inUse.await(10, TimeUnit.SECONDS));
            c.closeNow(); // does not throw
            assertFalse(c.isConnected());
            assertFalse(busy.isClosed(), "in use: stays open");
            await("the server freed the lease with the connection", 5, () -> s.totalLeaseCount() == 0);
            done.countDown();
            holder.join(10_000);
            busy.close(); // later: only the buffer is closed (the connection has ended)
            assertTrue(busy.isClosed());
        }
    }

    // ---------------------------------------------------------------- threads end with the connection

    /** Live threads whose name contains {@code fragment} and that are not in {@code before}. */
    private static List<String> newThreadsNaming(String fragment, java.util.Set<Thread> before) {
        List<String> out = new ArrayList<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive() && t.getName().contains(fragment) && !before.contains(t)) out.add(t.getName());
        }
        return out;
    }

    private static List<String> threadsNaming(String fragment) {
        List<String> out = new ArrayList<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive() && t.getName().contains(fragment)) out.add(t.getName());
        }
        return out;
    }

    @Test
    void noClientOrServerThreadOutlivesClose() throws Exception {
        // (connection threads are named by the server's own connection number: other servers' are left out)
        java.util.Set<Thread> before = new java.util.HashSet<>(Thread.getAllStackTraces().keySet());
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).idleTimeout(Duration.ofMinutes(1)).build();
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            try (Attachment a = c.attach("b", r)) {
                s.unpublish("b"); // a DROP: starts the client's event thread
                await("the DROP", 5, a::isDropped);
            }
            assertFalse(threadsNaming(sock.toString()).isEmpty(), "threads named after the socket while connected");
            c.close();
            s.close();
            await("no thread left naming " + sock + ": " + threadsNaming(sock.toString()), 10,
                    () -> threadsNaming(sock.toString()).isEmpty());
            await("no connection thread left", 10, () -> newThreadsNaming("cuvmm-ipc-conn-", before).isEmpty());
        }
    }

    @Test
    void eightThreadsCloseOneAttachmentAndOneReleaseGoesOut() throws Exception {
        List<LeaseEvent> released = new java.util.concurrent.CopyOnWriteArrayList<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).listener(new SharingListener() {
                 @Override
                 public void released(LeaseEvent e) { released.add(e); }
             }).build(); SharingClient c = SharingClient.connect(sock, "closers")) {
            s.publish("b", buf);
            for (int round = 0; round < 10; round++) {
                Attachment a = c.attach("b", r);
                IpcTestSupport.race(8, 60, me -> {
                    a.close();
                    assertTrue(a.isClosed(), "closed when any close() returns");
                });
                assertEquals(0, s.totalLeaseCount());
            }
            // (the server's event follows its RELEASED reply: wait for the last one)
            await("ten release events", 5, () -> released.size() >= 10);
            assertEquals(10, released.size(), "one RELEASE per lease: " + released);
            for (LeaseEvent e : released) assertEquals(LeaseEvent.Reason.RELEASED, e.reason());
        }
    }

    @Test
    void theDefaultClientNameIsJavaPid() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            assertEquals("java pid " + ProcessHandle.current().pid(), s.stats().connections().get(0).clientName());
        }
    }

    // ---------------------------------------------------------------- PROTOCOL.md sections 6 and 13

    @Test
    void theLeaseCounterDoesNotMoveForAnUnknownNameNorForTooManyLeases() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).maxLeasesPerConnection(1).build();
             SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            SharingException full = assertThrowsSaying(SharingException.class, () -> c.attach("b", r), "1 lease",
                    "release some");
            assertEquals(ErrorCode.TOO_MANY_LEASES, full.code());
            assertTrue(c.isConnected(), "the connection stays");
            a.close();
            assertEquals(ErrorCode.UNKNOWN_NAME, assertThrows(SharingException.class, () -> c.attach("x", r)).code());
            try (Attachment next = c.attach("b", r)) {
                assertEquals(a.leaseId() + 1, next.leaseId(), "PROTOCOL.md section 6: neither refusal drew an id");
            }
        }
    }

    @Test
    void halfClosingEndsTheConnectionAfterTheAnswersToWhatWasRead() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); FdSocket raw = FdSocket.connect(sock)) {
            s.publish("b", buf);
            raw.send(IpcTestSupport.concat(IpcTestSupport.frame(1, 1, IpcTestSupport.str("half")),
                    IpcTestSupport.frame(3, 2, IpcTestSupport.str("b"))), null);
            raw.shutdownOutput();
            try (Frame ok = FrameIO.read(raw)) {
                assertEquals(FrameType.HELLO_OK, ok.type);
            }
            try (Frame d = FrameIO.read(raw)) {
                assertEquals(FrameType.DESCRIPTOR, d.type, "the ATTACH sent before the half-close is answered");
                assertEquals(buf.chunkCount(), d.fdCount());
            }
            try (ReceivedMessage end = raw.receive(1)) {
                assertTrue(end.endOfStream(), "then the connection ends");
            }
            await("its lease is freed", 5, () -> s.totalLeaseCount() == 0);
            await("and the connection gone", 5, () -> s.connectionCount() == 0);
        }
        assertFdsBack(base, "after the half-closed connection");
    }

    @Test
    void aFullCacheForgetsItsLeastRecentlyUsedEntryAndTheFdComesAgain() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer one = r.allocate(r.granularity());
             VirtualMemoryBuffer two = r.allocate(r.granularity()); SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxEntries(1).build()) {
            s.publish("one", one);
            s.publish("two", two);
            c.attach("one", r).close();
            c.attach("two", r).close(); // over the bound: "one" is unmapped and forgotten
            // idsHeld drops at the FORGET, the kept fd closes when its FORGOTTEN is read
            await("the FORGET of one's id answered", 5, () -> c.importCache().stats().idsHeld() == 1
                    && s.stats().idsHeld() == 1 && c.importCache().stats().fdsKept() == 1);
            ImportCache.Stats st = c.importCache().stats();
            assertEquals(1, st.entries());
            assertEquals(1, st.evictions());
            assertEquals(1, st.forgets());
            assertEquals(1, st.fdsKept());
            c.attach("one", r).close();
            assertEquals(3, c.importCache().stats().fdsReceived(), "one's fd is sent again");
            assertEquals(3, c.importCache().stats().misses());
        }
    }

    @Test
    void anAllocationTheProducerReleasesIsUnmappedAndForgottenByAnIdleClient() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            VirtualMemoryBuffer buf = r.allocate(r.granularity());
            s.publish("b", buf);
            c.attach("b", r).close(); // the cache keeps the mapping and the id
            assertEquals(1, c.importCache().stats().entries());
            assertEquals(1, s.stats().idsHeld());
            s.unpublish("b");
            buf.close(); // the producer releases the allocation: EVICT
            await("the client unmapped it and the server read its FORGET", 10,
                    () -> c.importCache().stats().entries() == 0 && c.importCache().stats().idsHeld() == 0
                            && s.stats().idsHeld() == 0 && s.stats().releasedStillMappedAllocations() == 0);
            assertEquals(0, c.importCache().stats().fdsKept());
            assertEquals(0, s.stats().releasedStillMappedBytes());
            assertTrue(c.isConnected());
        }
    }

    // ---------------------------------------------------------------- failed builds leave nothing; odd replies

    @Test
    void aRefusedConnectLeavesNoFdAndNoThread() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).maxProtocolVersion(1).maxConnections(1).build()) {
            Map<String, Integer> base = fdSnapshot();
            assertEquals(ErrorCode.BAD_VERSION, assertThrows(SharingException.class,
                    () -> SharingClient.builder(sock).protocolVersion(2).build()).code());
            await("the refused connection ended", 5, () -> s.connectionCount() == 0);
            try (SharingClient first = SharingClient.connect(sock)) {
                assertEquals(ErrorCode.TOO_MANY_CONNECTIONS,
                        assertThrows(SharingException.class, () -> SharingClient.connect(sock)).code());
            }
            await("no client thread left", 10, () -> threadsNaming("cuvmm-ipc-client-read " + sock).isEmpty()
                    && threadsNaming("cuvmm-ipc-client-events " + sock).isEmpty());
            await("connections ended", 5, () -> s.connectionCount() == 0);
            assertFdsBack(base, "after the refused connects");
        }
    }

    @Test
    void anInterruptedCloseStillClosesAndSendsTheRelease() throws Exception {
        java.util.concurrent.atomic.AtomicInteger releases = new java.util.concurrent.atomic.AtomicInteger();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer memory = r.allocate(r.granularity())) {
            FdServerSocket listen = FdServerSocket.bind(sock);
            Thread fake = fakeServer(listen, memory, null, releases);
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(0).timeout(Duration.ofSeconds(30)).build()) {
                Attachment a = c.attach("b", r);
                Thread.currentThread().interrupt();
                try {
                    assertThrowsSaying(java.io.UncheckedIOException.class, a::close, "interrupted");
                    assertTrue(Thread.currentThread().isInterrupted(), "the interrupt flag is kept");
                } finally {
                    Thread.interrupted();
                }
                assertTrue(a.isClosed());
                await("its RELEASE was sent", 5, () -> releases.get() == 1);
                assertEquals(0, c.pendingReleases(), "the lease no longer counts");
            } finally {
                listen.close();
                fake.join(10_000);
            }
        }
    }

    /**
     * PROTOCOL.md section 4, a code this client does not know (99): with the ATTACH's id it
     * refuses that request ({@code SharingException.code()} null, the number in the message,
     * the connection stays); with request id 0 it is fatal (nothing says what it refused): the
     * waiting attach fails with the server's message and the client ends the connection.
     */
    @Test
    void anErrorWithACodeThisClientDoesNotKnow() throws Exception {
        for (boolean idZero : new boolean[] {false, true}) {
            Path at = IpcTestSupport.socketPath();
            FdServerSocket listen = FdServerSocket.bind(at);
            Thread fake = IpcTestSupport.startFakeV2Server("fake server of the future", listen, (s, f) -> {
                if (f.type == FrameType.ATTACH) {
                    FrameIO.write(s, new Messages.Error(99, "from the future"), idZero ? 0 : f.requestId, null, 2);
                }
            });
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingClient c = SharingClient.connect(at)) {
                if (!idZero) {
                    SharingException e = assertThrowsSaying(SharingException.class, () -> c.attach("b", r),
                            "from the future", "code 99");
                    assertNull(e.code(), "no ErrorCode for 99");
                    assertTrue(c.isConnected());
                } else {
                    java.io.IOException e = assertThrows(java.io.IOException.class, () -> c.attach("b", r));
                    String all = e + " " + e.getCause();
                    assertTrue(all.contains("from the future") && all.contains("code 99"), all);
                    await("the client ended the connection", 10, () -> !c.isConnected());
                }
            } finally {
                listen.close();
                fake.join(10_000);
                IpcTestSupport.deleteTree(at.getParent());
            }
        }
    }

    // ---------------------------------------------------------------- close from other threads

    /** A fake server that answers HELLO and then reads without answering; counts the ATTACHes it read. */
    private Thread silentServer(FdServerSocket listen, CountDownLatch attachRead) {
        return IpcTestSupport.startFakeV2Server("fake silent server", listen, (s, f) -> { // never answers
            if (f.type == FrameType.ATTACH) attachRead.countDown();
        });
    }

    @Test
    void closeOrCloseNowFromAnotherThreadEndsAWaitingAttach() throws Exception {
        for (boolean now : new boolean[] {false, true}) {
            Path path = sock.resolveSibling(now ? "now.sock" : "close.sock");
            FdServerSocket listen = FdServerSocket.bind(path);
            CountDownLatch attachRead = new CountDownLatch(1);
            Thread fake = silentServer(listen, attachRead);
            ExecutorService pool = Executors.newSingleThreadExecutor();
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                SharingClient c = SharingClient.builder(path).timeout(Duration.ofMinutes(5)).build();
                Future<Attachment> waiting = pool.submit(() -> c.attach("b", r));
                assertTrue(attachRead.await(10, TimeUnit.SECONDS));
                if (now) c.closeNow();
                else c.close();
                java.util.concurrent.ExecutionException e = assertThrows(java.util.concurrent.ExecutionException.class,
                        () -> waiting.get(60, TimeUnit.SECONDS), "the waiting attach ends (long before its 5 min)");
                assertTrue(e.getCause() instanceof IOException, "cause: " + e.getCause());
                assertTrue(String.valueOf(e.getCause().getMessage()).contains("closed"), "says why: " + e.getCause());
            } finally {
                pool.shutdownNow();
                listen.close();
                fake.join(10_000);
            }
        }
    }

    @Test
    void aDropListenerMayCloseTheClient() throws Exception {
        for (boolean now : new boolean[] {false, true}) {
            BlockingQueue<String> outcome = new LinkedBlockingQueue<>();
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
                 SharingServer s = SharingServer.builder(sock).build()) {
                SharingClient c = SharingClient.connect(sock);
                c.addDropListener(n -> {
                    try {
                        if (now) c.closeNow();
                        else c.close();
                        outcome.add("closed " + n.attachment().isClosed());
                    } catch (RuntimeException e) {
                        outcome.add("threw " + e);
                    }
                });
                s.publish("b", buf);
                Attachment a = c.attach("b", r);
                s.unpublish("b");
                assertEquals("closed true", outcome.poll(30, TimeUnit.SECONDS));
                assertFalse(c.isConnected());
                assertTrue(a.isClosed());
                await("the lease ended", 5, () -> s.totalLeaseCount() == 0);
                await("the connection ended", 5, () -> s.connectionCount() == 0);
            }
            IpcTestSupport.deleteTree(sock);
        }
    }

    @Test
    void theCacheIsEmptiedWhenTheConnectionEndsOrTheClientCloses() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            int memfdsBefore = IpcTestSupport.memfdCount();
            SharingServer s = SharingServer.builder(sock).build();
            s.publish("b", buf);
            SharingClient byServer = SharingClient.connect(sock);
            SharingClient byClient = SharingClient.connect(sock);
            byServer.attach("b", r).close();
            byClient.attach("b", r).close();
            assertEquals(1, byServer.importCache().stats().entries());
            assertEquals(1, byClient.importCache().stats().fdsKept());
            byClient.close(); // "unmaps what the import cache keeps"
            ImportCache.Stats closed = byClient.importCache().stats();
            assertEquals(0, closed.entries());
            assertEquals(0, closed.bytes());
            assertEquals(0, closed.fdsKept());
            assertEquals(0, closed.idsHeld());
            s.close(); // the connection ends: the client unmaps its idle cached entries
            await("the client's cache emptied at the connection's end", 10, () -> !byServer.isConnected()
                    && byServer.importCache().stats().entries() == 0 && byServer.importCache().stats().fdsKept() == 0
                    && byServer.importCache().stats().idsHeld() == 0);
            byServer.close();
            if (IpcTestSupport.onHostDriver()) {
                await("no memfd of the consumers left", 10, () -> IpcTestSupport.memfdCount() == memfdsBefore);
            }
        }
    }

    @Test
    void closeNowEndsTheDrainingOfClose() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment a = c.attach("b", r);
            VirtualMemoryBuffer alias = r.modifyAllocation(a.buffer(), a.buffer().size());
            c.close();
            assertEquals(1, c.pendingReleases(), "draining: the alias keeps the lease");
            c.closeNow();
            assertEquals(0, c.pendingReleases(), "0 once the connection has ended");
            await("the server freed the lease with the connection", 5, () -> s.totalLeaseCount() == 0);
            await("the connection ended", 5, () -> s.connectionCount() == 0);
            alias.close(); // nothing to release any more: no exception
            assertTrue(a.isReleased());
        }
    }

    @Test
    void theAttachmentsOriginFollowsTheVersionAndTheCache() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build();
             SharingClient v1 = SharingClient.builder(sock).protocolVersion(1).build();
             SharingClient off = SharingClient.builder(sock).cacheMaxEntries(0).build();
             SharingClient on = SharingClient.connect(sock)) {
            s.publish("b", buf);
            try (Attachment a = v1.attach("b", r); Attachment b = off.attach("b", r); Attachment c = on.attach("b", r)) {
                assertEquals(BufferOrigin.IMPORTED, a.buffer().origin(), "version 1");
                assertEquals(BufferOrigin.IMPORTED, b.buffer().origin(), "version 2, cache off");
                assertEquals(BufferOrigin.SHARED_VIEW, c.buffer().origin(), "version 2, cache on");
            }
        }
    }

    @Test
    void aLeasedEntryIsNeverEvicted() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer one = r.allocate(r.granularity());
             VirtualMemoryBuffer two = r.allocate(r.granularity()); SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxEntries(1).build()) {
            s.publish("one", one);
            s.publish("two", two);
            Attachment held = c.attach("one", r);
            c.attach("two", r).close(); // over the bound: "one" is the least recently used, but leased
            held.buffer().fill(0, 1, (byte) 1); // still mapped
            held.close();
            c.attach("one", r).close();
            assertEquals(1, c.importCache().stats().hits(), "one's entry was kept: " + c.importCache().stats());
        }
    }

    /**
     * Exceptions are Serializable (Throwable's contract; SharingException and ProtocolException
     * declare a serialVersionUID): the SharingException of a rejected version-2 DESCRIPTOR, whose
     * cause is the ProtocolException that rejected it, must serialize and read back.
     */
    @Test
    void theExceptionOfARejectedDescriptorSerializes() throws Exception {
        FdServerSocket listen = FdServerSocket.bind(sock);
        Thread fake = IpcTestSupport.startFakeV2Server("fake server naming an id not held", listen, (s, f) -> {
            if (f.type == FrameType.ATTACH) {
                // names id 77 without its fd: a client that does not hold it rejects it (UNKNOWN_ID)
                FrameIO.write(s, new Messages.DescriptorV2(5, Protocol.HANDLE_TYPE_POSIX_FD, 4096, new long[] {4096},
                        new long[] {77}, new int[] {0}), f.requestId, null, 2);
            }
        });
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingClient c = SharingClient.connect(sock)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("b", r));
            assertEquals(ErrorCode.UNKNOWN_ID, e.code());
            java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
            try (java.io.ObjectOutputStream out = new java.io.ObjectOutputStream(bytes)) {
                out.writeObject(e);
            }
            Object back;
            try (java.io.ObjectInputStream in = new java.io.ObjectInputStream(
                    new java.io.ByteArrayInputStream(bytes.toByteArray()))) {
                back = in.readObject();
            }
            SharingException copy = (SharingException) back;
            assertEquals(e.getMessage(), copy.getMessage());
            assertEquals(ErrorCode.UNKNOWN_ID, copy.code());
            Throwable t = copy;
            while (t != null && !(t instanceof ProtocolException)) t = t.getCause();
            assertTrue(t instanceof ProtocolException p && p.code() == ErrorCode.UNKNOWN_ID, "the cause read back: " + t);
        } finally {
            listen.close();
            fake.join(10_000);
        }
    }

    @Test
    void theCachesBoundsHoldAndACacheOfZeroForgetsEachIdAtOnce() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer one = r.allocate(r.granularity());
             VirtualMemoryBuffer two = r.allocate(r.granularity()); SharingServer s = SharingServer.builder(sock).build();
             SharingClient bytes = SharingClient.builder(sock).cacheMaxBytes(r.granularity()).build();
             SharingClient off = SharingClient.builder(sock).cacheMaxEntries(0).build()) {
            s.publish("one", one);
            s.publish("two", two);
            bytes.attach("one", r).close();
            bytes.attach("two", r).close();
            assertEquals(1, bytes.importCache().stats().entries(), "at most cacheMaxBytes mapped");
            assertEquals(r.granularity(), bytes.importCache().stats().bytes());
            off.attach("one", r).close();
            await("the id forgotten at once", 5, () -> off.importCache().stats().idsHeld() == 0
                    && off.importCache().stats().fdsKept() == 0);
            assertEquals(0, off.importCache().stats().entries());
            await("the server no longer counts it", 5,
                    () -> s.stats().connections().stream().filter(c -> c.connectionId() == 2).findFirst()
                            .orElseThrow().idsHeld() == 0);
        }
    }

    @Test
    void anIdleTimeoutEndsTheClientWithTheServersTimeout() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             // 3 s, not shorter: a connection holding nothing yet (between HELLO and the first
             // ATTACH) is idle too, and a loaded 2-core CI machine can stall that long.
             SharingServer s = SharingServer.builder(sock).idleTimeout(Duration.ofSeconds(3)).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            c.attach("b", r).close(); // the cache keeps the mapping: ids but no lease, so idle
            await("the server's TIMEOUT ends the connection", 10, () -> !c.isConnected());
            SharingException e = assertThrows(SharingException.class, () -> c.attach("b", r));
            assertEquals(ErrorCode.TIMEOUT, e.code(), "the server's code: " + e);
            assertEquals(0, c.pendingReleases());
            await("its cache emptied", 5, () -> c.importCache().stats().entries() == 0
                    && c.importCache().stats().fdsKept() == 0);
            c.close();
            await("the server ended the connection", 5, () -> s.connectionCount() == 0);
        }
    }

    @Test
    void aLeaseEventNamesItsClientOrAQuestionMark() {
        PeerCredentials p = new PeerCredentials(1, 2, 3);
        assertEquals("ATTACHED 'b' lease 7 by ? (pid 1, uid 2, gid 3), leases now 1",
                new LeaseEvent("b", 7, p, "", LeaseEvent.Reason.ATTACHED, 1).toString());
        assertTrue(new LeaseEvent("b", 7, p, "w", LeaseEvent.Reason.RELEASED, 0).toString().contains("by w ("));
    }
}
