package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame2;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;

import org.cuvmm.BufferOrigin;
import org.cuvmm.Driver;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The server's side of protocol version 2 from a raw socket (docs/PROTOCOL.md section 13):
 * version per connection, ids with fds only the first time, FORGET (all or nothing),
 * forged and stale ids, EVICT when the producer releases, the id limit, and version-1 and
 * version-2 clients on one server.
 */
class ProtocolV2Test {
    private Path sock;
    private int nextId = 1;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }


    private FdSocket helloV2() throws Exception {
        FdSocket s = FdSocket.connect(sock);
        s.send(frame2(1, nextId++, str("raw-v2")), null);
        try (Frame f = FrameIO.read(s)) {
            assertSame(FrameType.HELLO_OK, f.type, "got " + f);
            assertEquals(2, f.version, "HELLO_OK's header carries the connection's version");
            assertEquals(2, ((Messages.HelloOk) f.message).version());
        }
        return s;
    }

    /** ATTACH in version 2; returns the DESCRIPTOR (its fds closed) and checks its fd count. */
    private Messages.DescriptorV2 attach(FdSocket s, String name, int expectFds) throws Exception {
        int id = nextId++;
        s.send(frame2(3, id, str(name)), null);
        try (Frame f = FrameIO.read(s)) {
            assertSame(FrameType.DESCRIPTOR, f.type, "got " + f);
            assertEquals(2, f.version);
            assertEquals(id, f.requestId);
            assertEquals(expectFds, f.fdCount(), "fds with " + f);
            return (Messages.DescriptorV2) f.message;
        }
    }

    private void release(FdSocket s, long lease) throws Exception {
        s.send(frame2(5, nextId++, ByteBuffer.allocate(8).putLong(lease).array()), null);
        try (Frame f = FrameIO.read(s)) {
            assertSame(FrameType.RELEASED, f.type, "got " + f);
        }
    }

    private Frame forget(FdSocket s, long... ids) throws Exception {
        s.send(frame2(9, nextId++, new Messages.Forget(ids).encode()), null);
        return FrameIO.read(s);
    }

    private static void expectError(Frame f, ErrorCode code, String text) {
        try (f) {
            assertNotNull(f);
            assertSame(FrameType.ERROR, f.type, "got " + f);
            Messages.Error e = (Messages.Error) f.message;
            assertEquals(code, e.errorCode(), e.message());
            assertTrue(e.message().contains(text), e.message());
        }
    }

    private static void expectForgotten(Frame f, int count) {
        try (f) {
            assertSame(FrameType.FORGOTTEN, f.type, "got " + f);
            assertEquals(count, ((Messages.Forgotten) f.message).count());
        }
    }

    @Test
    void idsCarryTheirFdOnlyTheFirstTimeAndTheServerExportsNothingAfter() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new long[] {1, 2, 3}, d.ids(), "ids from a per-connection counter");
                assertArrayEquals(new int[] {1, 1, 1}, d.flags(), "every fd the first time");
                assertEquals(owner.buffer.size(), d.size());
                release(s, d.leaseId());

                long calls = Driver.get().counters().totalCalls();
                long fds = server.stats().fdsSent();
                Messages.DescriptorV2 again = attach(s, "three", 0);
                assertEquals(0, Driver.get().counters().totalCalls() - calls, "no export: no driver call");
                assertEquals(fds, server.stats().fdsSent());
                assertArrayEquals(d.ids(), again.ids(), "the same allocations, the same ids");
                assertArrayEquals(new int[] {0, 0, 0}, again.flags(), "no fd: the client holds them");
                assertNotEquals(d.leaseId(), again.leaseId(), "a new lease all the same");
                assertEquals(3, server.stats().connections().get(0).idsHeld());
                release(s, again.leaseId());

                // FORGET one: the next DESCRIPTOR sends its fd again, under a new id.
                expectForgotten(forget(s, 2), 1);
                Messages.DescriptorV2 third = attach(s, "three", 1);
                assertArrayEquals(new long[] {1, 4, 3}, third.ids(), "a forgotten allocation gets a fresh id");
                assertArrayEquals(new int[] {0, 1, 0}, third.flags());
                release(s, third.leaseId());
            }
        }
    }

    /** An alias smaller than its mapping: only the chunks that hold its bytes are sent, as in version 1. */
    @Test
    void aShrunkAliasSendsOnlyTheChunksThatHoldItsBytes() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer one = r.allocate(r.granularity());
             VirtualMemoryBuffer two = r.modifyAllocation(one, 2 * r.granularity());
             VirtualMemoryBuffer shrunk = r.modifyAllocation(two, 100);
             SharingServer server = SharingServer.builder(sock).build()) {
            assertEquals(2, shrunk.chunkCount());
            assertEquals(1, shrunk.exportedChunkCount());
            server.publish("shrunk", shrunk);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "shrunk", 1);
                assertEquals(1, d.chunkSizes().length, d.toString());
                assertEquals(100, d.size());
                release(s, d.leaseId());
            }
        }
    }

    @Test
    void forgedAndStaleIdsGetUnknownIdAndForgetIsAllOrNothing() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("b", b);
            try (FdSocket s = helloV2(); FdSocket other = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "b", 1);
                long id = d.ids()[0];
                release(s, d.leaseId());
                expectError(forget(s, 77), ErrorCode.UNKNOWN_ID, "id 77 is not held");
                expectError(forget(s, id, 77), ErrorCode.UNKNOWN_ID, "nothing was forgotten");
                assertEquals(1, server.stats().idsHeld(), "all or nothing: still held");
                expectError(forget(other, id), ErrorCode.UNKNOWN_ID, "id " + id + " is not held"); // another connection's id
                expectForgotten(forget(s, id), 1);
                expectError(forget(s, id), ErrorCode.UNKNOWN_ID, "already forgotten"); // stale
                assertEquals(0, server.stats().idsHeld());
                attach(s, "b", 1); // the connection lives on; the fd comes again
            }
        }
    }

    @Test
    void versionIsPerConnection() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("b", b);
            try (FdSocket v2 = helloV2(); FdSocket v1 = FdSocket.connect(sock)) {
                // A version-1 frame on a version-2 connection: skipped, not fatal.
                v2.send(IpcTestSupport.frame(3, 50, str("b")), null);
                expectError(FrameIO.read(v2), ErrorCode.BAD_VERSION, "protocol version 1 (expected: 2)");
                attach(v2, "b", 1);
                // Types 9 to 11 do not exist in version 1.
                v1.send(IpcTestSupport.frame(1, 1, str("raw-v1")), null);
                try (Frame f = FrameIO.read(v1)) {
                    assertEquals(1, f.version);
                    assertEquals(1, ((Messages.HelloOk) f.message).version());
                }
                v1.send(IpcTestSupport.frame(9, 2, new Messages.Forget(new long[] {1}).encode()), null);
                expectError(FrameIO.read(v1), ErrorCode.UNKNOWN_TYPE, "frame type 9 (expected: 1 to 8)");
                v1.send(IpcTestSupport.frame(3, 3, str("b")), null);
                try (Frame f = FrameIO.read(v1)) {
                    assertTrue(f.message instanceof Messages.Descriptor, "a version-1 DESCRIPTOR: " + f);
                    assertEquals(1, f.fdCount());
                }
                // A client frame type the server sends: UNEXPECTED_FRAME.
                v2.send(frame2(11, 60, new Messages.Evict(new long[] {1}).encode()), null);
                expectError(FrameIO.read(v2), ErrorCode.UNEXPECTED_FRAME, "sent by servers");
                SharingStats st = server.stats();
                assertEquals(2, st.connections().get(0).version());
                assertEquals(1, st.connections().get(1).version());
                assertEquals(0, st.connections().get(1).idsHeld());
            }
        }
    }

    /**
     * The JMX view of "released, still mapped" (issue 11 item 3: the stats, the JMX bean and
     * the docs; an independent probe found no bean showing it): registered with the server,
     * the same figures as stats(), unregistered by close().
     */
    @Test
    void theServersMXBeanShowsMemoryReleasedButStillMapped() throws Exception {
        javax.management.MBeanServer jmx = java.lang.management.ManagementFactory.getPlatformMBeanServer();
        javax.management.ObjectName name;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).registerMBean(true).build()) {
            name = server.objectName();
            assertEquals("org.cuvmm:type=SharingServer,name=" + javax.management.ObjectName.quote(sock.toString()),
                    name.toString());
            assertTrue(jmx.isRegistered(name));
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            long allocation = b.allocationIds()[0];
            server.publish("b", b);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "b", 1);
                assertEquals(1, jmx.getAttribute(name, "LeaseCount"));
                assertEquals(1L, jmx.getAttribute(name, "IdsHeld"));
                assertEquals(1L, jmx.getAttribute(name, "FdsSent"));
                assertEquals(0L, jmx.getAttribute(name, "ReleasedStillMappedBytes"));
                release(s, d.leaseId());
                server.unpublish("b");
                b.close(); // really released; the consumer still maps it until its FORGET
                try (Frame f = FrameIO.read(s)) {
                    assertSame(FrameType.EVICT, f.type, "got " + f);
                }
                assertEquals(sock.toString(), jmx.getAttribute(name, "SocketPath"));
                assertEquals(1, jmx.getAttribute(name, "ConnectionCount"));
                assertEquals(0, jmx.getAttribute(name, "LeaseCount"));
                assertEquals(1, jmx.getAttribute(name, "ReleasedStillMappedAllocations"));
                assertEquals(r.granularity(), jmx.getAttribute(name, "ReleasedStillMappedBytes"));
                assertEquals(1, jmx.getAttribute(name, "ReleasedStillMappedConsumers"));
                assertArrayEquals(new String[] {"allocation " + allocation + ": " + r.granularity()
                        + " bytes, released, still mapped by 1 consumer"},
                        (String[]) jmx.getAttribute(name, "ReleasedStillMapped"));
                expectForgotten(forget(s, d.ids()), 1);
                assertEquals(0L, jmx.getAttribute(name, "ReleasedStillMappedBytes"));
                assertEquals(0, jmx.getAttribute(name, "ReleasedStillMappedConsumers"));
                assertEquals(0, ((String[]) jmx.getAttribute(name, "ReleasedStillMapped")).length);
            }
        }
        assertFalse(jmx.isRegistered(name), "close() unregistered " + name);
        try (SharingServer plain = SharingServer.builder(sock).build()) {
            assertFalse(jmx.isRegistered(plain.objectName()), "no bean unless asked for");
        }
    }

    @Test
    void theProducersReleaseSendsEvictAndCountsTheMemoryUntilForget() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            long allocation = b.allocationIds()[0];
            server.publish("b", b);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "b", 1);
                release(s, d.leaseId());
                server.unpublish("b");
                b.close(); // the allocation is really released: the consumer may still map it
                try (Frame f = FrameIO.read(s)) {
                    assertSame(FrameType.EVICT, f.type, "got " + f);
                    assertEquals(0, f.requestId, "unsolicited");
                    assertArrayEquals(d.ids(), ((Messages.Evict) f.message).ids());
                }
                SharingStats st = server.stats();
                assertEquals(1, st.releasedStillMappedAllocations(), st.toString());
                assertEquals(new SharingStats.ReleasedAllocation(allocation, r.granularity(), 1),
                        st.releasedStillMapped().get(0));
                assertEquals(r.granularity(), st.releasedStillMappedBytes());
                assertEquals(1, st.connections().get(0).releasedIdsHeld());
                expectForgotten(forget(s, d.ids()), 1);
                assertEquals(0, server.stats().releasedStillMappedAllocations());
                assertEquals(0, server.stats().idsHeld());
            }
        }
    }

    @Test
    void anAttachNeedingMoreIdsThanTheLimitIsRefused() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(2).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                s.send(frame2(3, 99, str("three")), null);
                expectError(FrameIO.read(s), ErrorCode.TOO_MANY_IDS, "needs 3 new allocation ids (the buffer has 3 chunks");
                assertEquals(0, server.totalLeaseCount(), "no lease");
                assertEquals(0, server.stats().idsHeld(), "no id");
            }
        }
    }

    /** Singular where the count is 1: "1 new allocation id", "1 chunk", "holds 1 id". */
    @Test
    void theIdLimitMessageCountsOneInTheSingular() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer one = r.allocate(r.granularity());
             VirtualMemoryBuffer two = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(1).build()) {
            server.publish("one", one);
            server.publish("two", two);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "one", 1);
                s.send(frame2(3, nextId++, str("two")), null);
                expectError(FrameIO.read(s), ErrorCode.TOO_MANY_IDS, "needs 1 new allocation id (the buffer has 1 chunk, "
                        + "each named by an id) but this connection holds 1 id and may hold at most 1 on this server");
                release(s, d.leaseId());
            }
        }
    }

    @Test
    void versionOneAndTwoClientsOnOneServer() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build();
             VirtualMemoryResource importer = VirtualMemoryResource.create(0);
             SharingClient v1 = SharingClient.builder(sock).clientName("v1").protocolVersion(1).build();
             SharingClient v2 = SharingClient.builder(sock).clientName("v2").build()) {
            BytePattern.fill(owner.buffer, 12);
            server.publish("three", owner.buffer);
            assertEquals(1, v1.protocolVersion());
            assertEquals(2, v2.protocolVersion());
            for (int i = 0; i < 3; i++) {
                try (Attachment a1 = v1.attach("three", importer); Attachment a2 = v2.attach("three", importer)) {
                    assertEquals(BufferOrigin.IMPORTED, a1.buffer().origin());
                    assertEquals(BufferOrigin.SHARED_VIEW, a2.buffer().origin());
                    BytePattern.verify(a1.buffer(), 12);
                    BytePattern.verify(a2.buffer(), 12);
                    assertEquals(2, server.leaseCount("three"));
                }
            }
            assertEquals(2, v2.importCache().stats().hits(), "the v2 client's later attaches are hits");
            assertEquals(3, v2.importCache().stats().fdsReceived(), "the v2 client got each fd once");
            assertEquals(0, v1.importCache().stats().fdsReceived(), "the v1 client does not use the cache");
            assertEquals(0, server.totalLeaseCount());
        }
    }

    @Test
    void theClientFallsBackToVersionOneUnlessForced() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).maxProtocolVersion(1).build()) {
            BytePattern.fill(b, 4);
            server.publish("b", b);
            try (SharingClient c = SharingClient.connect(sock, "fallback"); Attachment a = c.attach("b", r)) {
                assertEquals(1, c.protocolVersion(), "a v2 HELLO answered BAD_VERSION, then HELLO in v1");
                assertEquals(1, c.serverVersion());
                BytePattern.verify(a.buffer(), 4);
            }
            SharingException e = assertThrows(SharingException.class,
                    () -> SharingClient.builder(sock).protocolVersion(2).build().close());
            assertEquals(ErrorCode.BAD_VERSION, e.code(), e.getMessage());
            // The raw view: a version-2 HELLO gets a version-1 BAD_VERSION, and the connection stays.
            try (FdSocket s = FdSocket.connect(sock)) {
                s.send(frame2(1, 5, str("raw")), null);
                try (Frame f = FrameIO.read(s)) {
                    assertEquals(1, f.version);
                }
                s.send(IpcTestSupport.frame(1, 6, str("raw")), null);
                try (Frame f = FrameIO.read(s)) {
                    assertSame(FrameType.HELLO_OK, f.type);
                    assertEquals(6, f.requestId);
                }
            }
        }
    }

    /**
     * An EVICT that finds the connection's send queue full is parked and sent as soon as
     * room frees, though the client never sends another frame (it only reads): the writer
     * is held (test seam) while 257 refused ATTACHes fill the queue, the buffer is released
     * (EVICT parked), then the writer goes on and the client reads the 257 ERRORs and the
     * EVICT.
     */
    @Test
    void anEvictParkedOnAFullSendQueueIsSentWhenRoomFrees() throws Exception {
        java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.atomic.AtomicReference<SendQueue> held = new java.util.concurrent.atomic.AtomicReference<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            server.publish("b", b);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "b", 1);
                release(s, d.leaseId());
                // The sender thread's path: a direct write (the reader answering itself) would
                // send the ERRORs at once and the queue would never fill.
                SendQueue.directWrites = false;
                SendQueue.beforeSend = (q, item) -> {
                    held.compareAndSet(null, q);
                    try {
                        gate.await(30, java.util.concurrent.TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                };
                int refused = 257; // one taken by the held writer, 256 fill the queue
                for (int i = 0; i < refused; i++) s.send(frame2(3, nextId++, str("nope")), null);
                IpcTestSupport.await("the send queue full", 10, () -> held.get() != null && held.get().remainingCapacity() == 0);
                server.unpublish("b");
                b.close(); // really released: the EVICT finds no room
                java.lang.reflect.Field cf = SharingServer.class.getDeclaredField("connections");
                cf.setAccessible(true);
                ServerConnection c = (ServerConnection) ((java.util.Set<?>) cf.get(server)).iterator().next();
                java.lang.reflect.Field uf = ServerConnection.class.getDeclaredField("unsentEvicts");
                uf.setAccessible(true);
                IpcTestSupport.await("the EVICT parked", 10, () -> !parked(uf, c).isEmpty());
                gate.countDown();
                java.util.concurrent.CompletableFuture<Integer> errors = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                    int n = 0;
                    try {
                        for (;;) {
                            try (Frame f = FrameIO.read(s)) {
                                if (f == null) return -1;
                                if (f.type == FrameType.EVICT) {
                                    assertArrayEquals(d.ids(), ((Messages.Evict) f.message).ids());
                                    return n;
                                }
                                assertSame(FrameType.ERROR, f.type, "got " + f);
                                n++;
                            }
                        }
                    } catch (java.io.IOException e) {
                        throw new java.io.UncheckedIOException(e);
                    }
                });
                try {
                    assertEquals(refused, errors.get(10, java.util.concurrent.TimeUnit.SECONDS),
                            "the 257 ERRORs, then the EVICT");
                } catch (java.util.concurrent.TimeoutException e) {
                    s.close();
                    throw new AssertionError("no EVICT within 10 s of the queue's room freeing (the client sent nothing)");
                }
            }
        } finally {
            gate.countDown();
            SendQueue.directWrites = true;
            SendQueue.beforeSend = (q, i) -> {};
        }
    }

    private static java.util.Collection<?> parked(java.lang.reflect.Field f, ServerConnection c) {
        try {
            return (java.util.Collection<?>) f.get(c);
        } catch (IllegalAccessException e) {
            throw new AssertionError(e);
        }
    }

    /**
     * ConnectionIds.assign with one allocation named by two chunks: two distinct fresh ids,
     * both with FD (a DESCRIPTOR may not name an id twice), counted as two against the limit.
     */
    @Test
    void anAllocationNamedTwiceInOneBufferGetsTwoIds() {
        ConnectionIds t = new ConnectionIds(2);
        ConnectionIds.Assignment a = t.assign(new long[] {7, 7}, new long[] {4096, 4096});
        assertNotNull(a);
        assertNotEquals(a.ids()[0], a.ids()[1], java.util.Arrays.toString(a.ids()));
        assertTrue(a.sendFd()[0] && a.sendFd()[1]);
        assertArrayEquals(a.ids(), a.newIds());
        assertEquals(2, t.held());
        t.rollback(a);
        assertEquals(0, t.held());
    }

    /**
     * The two version-2 fd-count rules on the receiving side (PROTOCOL.md 13.3, section 4):
     * fds other than the number of FD chunks, and fds on a DESCRIPTOR without any FD chunk,
     * are both FD_COUNT_MISMATCH (not UNEXPECTED_FDS: a DESCRIPTOR may carry fds); the fds are
     * closed and the decoded DESCRIPTOR travels with the refusal (its new ids are forgotten).
     */
    @Test
    void aV2DescriptorsFdCountMustMatchItsFdChunks() throws Exception {
        java.util.Map<String, Integer> before = IpcTestSupport.fdSnapshot();
        try (FdServerSocket listen = FdServerSocket.bind(sock); FdSocket client = FdSocket.connect(sock);
             FdSocket server = listen.accept()) {
            int[][] flagsAndFds = {{1, 0, 2}, {0, 0, 1}, {1, 1, 1}};
            for (int[] t : flagsAndFds) {
                int[] fds = new int[t[2]];
                for (int k = 0; k < fds.length; k += 2) {
                    int[] pp = IpcTestSupport.pipe();
                    fds[k] = pp[0];
                    if (k + 1 < fds.length) fds[k + 1] = pp[1];
                    else NativeIo.closeQuietly(pp[1]);
                }
                byte[] p = new Messages.DescriptorV2(3, 1, 8192, new long[] {4096, 4096}, new long[] {1, 2},
                        new int[] {t[0], t[1]}).encode();
                try {
                    server.send(frame2(4, 5, p), fds);
                } finally {
                    for (int fd : fds) NativeIo.closeQuietly(fd);
                }
                ProtocolException e = assertThrows(ProtocolException.class, () -> FrameIO.read(client, 2),
                        java.util.Arrays.toString(t));
                assertSame(ErrorCode.FD_COUNT_MISMATCH, e.code(), e.getMessage());
                assertEquals(5, e.requestId());
                assertEquals(3, e.leaseId());
                assertNotNull(e.descriptor, "the parsed DESCRIPTOR travels with the refusal");
            }
        }
        IpcTestSupport.assertFdsBack(before, "every fd received with the refused DESCRIPTORs closed");
    }
}
