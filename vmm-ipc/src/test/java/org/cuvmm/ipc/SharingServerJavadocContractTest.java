package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Promises of {@link SharingServer}, {@link SharingStats}, {@link SharingListener} and
 * {@link LeaseEvent} as their javadoc states them, each test citing the sentence it checks.
 * Only what {@link ServerContractTest} does not already check.
 */
class SharingServerJavadocContractTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    /**
     * SharingStats' constructor: "@throws NullPointerException when a list (or an element) is
     * null; the message names the list".
     */
    @Test
    void statsNameTheListThatHoldsANullElement() {
        List<SharingStats.ConnectionStats> badConns = Arrays.asList((SharingStats.ConnectionStats) null);
        ServerContractTest.assertThrowsSaying(NullPointerException.class,
                () -> new SharingStats(badConns, List.of(), 0, 0), "connections");
        List<SharingStats.ReleasedAllocation> badReleased = Arrays.asList((SharingStats.ReleasedAllocation) null);
        ServerContractTest.assertThrowsSaying(NullPointerException.class,
                () -> new SharingStats(List.of(), badReleased, 0, 0), "releasedStillMapped");
        ServerContractTest.assertThrowsSaying(NullPointerException.class,
                () -> new SharingStats(null, List.of(), 0, 0), "connections");
        ServerContractTest.assertThrowsSaying(NullPointerException.class,
                () -> new SharingStats(List.of(), null, 0, 0), "releasedStillMapped");
    }

    /**
     * leaseCount: "To close a buffer its consumers may still hold: unpublish it (no new lease
     * starts; this then reads 0 at once, the name being gone)"; unpublish: "Leases stay counted
     * until released"; totalLeaseCount: "on published and withdrawn buffers alike".
     */
    @Test
    void unpublishZeroesTheNamesCountButTheTotalKeepsTheLeases() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            assertEquals(1, s.leaseCount("b"));
            assertTrue(s.unpublish("b"));
            assertEquals(0, s.leaseCount("b"), "reads 0 at once, the name being gone");
            assertEquals(1, s.totalLeaseCount(), "withdrawn buffers' leases stay counted until released");
            assertEquals(1, s.stats().connections().get(0).leases());
            a.close();
            assertEquals(0, s.totalLeaseCount());
        }
    }

    /**
     * close(): "Published buffers are not closed (they are the caller's)"; isClosed(): "no
     * connection is accepted and nothing can be published from then on".
     */
    @Test
    void closeLeavesPublishedBuffersOpenAndRefusesLaterPublishesAndConnections() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            s.publish("b", buf);
            s.close();
            assertFalse(buf.isClosed(), "published buffers are the caller's");
            buf.fill((byte) 1); // still usable
            ServerContractTest.assertThrowsSaying(IllegalStateException.class, () -> s.publish("c", buf), "closed");
            assertThrows(java.io.IOException.class, () -> SharingClient.connect(sock));
            assertFalse(s.unpublish("b"), "nothing is published on a closed server");
        }
    }

    /**
     * Builder.listener: "each listener called in the order added. Same as addListener right
     * after build()"; addListener: "after the listeners added before it".
     */
    @Test
    void builderListenersComeBeforeAddedOnesInTheOrderAdded() throws Exception {
        List<String> calls = new CopyOnWriteArrayList<>();
        List<SharingListener> ls = new ArrayList<>();
        java.util.concurrent.CountDownLatch lastAttached = new java.util.concurrent.CountDownLatch(1);
        for (int i = 0; i < 4; i++) {
            String id = "L" + i;
            ls.add(new SharingListener() {
                @Override
                public void connected(PeerCredentials p) { calls.add(id + " connected"); }

                @Override
                public void attached(LeaseEvent e) {
                    calls.add(id + " attached " + e.leaseCount());
                    if (id.equals("L3")) lastAttached.countDown();
                }
            });
        }
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).listener(ls.get(0)).listener(ls.get(1)).build()) {
            s.addListener(ls.get(2));
            s.addListener(ls.get(3));
            s.publish("b", buf);
            try (SharingClient c = SharingClient.connect(sock); Attachment a = c.attach("b", r)) {
                // "attached": after the DESCRIPTOR was queued, so the client may have it first
                assertTrue(lastAttached.await(10, java.util.concurrent.TimeUnit.SECONDS));
                assertEquals(List.of("L0 connected", "L1 connected", "L2 connected", "L3 connected",
                        "L0 attached 1", "L1 attached 1", "L2 attached 1", "L3 attached 1"), calls);
            }
        }
    }

    /**
     * LeaseEvent: "leaseCount: leases on that published buffer after this event", on
     * SharingListener.released: "A lease ended: the client released it, or its connection ended".
     * A lease on a withdrawn buffer still ends with the count of that buffer's leases.
     */
    @Test
    void releaseEventsAfterUnpublishCountTheWithdrawnBuffersLeases() throws Exception {
        List<LeaseEvent> ends = new CopyOnWriteArrayList<>();
        java.util.concurrent.CountDownLatch bothEnded = new java.util.concurrent.CountDownLatch(2);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).listener(new SharingListener() {
                 @Override
                 public void released(LeaseEvent e) {
                     ends.add(e);
                     bothEnded.countDown();
                 }
             }).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            Attachment a1 = c.attach("b", r);
            Attachment a2 = c.attach("b", r);
            s.unpublish("b");
            a1.close();
            a2.close();
            // The event fires on the connection's thread after the RELEASED is sent, so the
            // client's close() can return before the listener ran (a CI run read 1 of 2).
            assertTrue(bothEnded.await(10, java.util.concurrent.TimeUnit.SECONDS), "both release events fired");
            assertEquals(2, ends.size());
            assertEquals(1, ends.get(0).leaseCount());
            assertEquals(0, ends.get(1).leaseCount());
            assertEquals(LeaseEvent.Reason.RELEASED, ends.get(1).reason());
        }
    }

    /** unpublish, isPublished: the name argument is checked by name. */
    @Test
    void unpublishNamesANullName() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build()) {
            ServerContractTest.assertThrowsSaying(NullPointerException.class, () -> s.unpublish(null), "name");
            ServerContractTest.assertThrowsSaying(NullPointerException.class, () -> s.leaseCount(null), "name");
        }
    }

    /**
     * Class javadoc: "the owner's close() refuses while a consumer holds it (the message names
     * the consumer; closeWhenUnused() closes it after the last release). An ATTACH of a
     * buffer the owner closed is answered with ERROR INTERNAL."
     */
    @Test
    void theOwnersCloseRefusesWhileLeasedAndAClosedBufferIsAnsweredWithInternal() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             SharingServer s = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock, "named-consumer")) {
            VirtualMemoryBuffer buf = r.allocate(r.granularity());
            s.publish("b", buf);
            Attachment a = c.attach("b", r);
            ServerContractTest.assertThrowsSaying(IllegalStateException.class, buf::close, "named-consumer");
            assertFalse(buf.isClosed());
            buf.closeWhenUnused();
            assertFalse(buf.isClosed(), "still leased");
            a.close();
            assertTrue(buf.isClosed(), "closed after the last release");
            assertTrue(s.isPublished("b"), "the server does not own the name's buffer");
            SharingException e = assertThrows(SharingException.class, () -> c.attach("b", r));
            assertEquals(ErrorCode.INTERNAL, e.code(), e.getMessage());
            assertEquals(0, s.totalLeaseCount(), "a failed ATTACH is never counted");
            assertTrue(c.isConnected());
        }
    }

    /**
     * SharingListener: "Called on the server's threads (the connection's own reader thread for
     * lease events)"; disconnected: "A connection ended (after its leases were released)".
     */
    @Test
    void leaseEventsRunOnTheConnectionsOwnReaderThread() throws Exception {
        List<Thread> attachedOn = new CopyOnWriteArrayList<>();
        List<Thread> releasedOn = new CopyOnWriteArrayList<>();
        java.util.concurrent.CountDownLatch gone = new java.util.concurrent.CountDownLatch(1);
        SharingListener l = new SharingListener() {
            @Override
            public void attached(LeaseEvent e) { attachedOn.add(Thread.currentThread()); }

            @Override
            public void released(LeaseEvent e) { releasedOn.add(Thread.currentThread()); }

            @Override
            public void disconnected(PeerCredentials p, String n) { gone.countDown(); }
        };
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).listener(l).build()) {
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock);
            c.attach("b", r).close();
            c.attach("b", r);
            c.closeNow(); // the second lease ends with the connection
            assertTrue(gone.await(10, java.util.concurrent.TimeUnit.SECONDS));
            assertEquals(2, attachedOn.size());
            assertEquals(2, releasedOn.size());
            Thread reader = attachedOn.get(0);
            assertTrue(reader.getName().contains("-read"), reader.getName());
            for (Thread t : attachedOn) assertEquals(reader, t);
            for (Thread t : releasedOn) assertEquals(reader, t, "released: on the connection's own reader");
        }
    }

    /**
     * Builder.handshakeTimeout: "Past it the server sends ERROR TIMEOUT and closes the
     * connection"; SharingListener.error: "its connection timed out (code TIMEOUT: the ERROR is
     * sent and the connection closed)".
     */
    @Test
    void aSilentConnectionGetsTimeoutAndTheListenerHearsIt() throws Exception {
        List<ErrorCode> errors = new CopyOnWriteArrayList<>();
        java.util.concurrent.CountDownLatch gone = new java.util.concurrent.CountDownLatch(1);
        try (SharingServer s = SharingServer.builder(sock).handshakeTimeout(java.time.Duration.ofMillis(100))
                .listener(new SharingListener() {
                    @Override
                    public void error(PeerCredentials p, String n, ErrorCode code, String m, boolean byClient) {
                        assertFalse(byClient);
                        errors.add(code);
                    }

                    @Override
                    public void disconnected(PeerCredentials p, String n) { gone.countDown(); }
                }).build();
             FdSocket raw = FdSocket.connect(sock)) {
            assertTrue(gone.await(10, java.util.concurrent.TimeUnit.SECONDS), "the silent connection is closed");
            assertEquals(List.of(ErrorCode.TIMEOUT), errors);
            try (ReceivedMessage m = raw.receive(Protocol.HEADER_SIZE)) {
                assertFalse(m.endOfStream(), "an ERROR frame came before the end");
            }
        }
    }

    /**
     * SharingListener: "A listener may call SharingServer#close() ...: it does not wait for the
     * calling thread, which ends once the listener returns", here from {@code connected} (on
     * the accept thread, before the connection's own threads start); close(): "once any
     * close() returns the leases have ended", the connection is closed and no server thread
     * stays.
     */
    @Test
    void aConnectedListenerMayCloseTheServer() throws Exception {
        java.util.concurrent.atomic.AtomicReference<SharingServer> ref = new java.util.concurrent.atomic.AtomicReference<>();
        java.util.concurrent.CountDownLatch closed = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.CountDownLatch gone = new java.util.concurrent.CountDownLatch(1);
        java.util.Set<Thread> before = new java.util.HashSet<>(Thread.getAllStackTraces().keySet());
        SharingServer s = SharingServer.builder(sock).listener(new SharingListener() {
            @Override
            public void connected(PeerCredentials p) {
                ref.get().close();
                closed.countDown();
            }

            @Override
            public void disconnected(PeerCredentials p, String n) { gone.countDown(); }
        }).build();
        ref.set(s);
        try (FdSocket raw = FdSocket.connect(sock)) {
            assertTrue(closed.await(10, java.util.concurrent.TimeUnit.SECONDS), "close() from the listener returned");
            assertTrue(s.isClosed());
            try (ReceivedMessage m = raw.receive(1)) {
                assertTrue(m.endOfStream(), "the connection is closed");
            }
            assertTrue(gone.await(10, java.util.concurrent.TimeUnit.SECONDS), "disconnected is heard");
            IpcTestSupport.await("no server thread left", 10, () -> {
                for (Thread t : Thread.getAllStackTraces().keySet()) {
                    if (!before.contains(t) && t.isAlive() && (t.getName().startsWith("cuvmm-ipc-conn-")
                            || t.getName().startsWith("cuvmm-ipc-accept"))) return false;
                }
                return true;
            });
            assertEquals(0, s.connectionCount());
        }
    }

    /** PeerCredentials: "pid the peer's process id, uid the peer's effective user id, gid the peer's effective group id". */
    @Test
    void peerCredentialsAreThisProcesssOnAPair() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            PeerCredentials c = p[0].peerCredentials();
            assertEquals(ProcessHandle.current().pid(), c.pid());
            assertEquals(NativeIo.posix().geteuid(), c.uid());
            assertEquals(c, p[1].peerCredentials());
            assertTrue(c.toString().contains("pid " + c.pid()), c.toString());
        } finally {
            p[0].close();
            p[1].close();
        }
    }
}
