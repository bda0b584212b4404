package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The documented contract of the public server side of vmm-ipc, one method at a time:
 * {@link SharingServer} and its {@link SharingServer.Builder}, {@link SharingStats}, the
 * MXBean, {@link SharingListener}'s order, {@link ErrorCode}, {@link FdSocket},
 * {@link FdServerSocket} and {@link ReceivedMessage}: argument checks (the message names
 * the argument and the value), {@code @throws} clauses, idempotence and thread safety.
 */
class ServerContractTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    /** {@code exec} throws {@code type} whose message contains every fragment. */
    static <T extends Throwable> T assertThrowsSaying(Class<T> type, Executable exec, String... fragments) {
        T e = assertThrows(type, exec);
        String m = String.valueOf(e.getMessage());
        for (String f : fragments) assertTrue(m.contains(f), "the message names '" + f + "': " + m);
        return e;
    }

    /**
     * A close() that runs between publish's checks and its put (a contract probe: close()
     * clears the names at its end, so a put after that left a name published on a closed
     * server). The publish now fails as on a closed server and leaves nothing published.
     */
    @Test
    void aPublishRacingCloseLeavesNoNameOnAClosedServer() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            SharingServer.beforePublishPut = s::close; // the whole close() runs here, then the put
            try {
                assertThrowsSaying(IllegalStateException.class, () -> s.publish("late", b), "closed");
            } finally {
                SharingServer.beforePublishPut = null;
            }
            assertTrue(s.isClosed());
            assertFalse(s.isPublished("late"), "a name stayed published on a closed server");
            assertTrue(s.publishedNames().isEmpty(), "published: " + s.publishedNames());
        }
    }

    // ---------------------------------------------------------------- builder

    @Test
    void builderChecksItsArgumentsByName() {
        assertThrowsSaying(NullPointerException.class, () -> SharingServer.builder(null), "path");
        assertThrowsSaying(IllegalArgumentException.class, () -> SharingServer.builder(Path.of("/tmp/" + "x".repeat(200))),
                "path", "107", "shorter");
        SharingServer.Builder b = SharingServer.builder(sock);
        assertThrowsSaying(IllegalArgumentException.class, () -> b.allowUids(1, -1), "allowUids", "-1");
        assertThrowsSaying(NullPointerException.class, () -> b.allowUids((int[]) null), "uids");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.alsoAllowUids(-2), "alsoAllowUids", "-2");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.maxConnections(0), "maxConnections", "0", ">= 1");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.maxLeasesPerConnection(-3), "maxLeasesPerConnection",
                "-3");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.maxIdsPerConnection(0), "maxIdsPerConnection", "0");
        assertThrowsSaying(NullPointerException.class, () -> b.handshakeTimeout(null), "handshakeTimeout");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.handshakeTimeout(Duration.ofSeconds(-1)),
                "handshakeTimeout", "PT-1S");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.idleTimeout(Duration.ofSeconds(Long.MAX_VALUE)),
                "idleTimeout");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.socketFileMode(0644), "socketFileMode", "0644");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.socketFileMode(0700), "0700");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.socketFileMode(01666), "01666");
        assertThrowsSaying(NullPointerException.class, () -> b.socketFileGroup(null), "group");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.socketFileGroup(""), "socketFileGroup");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.backlog(0), "backlog", "0");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.maxProtocolVersion(0), "maxProtocolVersion", "0");
        assertThrowsSaying(IllegalArgumentException.class, () -> b.maxProtocolVersion(3), "maxProtocolVersion", "3");
        assertThrowsSaying(NullPointerException.class, () -> b.listener(null), "listener");
        // Valid values pass.
        b.socketFileMode(0600).socketFileMode(0660).socketFileMode(0606).socketFileMode(0666).backlog(1)
                .maxProtocolVersion(1).maxProtocolVersion(2).handshakeTimeout(Duration.ZERO).idleTimeout(Duration.ZERO);
    }

    @Test
    void aRefusedUidListChangesNothing() throws Exception {
        SharingServer.Builder b = SharingServer.builder(sock).allowUids(5);
        assertThrows(IllegalArgumentException.class, () -> b.allowUids(7, -1));
        assertThrows(IllegalArgumentException.class, () -> b.alsoAllowUids(8, -1));
        try (SharingServer s = b.build()) {
            assertEquals(Set.of(5), s.allowedUids(), "the refused calls changed nothing");
            assertThrows(UnsupportedOperationException.class, () -> s.allowedUids().add(9));
        }
    }

    @Test
    void theDefaultAllowListIsThisUidAndAlsoAllowAddsToIt() throws Exception {
        int me = NativeIo.posix().geteuid();
        try (SharingServer s = SharingServer.builder(sock).alsoAllowUids(12345).build()) {
            assertEquals(Set.of(me, 12345), s.allowedUids());
        }
        try (SharingServer s = SharingServer.builder(sock).alsoAllowUids(5).allowUids(7).build()) {
            assertEquals(Set.of(7), s.allowedUids(), "allowUids drops what alsoAllowUids added before");
        }
        try (SharingServer s = SharingServer.builder(sock).allowUids(7).alsoAllowUids(8).build()) {
            assertEquals(Set.of(7, 8), s.allowedUids(), "after allowUids, this process's uid is not added");
        }
    }

    @Test
    void anEmptyAllowListAdmitsNobody() throws Exception {
        List<String> refused = new CopyOnWriteArrayList<>();
        List<PeerCredentials> connected = new CopyOnWriteArrayList<>();
        try (SharingServer s = SharingServer.builder(sock).allowUids().listener(new SharingListener() {
            @Override
            public void refused(PeerCredentials peer, String reason) { refused.add(reason); }

            @Override
            public void connected(PeerCredentials peer) { connected.add(peer); }
        }).build()) {
            SharingException e = assertThrows(SharingException.class, () -> SharingClient.connect(sock));
            assertEquals(ErrorCode.NOT_ALLOWED, e.code());
            assertTrue(e.getMessage().contains("uid " + NativeIo.posix().geteuid()), e.getMessage());
            await("the refused event", 5, () -> refused.size() == 1);
            assertEquals(List.of(), connected, "connected() only for a client that passed the credentials check");
            assertEquals(0, s.connectionCount());
        }
    }

    @Test
    void aGroupOnAModeThatGivesItNoAccessIsRefusedAndNothingIsBound() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        assertThrowsSaying(IllegalArgumentException.class,
                () -> SharingServer.builder(sock).socketFileGroup("nogroup").socketFileMode(0606).build(),
                "socketFileGroup", "nogroup", "0606");
        assertFalse(Files.exists(sock), "no socket file left");
        assertFdsBack(base, "after the refused build");
    }

    @Test
    void buildRefusesALiveServersPathAndKeepsItsFile() throws Exception {
        try (SharingServer first = SharingServer.builder(sock).build()) {
            assertThrowsSaying(IOException.class, () -> SharingServer.builder(sock).build(), "live server", sock.toString());
            assertTrue(Files.exists(sock));
            try (SharingClient c = SharingClient.connect(sock)) {
                assertTrue(c.isConnected(), "the first server still serves");
            }
        }
    }

    @Test
    void buildRefusesANameTakenByAnotherBeanAndLeavesNothingBound() throws Exception {
        Path abs = sock.toAbsolutePath().normalize();
        javax.management.ObjectName name = new javax.management.ObjectName("org.cuvmm:type=SharingServer,name="
                + javax.management.ObjectName.quote(abs.toString()));
        javax.management.MBeanServer mbs = java.lang.management.ManagementFactory.getPlatformMBeanServer();
        mbs.registerMBean(new javax.management.monitor.CounterMonitor(), name);
        Map<String, Integer> base = fdSnapshot();
        try {
            assertThrowsSaying(IllegalStateException.class, () -> SharingServer.builder(sock).registerMBean(true).build(),
                    "already registered");
            assertFalse(Files.exists(sock), "nothing is left bound");
            assertFdsBack(base, "after the refused build");
        } finally {
            mbs.unregisterMBean(name);
        }
        // Once free, the same path registers, and close() unregisters.
        SharingServer s = SharingServer.builder(sock).registerMBean(true).build();
        assertEquals(name, s.objectName());
        assertTrue(mbs.isRegistered(name));
        assertEquals(abs.toString(), mbs.getAttribute(name, "SocketPath"));
        s.close();
        assertFalse(mbs.isRegistered(name), "close() unregisters the bean");
    }

    @Test
    void noBeanIsRegisteredByDefault() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build()) {
            assertFalse(java.lang.management.ManagementFactory.getPlatformMBeanServer().isRegistered(s.objectName()));
        }
    }

    @Test
    void theBuilderValuesAreReported() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).maxConnections(3).maxLeasesPerConnection(4)
                .handshakeTimeout(Duration.ofSeconds(7)).idleTimeout(Duration.ZERO).maxIdsPerConnection(9)
                .maxProtocolVersion(1).build()) {
            assertEquals(new ConnectionLimits(3, 4, Duration.ofSeconds(7), Duration.ZERO), s.limits());
            assertEquals(9, s.maxIdsPerConnection());
            assertEquals(1, s.maxProtocolVersion());
            assertEquals(sock.toAbsolutePath(), s.socketPath());
            assertTrue(s.socketPath().isAbsolute());
        }
        try (SharingServer s = SharingServer.builder(sock).build()) {
            assertEquals(ConnectionLimits.DEFAULTS, s.limits());
            assertEquals(SharingServer.DEFAULT_MAX_IDS_PER_CONNECTION, s.maxIdsPerConnection());
            assertEquals(Protocol.LATEST_VERSION, s.maxProtocolVersion());
        }
    }

    @Test
    void connectionLimitsCheckEachValueByName() {
        assertThrowsSaying(IllegalArgumentException.class,
                () -> new ConnectionLimits(0, 1, Duration.ZERO, Duration.ZERO), "maxConnections");
        assertThrowsSaying(IllegalArgumentException.class,
                () -> new ConnectionLimits(1, 0, Duration.ZERO, Duration.ZERO), "maxLeasesPerConnection");
        assertThrowsSaying(NullPointerException.class, () -> new ConnectionLimits(1, 1, null, Duration.ZERO),
                "handshakeTimeout");
        assertThrowsSaying(IllegalArgumentException.class,
                () -> new ConnectionLimits(1, 1, Duration.ZERO, Duration.ofMillis(-1)), "idleTimeout");
    }

    // ---------------------------------------------------------------- owner API

    @Test
    void publishChecksItsArgumentsAndState() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             VirtualMemoryResource local = VirtualMemoryResource.create(0,
                     VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build());
             VirtualMemoryBuffer notExportable = local.allocate(local.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            assertThrowsSaying(NullPointerException.class, () -> s.publish(null, buf), "name");
            assertThrowsSaying(NullPointerException.class, () -> s.publish("b", null), "buffer");
            assertThrowsSaying(IllegalArgumentException.class, () -> s.publish("", buf), "name", "0 bytes", "1 to 255");
            assertThrowsSaying(IllegalArgumentException.class, () -> s.publish("é".repeat(128), buf), "256 bytes");
            s.publish("x".repeat(255), buf); // 255 bytes is the most
            assertThrowsSaying(IllegalArgumentException.class, () -> s.publish("local", notExportable), "local",
                    "NONE", "POSIX_FD");
            s.publish("b", buf);
            assertThrowsSaying(IllegalStateException.class, () -> s.publish("b", buf), "'b'", "already published");
            assertEquals(List.of("b", "x".repeat(255)), new ArrayList<>(s.publishedNames()), "sorted");
            assertThrows(UnsupportedOperationException.class, () -> s.publishedNames().add("c"));
            assertTrue(s.isPublished("b"));
            assertFalse(s.isPublished("c"));
            assertEquals(0, s.leaseCount("c"), "0 for a name not published");
            VirtualMemoryBuffer closed = r.allocate(r.granularity());
            closed.close();
            assertThrowsSaying(IllegalStateException.class, () -> s.publish("closed", closed), "'closed'", "closed");
            s.close();
            assertThrowsSaying(IllegalStateException.class, () -> s.publish("late", buf), "closed", sock.getFileName().toString());
            assertTrue(s.publishedNames().isEmpty(), "close() withdraws every name");
            assertFalse(s.unpublish("b"), "after close() nothing is published");
            assertFalse(buf.isClosed(), "the server does not own published buffers");
        }
    }

    @Test
    void unpublishIsFalseForAnUnknownNameAndTheSecondTime() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            assertThrowsSaying(NullPointerException.class, () -> s.unpublish(null), "name");
            assertFalse(s.unpublish("never"));
            s.publish("b", buf);
            assertTrue(s.unpublish("b"));
            assertFalse(s.unpublish("b"), "unpublish twice: the second says it was not published");
            s.publish("b", buf); // the name is free again
            assertTrue(s.isPublished("b"));
        }
    }

    @Test
    void closeIsIdempotentDeletesTheSocketAndEndsLeases() throws Exception {
        List<LeaseEvent> ends = new CopyOnWriteArrayList<>();
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).listener(new SharingListener() {
                @Override
                public void released(LeaseEvent e) { ends.add(e); }
            }).build();
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock, "holder");
            Attachment a = c.attach("b", r);
            assertEquals(1, s.totalLeaseCount());
            s.close();
            assertTrue(s.isClosed());
            assertFalse(Files.exists(sock), "close() deletes the socket file");
            assertEquals(0, s.totalLeaseCount(), "once close() returns the leases have ended");
            assertEquals(1, ends.size());
            assertEquals(LeaseEvent.Reason.SERVER_CLOSED, ends.get(0).reason());
            s.close(); // idempotent
            assertEquals(1, ends.size(), "a second close() ends nothing twice");
            assertEquals(0, s.connectionCount());
            assertTrue(s.toString().contains("closed"), s.toString());
            await("the client sees the end", 5, () -> !c.isConnected());
            a.close(); // the connection ended: only the buffer is closed
            assertTrue(a.isClosed());
            c.close();
        }
        assertFdsBack(base, "after the server and the client closed");
    }

    @Test
    void closeFromEightThreadsAtOnceReturnsInEachWithTheLeasesEnded() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer s = SharingServer.builder(sock).build();
            s.publish("b", buf);
            List<SharingClient> clients = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                SharingClient c = SharingClient.connect(sock, "c" + i);
                c.attach("b", r);
                clients.add(c);
            }
            List<Integer> leases = IpcTestSupport.raceFor(8, 60, me -> {
                s.close();
                return s.totalLeaseCount();
            });
            for (int l : leases) assertEquals(0, l, "leases after close()");
            for (SharingClient c : clients) c.close();
        }
        assertFdsBack(base, "after eight racing close() calls");
    }

    @Test
    void eightThreadsPublishAttachAndReadStatsWithoutLeaks() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            s.publish("shared", buf);
            IpcTestSupport.race(8, 120, me -> {
                try (SharingClient c = SharingClient.connect(sock, "t" + me)) {
                    for (int i = 0; i < 25; i++) {
                        String own = "own-" + me + "-" + i;
                        s.publish(own, buf);
                        try (Attachment a = c.attach(i % 2 == 0 ? own : "shared", r)) {
                            assertTrue(a.buffer().size() > 0);
                            s.stats();
                            s.totalLeaseCount();
                        }
                        assertTrue(s.unpublish(own));
                    }
                }
            });
            assertEquals(0, s.totalLeaseCount());
            assertEquals(List.of("shared"), new ArrayList<>(s.publishedNames()));
            await("connections ended", 10, () -> s.connectionCount() == 0);
        }
        assertFdsBack(base, "after 8 threads x 25 publish/attach/release/unpublish rounds");
    }

    // ---------------------------------------------------------------- stats, JMX

    @Test
    void statsDescribeEachConnection() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(2 * r.granularity());
             SharingServer s = SharingServer.builder(sock).registerMBean(true).build();
             SharingClient v2 = SharingClient.connect(sock, "two");
             SharingClient v1 = SharingClient.builder(sock).clientName("one").protocolVersion(1).build()) {
            s.publish("b", buf);
            Attachment a1 = v1.attach("b", r);
            Attachment a2 = v2.attach("b", r);
            Attachment a3 = v2.attach("b", r);
            SharingStats st = s.stats();
            assertEquals(2, st.connections().size());
            SharingStats.ConnectionStats first = st.connections().get(0);
            SharingStats.ConnectionStats second = st.connections().get(1);
            assertTrue(first.connectionId() < second.connectionId(), "in accept order");
            assertEquals("two", first.clientName());
            assertEquals(2, first.version());
            assertEquals(2, first.leases());
            assertEquals(buf.chunkCount(), first.idsHeld(), "one id per allocation");
            assertEquals("one", second.clientName());
            assertEquals(1, second.version());
            assertEquals(1, second.leases());
            assertEquals(0, second.idsHeld(), "version 1 holds no ids");
            assertEquals(ProcessHandle.current().pid(), first.peer().pid());
            assertEquals(st.connections().stream().mapToLong(SharingStats.ConnectionStats::idsHeld).sum(), st.idsHeld());
            // version 1: one fd per chunk per attach; version 2: one per allocation not held
            assertEquals(2L * buf.chunkCount(), st.fdsSent());
            assertEquals(0, st.releasedStillMappedAllocations());
            assertEquals(0, st.releasedStillMappedBytes());
            assertThrows(UnsupportedOperationException.class, () -> st.connections().clear());
            javax.management.MBeanServer mbs = java.lang.management.ManagementFactory.getPlatformMBeanServer();
            assertEquals(2, mbs.getAttribute(s.objectName(), "ConnectionCount"));
            assertEquals(3, mbs.getAttribute(s.objectName(), "LeaseCount"));
            assertEquals(st.idsHeld(), mbs.getAttribute(s.objectName(), "IdsHeld"));
            assertEquals(st.fdsSent(), mbs.getAttribute(s.objectName(), "FdsSent"));
            assertEquals(0, ((String[]) mbs.getAttribute(s.objectName(), "ReleasedStillMapped")).length);
            assertEquals(3, s.totalLeaseCount());
            assertEquals(3, s.leaseCount("b"));
            a1.close();
            a2.close();
            a3.close();
            assertEquals(0, s.totalLeaseCount());
        }
    }

    @Test
    void aVersionOneServerServesTheDefaultClientInVersionOne() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).maxProtocolVersion(1).build()) {
            s.publish("b", buf);
            try (SharingClient c = SharingClient.connect(sock)) {
                assertEquals(1, c.protocolVersion());
                assertEquals(1, c.serverVersion());
                try (Attachment a = c.attach("b", r)) {
                    assertEquals(buf.size(), a.buffer().size());
                }
                assertEquals(0, c.importCache().stats().entries(), "version 1 keeps nothing in the cache");
            }
            SharingException e = assertThrows(SharingException.class,
                    () -> SharingClient.builder(sock).protocolVersion(2).build());
            assertEquals(ErrorCode.BAD_VERSION, e.code());
        }
    }

    // ---------------------------------------------------------------- listeners

    @Test
    void listenerEventsComeInTheirDocumentedOrder() throws Exception {
        List<String> log = new CopyOnWriteArrayList<>();
        SharingListener recorder = new SharingListener() {
            @Override
            public void connected(PeerCredentials peer) { log.add("connected"); }

            @Override
            public void attached(LeaseEvent e) { log.add("attached " + e.leaseCount()); }

            @Override
            public void released(LeaseEvent e) { log.add("released " + e.reason() + " " + e.leaseCount()); }

            @Override
            public void disconnected(PeerCredentials peer, String clientName) { log.add("disconnected " + clientName); }
        };
        SharingListener thrower = new SharingListener() {
            @Override
            public void connected(PeerCredentials peer) { throw new IllegalStateException("listener failure (expected)"); }

            @Override
            public void attached(LeaseEvent e) { throw new AssertionError("listener error (expected)"); }
        };
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).listener(thrower).build()) {
            assertThrowsSaying(NullPointerException.class, () -> s.addListener(null), "listener");
            s.addListener(recorder);
            s.removeListener(new SharingListener() {}); // not registered: no effect
            s.publish("b", buf);
            SharingClient c = SharingClient.connect(sock, "ordered");
            Attachment a = c.attach("b", r);
            Attachment b = c.attach("b", r);
            a.close();
            c.closeNow(); // no RELEASE: the connection's end frees b's lease
            await("disconnected", 5, () -> log.contains("disconnected ordered"));
            assertEquals(List.of("connected", "attached 1", "attached 2", "released RELEASED 1",
                    "released DISCONNECTED 0", "disconnected ordered"), log);
            assertTrue(b.isClosed());
            s.removeListener(recorder);
            SharingClient.connect(sock).close();
            await("connections ended", 5, () -> s.connectionCount() == 0);
            assertEquals(6, log.size(), "a removed listener hears nothing");
        }
    }

    // ---------------------------------------------------------------- error codes, exceptions, records

    @Test
    void errorCodesMatchTheProtocolTable() {
        Set<Integer> seen = new HashSet<>();
        for (ErrorCode c : ErrorCode.values()) {
            assertTrue(seen.add(c.code()), "unique: " + c);
            assertEquals(c, ErrorCode.of(c.code()));
        }
        assertNull(ErrorCode.of(0));
        assertNull(ErrorCode.of(20));
        assertNull(ErrorCode.of(-1));
        Set<ErrorCode> fatal = Set.of(ErrorCode.BAD_MAGIC, ErrorCode.TRUNCATED, ErrorCode.TOO_LARGE, ErrorCode.NOT_ALLOWED,
                ErrorCode.TOO_MANY_CONNECTIONS, ErrorCode.TIMEOUT);
        for (ErrorCode c : ErrorCode.values()) assertEquals(fatal.contains(c), c.fatal(), "PROTOCOL.md section 4: " + c);
        assertEquals(19, ErrorCode.TOO_MANY_IDS.code());
        assertEquals(18, ErrorCode.UNKNOWN_ID.code());
        SharingException e = new SharingException(ErrorCode.UNKNOWN_NAME, "m");
        assertEquals(ErrorCode.UNKNOWN_NAME, e.code());
        assertEquals("m", e.getMessage());
        IOException cause = new IOException("why");
        SharingException local = new SharingException(null, "local", cause);
        assertNull(local.code());
        assertEquals(cause, local.getCause());
        assertEquals("pid 1, uid 2, gid 3", new PeerCredentials(1, 2, 3).toString());
    }

    // ---------------------------------------------------------------- FdSocket, FdServerSocket, ReceivedMessage

    @Test
    void fdSocketSendAndReceiveCheckTheirArguments() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        try {
            assertThrowsSaying(NullPointerException.class, () -> p[0].send(null, null), "data");
            assertThrows(IndexOutOfBoundsException.class, () -> p[0].send(new byte[4], 2, 3, null));
            assertThrowsSaying(IllegalArgumentException.class, () -> p[0].send(new byte[1], new int[254]), "fds", "254",
                    "253");
            assertThrowsSaying(IllegalArgumentException.class, () -> p[0].send(new byte[1], new int[] {-1}), "fds", "-1");
            assertThrowsSaying(IllegalArgumentException.class, () -> p[0].send(new byte[0], new int[] {0}), "length",
                    "0", "1 fds");
            assertThrowsSaying(IllegalArgumentException.class, () -> p[1].receive(-1), "length", "-1");
            assertThrowsSaying(IllegalArgumentException.class, () -> p[1].receive(1, 254), "maxFds", "254");
            assertThrowsSaying(IllegalArgumentException.class, () -> p[1].receive(1, -1), "maxFds", "-1");
            int[] pipe = IpcTestSupport.pipe();
            try {
                p[0].send(new byte[] {1, 2, 3}, pipe);
                try (ReceivedMessage m = p[1].receive(3)) {
                    assertEquals(3, m.length());
                    assertEquals(2, m.fdCount());
                    assertFalse(m.endOfStream());
                    int[] fds = m.fds();
                    assertEquals(2, fds.length);
                    int[] taken = m.takeFds();
                    assertEquals(0, m.fdCount());
                    assertThrowsSaying(IllegalStateException.class, m::takeFds, "taken");
                    assertThrowsSaying(IllegalStateException.class, m::fds, "taken");
                    NativeIo.closeAll(taken);
                    m.close(); // nothing left: no effect
                }
            } finally {
                NativeIo.closeAll(pipe);
            }
            assertEquals(ProcessHandle.current().pid(), p[0].peerCredentials().pid());
            int notOpen = 999_999; // (a closed pipe's number could be reused by another thread meanwhile)
            assertFalse(IpcTestSupport.isOpen(notOpen));
            assertThrowsSaying(IOException.class, () -> p[0].send(new byte[1], new int[] {notOpen}), "not open",
                    String.valueOf(notOpen));
            p[0].shutdownOutput();
            try (ReceivedMessage eos = p[1].receive(5)) {
                assertTrue(eos.endOfStream(), "after shutdownOutput the peer reads end of stream");
                assertEquals(0, eos.length());
            }
        } finally {
            p[0].close();
            p[1].close();
        }
        assertFalse(p[0].isOpen());
        p[0].close(); // idempotent
        assertThrows(ClosedChannelException.class, () -> p[0].send(new byte[1], null));
        assertThrows(ClosedChannelException.class, () -> p[1].receive(1));
        assertThrows(ClosedChannelException.class, () -> p[0].peerCredentials());
        assertThrows(ClosedChannelException.class, () -> p[0].shutdownOutput());
        assertFdsBack(base, "after the pair closed");
    }

    @Test
    void fdServerSocketBindAcceptAndClose() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        assertThrowsSaying(IllegalArgumentException.class, () -> FdServerSocket.bind(sock, 0644, null, 1), "0644");
        assertThrowsSaying(IllegalArgumentException.class, () -> FdServerSocket.bind(sock, 0600, null, 0), "backlog", "0");
        Path missing = sock.getParent().resolve("no-such-dir").resolve("s");
        assertThrowsSaying(IOException.class, () -> FdServerSocket.bind(missing), missing.getParent().toString(),
                "does not exist");
        Path regular = sock.getParent().resolve("plain");
        Files.writeString(regular, "x");
        assertThrowsSaying(IOException.class, () -> FdServerSocket.bind(regular), regular.toString());
        assertTrue(Files.exists(regular), "a file that is no socket is never touched");
        assertThrowsSaying(IOException.class, () -> FdSocket.connect(sock), sock.toString());
        FdServerSocket s = FdServerSocket.bind(sock);
        assertEquals(sock.toAbsolutePath(), s.path());
        assertEquals("rw-------", java.nio.file.attribute.PosixFilePermissions.toString(Files.getPosixFilePermissions(sock)));
        try (FdSocket c = FdSocket.connect(sock); FdSocket a = s.accept()) {
            c.send(new byte[] {42}, null);
            try (ReceivedMessage m = a.receive(1)) {
                assertEquals(42, m.data()[0]);
            }
            assertEquals(NativeIo.posix().geteuid(), a.peerCredentials().uid());
        }
        // (after the accept: the probe's own connect waits in the backlog)
        assertThrowsSaying(IOException.class, () -> FdServerSocket.bind(sock), "live server");
        s.close();
        assertFalse(s.isOpen());
        assertFalse(Files.exists(sock), "close() deletes its socket file");
        s.close(); // idempotent
        assertThrows(ClosedChannelException.class, s::accept);
        assertFdsBack(base, "after bind, accept and close");
    }

    @Test
    void aDeadServersSocketFileIsReplaced() throws Exception {
        // A socket file nobody listens on: bind, then close the channel without deleting the file.
        FdServerSocket first = FdServerSocket.bind(sock);
        Path kept = sock.getParent().resolve("kept");
        Files.createLink(kept, sock); // close() deletes sock; a second name keeps the inode
        first.close();
        Files.move(kept, sock);
        try (FdServerSocket second = FdServerSocket.bind(sock)) {
            assertTrue(second.isOpen());
            try (FdSocket c = FdSocket.connect(sock); FdSocket a = second.accept()) {
                assertNotNull(a.peerCredentials());
            }
        }
    }

    @Test
    void readersOfTheOwnerApiNameANullName() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build()) {
            assertThrowsSaying(NullPointerException.class, () -> s.isPublished(null), "name");
            assertThrowsSaying(NullPointerException.class, () -> s.leaseCount(null), "name");
        }
    }

    @Test
    void statsShowAConnectionBeforeItsHello() throws Exception {
        try (SharingServer s = SharingServer.builder(sock).build(); FdSocket raw = FdSocket.connect(sock)) {
            await("the connection is served", 5, () -> s.connectionCount() == 1);
            SharingStats.ConnectionStats c = s.stats().connections().get(0);
            assertEquals(0, c.version(), "0 before HELLO");
            assertEquals("", c.clientName(), "\"\" before HELLO");
            assertEquals(0, c.leases());
        }
    }

    @Test
    void theListenerHearsErrorsAndRefusals() throws Exception {
        List<String> log = new CopyOnWriteArrayList<>();
        SharingListener recorder = new SharingListener() {
            @Override
            public void refused(PeerCredentials peer, String reason) { log.add("refused " + reason); }

            @Override
            public void error(PeerCredentials peer, String clientName, ErrorCode code, String message, boolean sentByClient) {
                log.add("error " + code + " " + sentByClient + " " + clientName + ": " + message);
            }
        };
        try (SharingServer s = SharingServer.builder(sock).maxConnections(1).listener(recorder).build();
             FdSocket raw = FdSocket.connect(sock)) {
            raw.send(IpcTestSupport.frame(1, 1, IpcTestSupport.str("raw")), null);
            FrameIO.read(raw).close();
            raw.send(IpcTestSupport.frame(8, 0, IpcTestSupport.concat(new byte[] {0, 0, 0, 11}, IpcTestSupport.str("mine"))), null);
            await("the client's ERROR", 5, () -> log.size() == 1);
            assertEquals("error INTERNAL true raw: mine", log.get(0));
            raw.send(IpcTestSupport.frame(3, 0, IpcTestSupport.str("b")), null); // request id 0
            try (Frame f = FrameIO.read(raw)) {
                assertEquals(ErrorCode.BAD_REQUEST_ID, ((Messages.Error) f.message).errorCode());
            }
            await("the bad frame's ERROR", 5, () -> log.size() == 2);
            assertTrue(log.get(1).startsWith("error BAD_REQUEST_ID false raw"), log.get(1));
            raw.send(IpcTestSupport.frame(1, 5, IpcTestSupport.str("again")), null); // a second HELLO
            try (Frame f = FrameIO.read(raw)) {
                assertEquals(ErrorCode.UNEXPECTED_FRAME, ((Messages.Error) f.message).errorCode());
            }
            await("the second HELLO's ERROR", 5, () -> log.size() == 3);
            assertTrue(log.get(2).startsWith("error UNEXPECTED_FRAME false raw"), log.get(2));
            SharingException e = assertThrows(SharingException.class, () -> SharingClient.connect(sock));
            assertEquals(ErrorCode.TOO_MANY_CONNECTIONS, e.code());
            await("the refusal", 5, () -> log.size() == 4);
            assertTrue(log.get(3).startsWith("refused too many connections"), log.get(3));
        }
    }

    @Test
    void aGroupThatDoesNotExistIsNamedAndNothingIsLeftInTheDirectory() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        assertThrowsSaying(IOException.class,
                () -> SharingServer.builder(sock).socketFileGroup("no-such-group-cuvmm").socketFileMode(0660).build(),
                "no-such-group-cuvmm");
        try (java.util.stream.Stream<Path> left = Files.list(sock.getParent())) {
            assertEquals(List.of(), left.toList(), "no socket file, no private directory left");
        }
        assertFdsBack(base, "after the refused group");
        try (SharingServer s = SharingServer.builder(sock).build()) {
            try (java.util.stream.Stream<Path> left = Files.list(sock.getParent())) {
                assertEquals(List.of(sock), left.toList(), "only the socket file: the private directory is removed");
            }
        }
    }

    @Test
    void aBuffersChunkLimitAndAnImportedBufferAreRefusedByPublish() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build(); SharingClient c = SharingClient.connect(sock)) {
            s.publish("b", buf);
            try (Attachment a = c.attach("b", r)) {
                assertThrowsSaying(IllegalArgumentException.class, () -> s.publish("again", a.buffer()), "'again'");
            }
        }
    }

    @Test
    void fdTransferExceptionSaysWhatWasDropped() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try {
            p[0].send(new byte[] {1, 2}, pipe);
            FdTransferException e = assertThrows(FdTransferException.class, () -> p[1].receive(2, 1));
            assertEquals(FdTransferException.Reason.TOO_MANY_FDS, e.reason());
            assertEquals(2, e.fdsClosed());
            assertNotNull(e.data());
            assertNotNull(e.getMessage());
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(base, "every fd received was closed");
    }

    @Test
    void closeWakesAThreadBlockedInAcceptOrReceive() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdServerSocket listen = FdServerSocket.bind(sock);
        FdSocket[] p = FdSocket.pair();
        java.util.concurrent.CompletableFuture<Throwable> accepted = new java.util.concurrent.CompletableFuture<>();
        java.util.concurrent.CompletableFuture<Throwable> received = new java.util.concurrent.CompletableFuture<>();
        Thread a = new Thread(() -> {
            try {
                listen.accept().close();
                accepted.complete(null);
            } catch (Throwable t) {
                accepted.complete(t);
            }
        });
        Thread b = new Thread(() -> {
            try {
                p[1].receive(4).close();
                received.complete(null);
            } catch (Throwable t) {
                received.complete(t);
            }
        });
        a.start();
        b.start();
        await("both threads blocked", 10, () -> a.getState() != Thread.State.NEW && b.getState() != Thread.State.NEW);
        Thread.sleep(50); // (not a timing assertion: lets them enter the calls; either way the close must wake them)
        listen.close();
        p[1].close();
        assertTrue(accepted.get(10, TimeUnit.SECONDS) instanceof ClosedChannelException, "accept: " + accepted.get());
        assertTrue(received.get(10, TimeUnit.SECONDS) instanceof ClosedChannelException, "receive: " + received.get());
        p[0].close();
        a.join(10_000);
        b.join(10_000);
        assertFdsBack(base, "after the woken calls");
    }

    @Test
    void bothBindRoutesGiveTheModeAskedFor() throws Exception {
        // a short path binds through a private directory; one too long for that (over 89 bytes) under a umask
        Path longDir = Files.createDirectories(sock.getParent().resolve("d".repeat(70)));
        Path longPath = longDir.resolve("s.sock");
        int bytes = longPath.toString().length();
        assertTrue(bytes > 89 && bytes <= 107, "a path of " + bytes + " bytes");
        for (Path p : List.of(sock, longPath)) {
            for (int mode : new int[] {0600, 0660, 0606, 0666}) {
                try (FdServerSocket s = FdServerSocket.bind(p, mode, null, 8)) {
                    String want = java.nio.file.attribute.PosixFilePermissions.toString(
                            java.nio.file.attribute.PosixFilePermissions.fromString(modeString(mode)));
                    assertEquals(want, java.nio.file.attribute.PosixFilePermissions.toString(
                            Files.getPosixFilePermissions(p)), p + " mode 0" + Integer.toOctalString(mode));
                }
                try (java.util.stream.Stream<Path> left = Files.list(p.getParent())) {
                    assertTrue(left.noneMatch(f -> f.getFileName().toString().startsWith(".cuvmm-")),
                            "no private directory left");
                }
            }
        }
    }

    private static String modeString(int mode) {
        StringBuilder b = new StringBuilder();
        String rwx = "rwx";
        for (int i = 8; i >= 0; i--) b.append((mode & (1 << i)) != 0 ? rwx.charAt(2 - i % 3) : '-');
        return b.toString();
    }

    @Test
    void closeLeavesAFileThatIsNoLongerItsOwn() throws Exception {
        FdServerSocket s = FdServerSocket.bind(sock);
        Files.delete(sock);
        Files.writeString(sock, "someone else's");
        s.close();
        assertTrue(Files.exists(sock), "not the file it created: kept");
        assertEquals("someone else's", Files.readString(sock));
    }

    /**
     * SharingStats and the MXBean: an allocation the producer released while a version-2
     * consumer holds its id (EVICT sent, FORGET not yet received) is "released, still mapped"
     * by that consumer, until its FORGET. A raw client that does not FORGET keeps it so.
     */
    @Test
    void releasedStillMappedIsCountedUntilTheConsumersForget() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             SharingServer s = SharingServer.builder(sock).registerMBean(true).build(); FdSocket raw = FdSocket.connect(sock)) {
            VirtualMemoryBuffer buf = r.allocate(r.granularity());
            long allocation = buf.allocationIds()[0];
            s.publish("b", buf);
            FrameIO.write(raw, new Messages.Hello("keeper"), 1, null, 2);
            FrameIO.read(raw, 2).close();
            FrameIO.write(raw, new Messages.Attach("b"), 2, null, 2);
            long id;
            long lease;
            try (Frame d = FrameIO.read(raw, 2)) {
                Messages.DescriptorV2 m = (Messages.DescriptorV2) d.message;
                id = m.ids()[0];
                lease = m.leaseId();
            }
            FrameIO.write(raw, new Messages.Release(lease), 3, null, 2);
            FrameIO.read(raw, 2).close(); // RELEASED; the id stays held
            assertEquals(1, s.stats().idsHeld());
            assertEquals(0, s.stats().releasedStillMappedAllocations(), "not released yet");
            s.unpublish("b");
            buf.close(); // the producer releases the allocation: EVICT
            try (Frame e = FrameIO.read(raw, 2)) {
                assertEquals(FrameType.EVICT, e.type);
                assertEquals(id, ((Messages.Evict) e.message).ids()[0]);
            }
            SharingStats st = s.stats();
            assertEquals(1, st.releasedStillMappedAllocations());
            SharingStats.ReleasedAllocation ra = st.releasedStillMapped().get(0);
            assertEquals(allocation, ra.allocationId());
            assertEquals(r.granularity(), ra.bytes());
            assertEquals(1, ra.consumers());
            assertEquals(r.granularity(), st.releasedStillMappedBytes());
            SharingStats.ConnectionStats c = st.connections().get(0);
            assertEquals("keeper", c.clientName());
            assertEquals(1, c.releasedIdsHeld());
            assertEquals(r.granularity(), c.releasedBytesHeld());
            assertEquals(1, c.idsHeld(), "released ids awaiting FORGET count as held");
            javax.management.MBeanServer mbs = java.lang.management.ManagementFactory.getPlatformMBeanServer();
            assertEquals(1, mbs.getAttribute(s.objectName(), "ReleasedStillMappedAllocations"));
            assertEquals(r.granularity(), mbs.getAttribute(s.objectName(), "ReleasedStillMappedBytes"));
            assertEquals(1, mbs.getAttribute(s.objectName(), "ReleasedStillMappedConsumers"));
            assertEquals(List.of("allocation " + allocation + ": " + r.granularity()
                            + " bytes, released, still mapped by 1 consumer"),
                    List.of((String[]) mbs.getAttribute(s.objectName(), "ReleasedStillMapped")));
            FrameIO.write(raw, new Messages.Forget(new long[] {id}), 4, null, 2);
            try (Frame f = FrameIO.read(raw, 2)) {
                assertEquals(FrameType.FORGOTTEN, f.type);
            }
            SharingStats after = s.stats();
            assertEquals(0, after.releasedStillMappedAllocations());
            assertEquals(0, after.releasedStillMappedBytes());
            assertEquals(0, after.idsHeld());
            assertEquals(0, mbs.getAttribute(s.objectName(), "ReleasedStillMappedConsumers"));
        }
    }

    @Test
    void eightThreadsRacingPublishOrUnpublishOfOneNameHaveOneWinner() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer s = SharingServer.builder(sock).build()) {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                for (int round = 0; round < 20; round++) {
                    List<Boolean> published = IpcTestSupport.raceFor(pool, 8, 60, me -> {
                        try {
                            s.publish("one", buf);
                            return true;
                        } catch (IllegalStateException e) {
                            assertTrue(e.getMessage().contains("already published"), e.getMessage());
                            return false;
                        }
                    });
                    int winners = 0;
                    for (boolean won : published) if (won) winners++;
                    assertEquals(1, winners, "one publish of a name wins");
                    List<Boolean> withdrawn = IpcTestSupport.raceFor(pool, 8, 60, me -> s.unpublish("one"));
                    winners = 0;
                    for (boolean won : withdrawn) if (won) winners++;
                    assertEquals(1, winners, "one unpublish of a name returns true");
                    assertFalse(s.isPublished("one"));
                }
            } finally {
                pool.shutdownNow();
            }
        }
    }
}
