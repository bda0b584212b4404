package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame2;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BiConsumer;
import java.util.function.Predicate;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A version-2 ATTACH that fails after its ids were assigned (docs/PROTOCOL.md section 13.7:
 * "an ATTACH refused by any of them opens no lease and gives no id"): the export fails, the
 * DESCRIPTOR cannot be built or queued, the name is withdrawn meanwhile, the id limit is
 * reached, or the send fails. Each time the server's ids, leases and fds are as before the
 * ATTACH ({@link SharingServer#stats()}, open fds), and the next ATTACH of the same buffer
 * sends the fds again. Failures are injected with {@link SharingServer#failAttachAt} and the
 * {@link SendQueue} send seams, on a raw socket.
 */
@Timeout(120)
class AttachRollbackTest {
    private Path sock;
    private int nextId = 1;
    private final BiConsumer<SendQueue, SendQueue.Item> directSend = SendQueue.beforeDirectSend;
    private final BiConsumer<SendQueue, SendQueue.Item> queuedSend = SendQueue.beforeSend;
    /** Every read is bounded: the clients' sockets are closed at a cutoff (BoundedClientSockets). */
    private final BoundedClientSockets clients = new BoundedClientSockets("attach-rollback");

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        clients.start();
    }

    @AfterEach
    void tearDown() {
        clients.stop();
        SharingServer.failAttachAt = null;
        IdleWatchdog.beforeTimeOut = c -> {};
        SendQueue.beforeDirectSend = directSend;
        SendQueue.beforeSend = queuedSend;
        IpcTestSupport.deleteTree(sock.getParent());
    }


    private FdSocket helloV2() throws Exception {
        FdSocket s = FdSocket.connect(sock);
        clients.add(s);
        s.send(frame2(1, nextId++, str("rollback")), null);
        try (Frame f = FrameIO.read(s)) {
            assertSame(FrameType.HELLO_OK, f.type, "got " + f);
            assertEquals(2, f.version);
        }
        return s;
    }

    /** ATTACH in version 2; returns the DESCRIPTOR (its fds closed) after checking its fd count. */
    private Messages.DescriptorV2 attach(FdSocket s, String name, int expectFds) throws Exception {
        s.send(frame2(3, nextId++, str(name)), null);
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f, "the connection ended");
            assertSame(FrameType.DESCRIPTOR, f.type, "got " + f);
            assertEquals(expectFds, f.fdCount(), "fds with " + f);
            return (Messages.DescriptorV2) f.message;
        }
    }

    /** ATTACH in version 2 that must be refused with {@code code}, the message containing {@code text}. */
    private void attachRefused(FdSocket s, String name, ErrorCode code, String text) throws Exception {
        s.send(frame2(3, nextId++, str(name)), null);
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f, "the connection ended");
            assertSame(FrameType.ERROR, f.type, "got " + f);
            assertEquals(0, f.fdCount());
            Messages.Error e = (Messages.Error) f.message;
            assertEquals(code, e.errorCode(), e.message());
            assertTrue(e.message().contains(text), e.message());
        }
    }

    private void release(FdSocket s, long lease) throws Exception {
        s.send(frame2(5, nextId++, ByteBuffer.allocate(8).putLong(lease).array()), null);
        try (Frame f = FrameIO.read(s)) {
            assertSame(FrameType.RELEASED, f.type, "got " + f);
        }
    }

    /** True the first time {@code step} is asked, false after (and for every other step). */
    private static Predicate<String> failOnce(String step) {
        AtomicBoolean armed = new AtomicBoolean(true);
        return s -> s.equals(step) && armed.getAndSet(false);
    }

    /** Nothing of the refused ATTACH is left: no id, no lease, no fd queued or open. */
    private static void assertNothingLeft(SharingServer server, long idsBefore, long fdsSentBefore,
                                          Map<String, Integer> fdsBefore, String when) throws InterruptedException {
        SharingStats st = server.stats();
        assertEquals(idsBefore, st.idsHeld(), when + ": ids held " + st);
        assertEquals(0, server.totalLeaseCount(), when + ": leases");
        assertEquals(fdsSentBefore, st.fdsSent(), when + ": fds sent");
        IpcTestSupport.assertFdsBack(fdsBefore, when + " (the export's fds are closed)");
    }

    /** The export fails ("export"), or something after it ("frame": its fds are open then). */
    @ParameterizedTest
    @ValueSource(strings = {"export", "frame"})
    void aFailureAfterTheIdsWereAssignedGivesThemBack(String step) throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
                SharingServer.failAttachAt = failOnce(step);
                attachRefused(s, "three", ErrorCode.INTERNAL, "cannot export 'three'");
                assertNothingLeft(server, 0, 0, fds, "after a failure at " + step);

                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new int[] {1, 1, 1}, d.flags(), "every fd again: " + d);
                assertEquals(3, server.stats().idsHeld());
                assertEquals(3, server.stats().fdsSent());
                release(s, d.leaseId());
                assertArrayEquals(d.ids(), attach(s, "three", 0).ids(), "held now: the same ids, no fd");
            }
        }
    }

    /**
     * PROTOCOL.md 13.2: a refused ATTACH gives no id, and the counter is not rewound: the
     * numbers it drew (1 to 3 here) are skipped, the next DESCRIPTOR's fresh ids are 4 to 6.
     */
    @Test
    void theNumbersARefusedAttachDrewAreSkipped() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                SharingServer.failAttachAt = failOnce("export");
                attachRefused(s, "three", ErrorCode.INTERNAL, "cannot export 'three'");
                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new long[] {4, 5, 6}, d.ids(), "ids after a refused ATTACH: " + d);
                release(s, d.leaseId());
            }
        }
    }

    /** Ids the connection held before the failed ATTACH stay held; only its fresh ones go. */
    @Test
    void onlyTheFreshIdsAreGivenBack() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer one = r.allocate(r.granularity());
             VirtualMemoryBuffer two = r.modifyAllocation(one, 2 * r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("one", one);
            server.publish("two", two);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 first = attach(s, "one", 1);
                release(s, first.leaseId());
                Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
                SharingServer.failAttachAt = failOnce("frame");
                attachRefused(s, "two", ErrorCode.INTERNAL, "cannot export 'two'");
                assertNothingLeft(server, 1, 1, fds, "after a failed ATTACH of the grown buffer");

                Messages.DescriptorV2 d = attach(s, "two", 1);
                assertEquals(first.ids()[0], d.ids()[0], "the shared allocation keeps its id");
                assertArrayEquals(new int[] {0, 1}, d.flags(), "the new chunk's fd is sent: " + d);
                assertEquals(2, server.stats().idsHeld());
                release(s, d.leaseId());
            }
        }
    }

    /** The send queue refuses the DESCRIPTOR (full or closed): INTERNAL, and the ids go back. */
    @Test
    void aDescriptorTheQueueRefusesGivesItsIdsBack() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
                SharingServer.failAttachAt = failOnce("queue");
                attachRefused(s, "three", ErrorCode.INTERNAL, "send queue for this connection is full or closed");
                assertNothingLeft(server, 0, 0, fds, "after the queue refused");
                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new int[] {1, 1, 1}, d.flags());
                release(s, d.leaseId());
            }
        }
    }

    /** The owner unpublishes while the ATTACH exports: UNKNOWN_NAME, and the ids go back. */
    @Test
    void aNameWithdrawnDuringTheAttachGivesItsIdsBack() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
                AtomicBoolean armed = new AtomicBoolean(true);
                SharingServer.failAttachAt = step -> {
                    if (step.equals("frame") && armed.getAndSet(false)) server.unpublish("three");
                    return false;
                };
                attachRefused(s, "three", ErrorCode.UNKNOWN_NAME, "'three' was withdrawn by its owner");
                assertNothingLeft(server, 0, 0, fds, "after the withdrawal");
                server.publish("three", owner.buffer);
                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new int[] {1, 1, 1}, d.flags());
                release(s, d.leaseId());
            }
        }
    }

    /**
     * The owner withdraws the name while the ATTACH is exporting, and the export then fails
     * (as it does when the owner closes the buffer right after unpublish): UNKNOWN_NAME, the
     * withdrawal, not INTERNAL with the export's failure (a soak probe saw INTERNAL "buffer is
     * closed" for an ATTACH racing unpublish and closeWhenUnused). Nothing is left behind.
     */
    @Test
    void anExportThatFailsAfterTheWithdrawalIsUnknownName() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            try (FdSocket s = helloV2()) {
                Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
                AtomicBoolean armed = new AtomicBoolean(true);
                SharingServer.failAttachAt = step -> {
                    if (!step.equals("export") || !armed.getAndSet(false)) return false;
                    server.unpublish("three");
                    return true; // the export fails after the withdrawal
                };
                attachRefused(s, "three", ErrorCode.UNKNOWN_NAME, "'three' was withdrawn by its owner");
                assertNothingLeft(server, 0, 0, fds, "after the withdrawal");
                // Not withdrawn: the same failure is INTERNAL, naming it.
                server.publish("three", owner.buffer);
                SharingServer.failAttachAt = failOnce("export");
                attachRefused(s, "three", ErrorCode.INTERNAL, "cannot export 'three': failure injected");
                Messages.DescriptorV2 d = attach(s, "three", 3);
                release(s, d.leaseId());
            }
        }
    }

    /** The id limit would be passed part-way through the buffer's chunks: no id of it is taken. */
    @Test
    void theIdLimitReachedPartWayTakesNoId() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer one = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(3).build()) {
            server.publish("three", owner.buffer);
            server.publish("one", one);
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 first = attach(s, "one", 1);
                release(s, first.leaseId());
                Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
                // 1 held + 3 fresh > 3: refused though 2 of the 3 would fit.
                attachRefused(s, "three", ErrorCode.TOO_MANY_IDS, "needs 3 new allocation ids");
                assertNothingLeft(server, 1, 1, fds, "after TOO_MANY_IDS");
                s.send(frame2(9, nextId++, new Messages.Forget(first.ids()).encode()), null);
                try (Frame f = FrameIO.read(s)) {
                    assertSame(FrameType.FORGOTTEN, f.type, "got " + f);
                }
                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new int[] {1, 1, 1}, d.flags());
                assertEquals(3, server.stats().idsHeld());
                release(s, d.leaseId());
            }
        }
    }

    /**
     * An Error (not an exception) after the export: the reader ends the connection, as it does
     * for any Error, but first gives back what the ATTACH made: the hold on the buffer (else
     * the owner's close would refuse for ever, naming a consumer long gone) and the export's fds.
     */
    @Test
    void anErrorAfterTheExportLeavesNoHoldAndNoFd() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
            SharingServer.failAttachAt = step -> {
                if (step.equals("frame")) throw new StackOverflowError("injected by a test");
                return false;
            };
            try (FdSocket s = helloV2()) {
                s.send(frame2(3, nextId++, str("three")), null);
                IpcTestSupport.await("the server to end the connection", 30, () -> server.connectionCount() == 0);
            }
            SharingServer.failAttachAt = null;
            assertEquals(0, owner.buffer.leaseCount(), "no hold on the buffer is left");
            assertEquals(0, server.totalLeaseCount());
            IpcTestSupport.assertFdsBack(fds, "after the Error (the export's fds are closed)");
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "three", 3);
                release(s, d.leaseId());
            }
        }
    }

    /**
     * The DESCRIPTOR's send fails: the connection ends (section 12: a failed send ends it, the
     * stream cannot be trusted), and with it every id and lease; nothing is left open, and a
     * new connection is sent the fds.
     */
    @Test
    void aFailedSendEndsTheConnectionAndFreesItsIds() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("three", owner.buffer);
            Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
            AtomicBoolean armed = new AtomicBoolean(true);
            BiConsumer<SendQueue, SendQueue.Item> failFds = (q, item) -> {
                if (item.fds() != null && armed.getAndSet(false)) throw new IllegalStateException("injected send failure");
            };
            SendQueue.beforeDirectSend = failFds;
            SendQueue.beforeSend = failFds;
            try (FdSocket s = helloV2()) {
                s.send(frame2(3, nextId++, str("three")), null);
                // The server ends it (the client keeps its socket open meanwhile).
                IpcTestSupport.await("the server to end the connection", 30, () -> server.connectionCount() == 0);
                try (Frame f = FrameIO.read(s)) {
                    assertNull(f, "the connection ends without the DESCRIPTOR: got " + f);
                } catch (IOException ended) {
                    // reset rather than a clean end: ended all the same
                }
            }
            assertEquals(0, server.stats().idsHeld());
            assertEquals(0, server.totalLeaseCount());
            IpcTestSupport.assertFdsBack(fds, "after the failed send");
            try (FdSocket s = helloV2()) {
                Messages.DescriptorV2 d = attach(s, "three", 3);
                assertArrayEquals(new int[] {1, 1, 1}, d.flags());
                release(s, d.leaseId());
            }
        }
    }
    /**
     * An ATTACH the reader is still working on when the idle timeout cuts the connection
     * (PROTOCOL.md section 8): no DESCRIPTOR, no lease, no reply of its own; the client reads
     * the connection's TIMEOUT (request id 0), then the end of the stream; its fresh ids and
     * its export's fds go.
     */
    @Test
    void anAttachMetByTheIdleCutGetsOnlyTheConnectionsTimeout() throws Exception {
        AtomicReference<ServerConnection> cut = new AtomicReference<>();
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).idleTimeout(Duration.ofMillis(200)).build()) {
            server.publish("three", owner.buffer);
            Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
            IdleWatchdog.beforeTimeOut = cut::set;
            // At "frame" (ids assigned, the export's fds open) the reader waits for the cut.
            SharingServer.failAttachAt = step -> {
                if (!step.equals("frame")) return false;
                try {
                    IpcTestSupport.await("the idle cut", 10, () -> cut.get() != null && cut.get().isEnding());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return false;
            };
            FdSocket s = helloV2();
            int attachId = nextId;
            s.send(frame2(3, nextId++, str("three")), null);
            try (Frame f = FrameIO.read(s)) {
                assertNotNull(f, "the connection ended without its TIMEOUT");
                assertSame(FrameType.ERROR, f.type, "got " + f);
                assertEquals(0, f.requestId, "the connection's TIMEOUT, not a reply to ATTACH " + attachId);
                assertEquals(ErrorCode.TIMEOUT, ((Messages.Error) f.message).errorCode(), f.toString());
                assertEquals(0, f.fdCount());
            }
            assertNull(FrameIO.read(s), "nothing after the connection's TIMEOUT but the end of the stream");
            s.close();
            IpcTestSupport.await("the connection to end", 10, () -> server.connectionCount() == 0);
            assertNothingLeft(server, 0, 0, fds, "after the cut ATTACH");
        }
    }
}
