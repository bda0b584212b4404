package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The client's read token (leader/follower, {@link ReadToken}): a caller reads its own reply,
 * so a steady-state round hands no reply from the reader thread to the caller (counted); many
 * callers with DROP and EVICT interleaved; {@code close()}, the server's death, an interrupt
 * and a fatal bad frame while a caller leads: a clear exception, no hang, no fd left open.
 */
class ClientLeaderTest {
    private static final long LONG_IDLE = TimeUnit.SECONDS.toNanos(60);

    private Path sock;
    private VirtualMemoryResource resource;
    private long savedIdle;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
        savedIdle = ReadToken.readerIdleNanos;
    }

    @AfterEach
    void tearDown() {
        ReadToken.readerIdleNanos = savedIdle;
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void steadyStateRoundsReadTheirOwnRepliesNoHandOver() throws Exception {
        // The reader thread keeps out for 60 s after a request: a test thread descheduled between
        // two rounds (a loaded machine) cannot let it in, so the count does not depend on timing.
        ReadToken.readerIdleNanos = LONG_IDLE;
        long g = resource.granularity();
        int rounds = 100;
        try (VirtualMemoryBuffer b = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            BytePattern.fill(b, 7);
            server.publish("frame", b);
            try (Attachment a = c.attach("frame", resource)) { // the cache's miss: fd, import
                BytePattern.verify(a.buffer(), 7);
            }
            long[] before = c.replyStats();
            for (int i = 0; i < rounds; i++) {
                try (Attachment a = c.attach("frame", resource)) { // ATTACH -> DESCRIPTOR, a cached view
                    a.buffer().size();
                } // RELEASE -> RELEASED
            }
            long[] after = c.replyStats();
            assertEquals(2L * rounds, after[0] - before[0], "replies the caller read itself over " + rounds
                    + " attach/close rounds");
            assertEquals(0, after[1] - before[1], "replies handed over by another thread (the reader)");
            assertEquals(rounds, c.importCache().stats().hits(), c.importCache().stats().toString());
        }
    }

    @Test
    void manyCallersWithDropsAndEvictsInterleaved() throws Exception {
        long g = resource.granularity();
        int threads = 4;
        int generations = 6;
        int perGeneration = 20; // attaches per generation (all threads together) before it is dropped
        Map<String, Integer> fds = fdSnapshot();
        AtomicInteger drops = new AtomicInteger();
        ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
        try (SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            c.addDropListener(n -> drops.incrementAndGet());
            AtomicBoolean stop = new AtomicBoolean();
            AtomicInteger attached = new AtomicInteger();
            List<Thread> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread w = new Thread(() -> {
                    while (!stop.get()) {
                        try (Attachment a = c.attach("frame", resource)) {
                            attached.incrementAndGet();
                            a.buffer().size();
                        } catch (SharingException e) {
                            if (e.code() != ErrorCode.UNKNOWN_NAME) errors.add(e); // between generations
                        } catch (IOException | RuntimeException e) {
                            errors.add(e);
                            return;
                        }
                    }
                }, "leader-test-" + t);
                workers.add(w);
            }
            VirtualMemoryBuffer current = resource.allocate(g);
            server.publish("frame", current);
            workers.forEach(Thread::start);
            for (int gen = 1; gen <= generations; gen++) {
                Attachment held = c.attach("frame", resource); // this thread is one more caller
                int target = attached.get() + perGeneration;
                await("attaches of generation " + gen, 30, () -> attached.get() >= target || !errors.isEmpty());
                VirtualMemoryBuffer next = resource.allocate(g);
                server.unpublish("frame"); // DROP to the leases held now, this thread's included
                server.publish("frame", next);
                current.closeWhenUnused(); // its allocation released at the last RELEASE: EVICT
                current = next;
                await("the DROP of generation " + gen + " read amid the callers", 30, held::isDropped);
                held.close();
            }
            stop.set(true);
            for (Thread w : workers) {
                w.join(TimeUnit.SECONDS.toMillis(30));
                assertFalse(w.isAlive(), w.getName() + " still attaching: a hang");
            }
            assertTrue(errors.isEmpty(), "errors: " + errors);
            server.unpublish("frame");
            current.closeWhenUnused();
            // Every generation but the last was released while the client held its id: EVICT each.
            await("the EVICTs read and acted on", 30, () -> c.importCache().stats().evictions() >= generations);
            await("every lease released", 30, () -> server.totalLeaseCount() == 0);
            assertTrue(c.isConnected());
            await("the DROP listeners ran", 30, () -> drops.get() >= generations);
            long[] stats = c.replyStats();
            assertTrue(stats[0] + stats[1] >= 2L * attached.get(), "every reply delivered: " + stats[0] + " + "
                    + stats[1]);
        }
        assertFdsBack(fds, "after concurrent callers with DROP and EVICT");
    }

    @Test
    void closeFromAnotherThreadEndsALeadingCaller() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE; // the attaching thread, not the reader, holds the token
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch attachRead = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s)) {
                        assertEquals(FrameType.ATTACH, attach.type);
                    }
                    attachRead.countDown();
                    while (FrameIO.read(s) != null) { /* never answers; until the client closes */ }
                } catch (IOException e) {
                    // the client closed
                }
            });
            SharingClient c = SharingClient.connect(sock);
            CompletableFuture<Throwable> caller = attachInThread(c);
            assertTrue(attachRead.await(30, TimeUnit.SECONDS));
            Thread leader = awaitLeader(c);
            assertNotNull(leader);
            c.close(); // from this thread, while the caller polls the socket for its reply
            Throwable t = caller.get(30, TimeUnit.SECONDS);
            assertTrue(t instanceof IOException, "the caller's exception: " + t);
            assertTrue(t.getMessage().contains("closed"), t.getMessage());
            fake.get(30, TimeUnit.SECONDS);
        }
        assertFdsBack(fds, "after close() ended a leading caller");
    }

    @Test
    void theServerDyingWhileACallerLeadsFailsItClearly() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch leading = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    FrameIO.read(s).close();
                    assertTrue(leading.await(30, TimeUnit.SECONDS));
                } catch (IOException | InterruptedException e) {
                    throw new IllegalStateException(e);
                }
                // closed here: the server "dies" without answering
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                CompletableFuture<Throwable> caller = attachInThread(c);
                awaitLeader(c);
                leading.countDown();
                Throwable t = caller.get(30, TimeUnit.SECONDS);
                assertTrue(t instanceof IOException, "the caller's exception: " + t);
                assertTrue(t.getMessage().contains("closed the connection"), t.getMessage());
                await("the client sees the end", 10, () -> !c.isConnected());
            }
            fake.get(30, TimeUnit.SECONDS);
        }
        assertFdsBack(fds, "after the server died under a leading caller");
    }

    @Test
    void anInterruptedLeaderGivesUpAndTheLateReplyIsReleased() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch interrupted = new CountDownLatch(1);
        long g = resource.granularity();
        try (VirtualMemoryBuffer b = resource.allocate(g); FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Frame> fake = CompletableFuture.supplyAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    int attachId;
                    try (Frame attach = FrameIO.read(s)) {
                        attachId = attach.requestId;
                    }
                    assertTrue(interrupted.await(30, TimeUnit.SECONDS));
                    // The late reply: one new id with its fd. Nobody waits: its fd closed, its lease released.
                    try (org.cuvmm.BufferDescriptor d = b.exportDescriptor()) {
                        byte[] payload = java.nio.ByteBuffer.allocate(24 + 20).putLong(77).putInt(1).putLong(g)
                                .putInt(1).putLong(g).putLong(5).putInt(1).array();
                        d.useFds(f -> s.send(frame2(4, attachId, payload), f));
                    }
                    for (;;) {
                        Frame f = FrameIO.read(s);
                        if (f == null) return null;
                        if (f.type == FrameType.RELEASE) return f;
                        f.close();
                    }
                } catch (IOException | InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                AtomicReference<Thread> thread = new AtomicReference<>();
                CompletableFuture<Throwable> caller = new CompletableFuture<>();
                Thread t = new Thread(() -> {
                    thread.set(Thread.currentThread());
                    try {
                        c.attach("x", resource).close();
                        caller.complete(null);
                    } catch (Throwable e) {
                        caller.complete(Thread.currentThread().isInterrupted() ? e : new AssertionError(
                                "interrupt flag lost", e));
                    }
                }, "leader-test-interrupted");
                t.start();
                assertEquals(t, awaitLeader(c));
                t.interrupt();
                Throwable e = caller.get(30, TimeUnit.SECONDS);
                assertTrue(e instanceof IOException && e.getMessage().contains("interrupted"), "exception: " + e);
                assertTrue(c.readToken().holder() != t, "the token was given back");
                interrupted.countDown();
                // Nobody leads now: the reader thread reads the late reply once its idle period ends.
                ReadToken.readerIdleNanos = savedIdle;
                c.readToken().wakeReader(); // it waits 60 s otherwise: the new period applies now
                Frame released = fake.get(30, TimeUnit.SECONDS);
                assertNotNull(released, "the client released the lease of the reply nobody read");
                assertEquals(77, ((Messages.Release) released.message).leaseId());
                released.close();
            }
        }
        assertFdsBack(fds, "after an interrupted leader's late reply");
    }

    @Test
    void aFatalBadFrameReadByALeaderFailsItAndTheReaderDrains() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Frame> fake = CompletableFuture.supplyAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    FrameIO.read(s).close();
                    s.send(concat(header(0x12345678, 2, 4, 1, 0)), null); // bad magic: fatal
                    Frame error = FrameIO.read(s); // the client's ERROR, then its close
                    assertTrue(FrameIO.read(s) == null, "the client closed after its ERROR");
                    return error;
                } catch (IOException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                SharingException e = org.junit.jupiter.api.Assertions.assertThrows(SharingException.class,
                        () -> c.attach("x", resource));
                assertEquals(ErrorCode.BAD_MAGIC, e.code(), e.getMessage());
                Frame error = fake.get(30, TimeUnit.SECONDS);
                assertEquals(FrameType.ERROR, error.type);
                assertEquals(ErrorCode.BAD_MAGIC.code(), ((Messages.Error) error.message).code());
                error.close();
                await("the client sees the end", 10, () -> !c.isConnected());
            }
        }
        assertFdsBack(fds, "after a fatal bad frame read by a leading caller");
    }

    /** Attaches "x" on a new thread; completes with what it threw (null if it returned). */
    private CompletableFuture<Throwable> attachInThread(SharingClient c) {
        CompletableFuture<Throwable> out = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                c.attach("x", resource).close();
                out.complete(null);
            } catch (Throwable e) {
                out.complete(e);
            }
        }, "leader-test-caller");
        t.start();
        return out;
    }

    /** Waits until a caller (not the reader thread) holds the read token; returns it. */
    private static Thread awaitLeader(SharingClient c) throws InterruptedException {
        AtomicReference<Thread> h = new AtomicReference<>();
        await("a caller leads", 30, () -> {
            Thread t = c.readToken().holder();
            h.set(t);
            return t != null && t.getName().startsWith("leader-test");
        });
        return h.get();
    }

    /** The fake server's side of the handshake: reads HELLO, answers HELLO_OK (version 2, 253 fds). */
    private static void answerHelloV2(FdSocket s) throws IOException {
        try (Frame hello = FrameIO.read(s)) {
            s.send(frame2(2, hello.requestId, new byte[] {0, 2, 0, (byte) 253}), null);
        }
    }

    private static byte[] frame2(int type, int requestId, byte[] payload) {
        return concat(header(Protocol.MAGIC, 2, type, requestId, payload.length), payload);
    }
}
