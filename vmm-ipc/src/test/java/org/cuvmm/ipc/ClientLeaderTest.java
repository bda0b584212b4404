package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame2;
import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
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
    void aLeaderWaitsForItsReplyInRecvmsgWithNoPoll() throws Exception {
        // docs/PROTOCOL.md section 12: a leading caller waits in the blocking recvmsg (a 20 ms
        // SO_RCVTIMEO slice), not in a poll before it; a reply that arrives whole is one read
        // (section 1, reading ahead).
        ReadToken.readerIdleNanos = LONG_IDLE;
        long g = resource.granularity();
        int rounds = 100;
        try (VirtualMemoryBuffer b = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            server.publish("frame", b);
            c.attach("frame", resource).close();
            long[] before = c.socketCalls();
            long[] replies = c.replyStats();
            for (int i = 0; i < rounds; i++) {
                try (Attachment a = c.attach("frame", resource)) {
                    a.buffer().size();
                }
            }
            long[] after = c.socketCalls();
            assertEquals(2L * rounds, c.replyStats()[0] - replies[0], "replies the caller read itself");
            assertEquals(0, after[1] - before[1], "poll calls over " + rounds + " cached rounds");
            // Calls that read something: a reply slower than a slice (a GC pause, a loaded
            // machine) adds an empty one (EAGAIN), which says nothing about the path.
            long recvs = (after[0] - before[0]) - (after[2] - before[2]);
            assertTrue(recvs <= 2L * rounds, recvs + " recvmsg calls that read bytes over " + rounds + " rounds "
                    + "(expected: at most 2 a round, one per reply)");
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
            long[] atStart = c.replyStats(); // HELLO's reply
            AtomicBoolean stop = new AtomicBoolean();
            AtomicInteger attached = new AtomicInteger();
            AtomicInteger attempts = new AtomicInteger();
            List<Thread> workers = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread w = new Thread(() -> {
                    while (!stop.get()) {
                        attempts.incrementAndGet();
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
            // Every request got its reply exactly once, read by its caller or handed over: an
            // ATTACH per attempt (a DESCRIPTOR, or UNKNOWN_NAME between generations), a RELEASE
            // per attachment closed (the workers', and this thread's one per generation).
            long[] stats = c.replyStats();
            long replies = stats[0] + stats[1] - atStart[0] - atStart[1];
            assertEquals(attempts.get() + attached.get() + 2L * generations, replies, "replies delivered (read by "
                    + "their caller " + stats[0] + ", handed over " + stats[1] + ")");
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
            try {
                CompletableFuture<Throwable> caller = attachInThread(c);
                assertTrue(attachRead.await(30, TimeUnit.SECONDS));
                Thread leader = awaitLeader(c);
                assertNotNull(leader);
                c.close(); // from this thread, while the caller polls the socket for its reply
                Throwable t = caller.get(30, TimeUnit.SECONDS);
                assertTrue(t instanceof IOException, "the caller's exception: " + t);
                // Not the server's death ("the server ... closed the connection"): this close.
                assertTrue(t.getMessage().contains("the client is closed"), t.getMessage());
            } finally {
                c.closeNow();
            }
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

    @Test
    void steadyStateRoundsWithTheDefaultPeriod() throws Exception {
        // The real 1 ms period: every reply is delivered exactly once, callers read replies
        // themselves (how many depends on scheduling: a round descheduled for more than 1 ms
        // lets the reader thread in, which then hands that reply over), and a DROP that
        // arrives while nobody leads is read by the reader thread.
        long g = resource.granularity();
        int rounds = 200;
        try (VirtualMemoryBuffer b = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            server.publish("frame", b);
            c.attach("frame", resource).close();
            long[] before = c.replyStats();
            for (int i = 0; i < rounds; i++) {
                try (Attachment a = c.attach("frame", resource)) {
                    a.buffer().size();
                }
            }
            long[] after = c.replyStats();
            long own = after[0] - before[0];
            long handed = after[1] - before[1];
            assertEquals(2L * rounds, own + handed, "replies delivered (own " + own + ", handed over " + handed + ")");
            assertTrue(own > 0, "no reply read by its caller in " + rounds + " rounds with the 1 ms period: handed "
                    + "over " + handed);
            Attachment held = c.attach("frame", resource);
            server.unpublish("frame"); // nobody leads now: the reader thread reads the DROP
            await("the DROP read by the reader thread", 30, held::isDropped);
            held.close();
        }
    }

    @Test
    void aServerStallingInTheHeaderFailsTheLeaderAtItsTimeout() throws Exception {
        stallMidFrame(6, 0);
    }

    @Test
    void aServerStallingInThePayloadFailsTheLeaderAtItsTimeout() throws Exception {
        stallMidFrame(16, 3);
    }

    /**
     * The fake server answers ATTACH with the first {@code headerBytes} bytes of an ERROR frame
     * (and {@code payloadBytes} of its payload), then stalls: the leading caller, whose timeout
     * is 300 ms, must return with a clear exception (the connection ends: a half-read frame
     * cannot be resumed), not block in recvmsg for the rest.
     */
    private void stallMidFrame(int headerBytes, int payloadBytes) throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch callerDone = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    int id;
                    try (Frame attach = FrameIO.read(s)) {
                        id = attach.requestId;
                    }
                    byte[] reply = Frame.encode(new Messages.Error(ErrorCode.UNKNOWN_NAME, "no such name"), id, 2);
                    s.send(java.util.Arrays.copyOf(reply, headerBytes + payloadBytes), null);
                    assertTrue(callerDone.await(30, TimeUnit.SECONDS), "the caller returned");
                } catch (IOException | InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            SharingClient c = SharingClient.connect(sock);
            try {
                c.setTimeout(java.time.Duration.ofMillis(300));
                CompletableFuture<Throwable> caller = attachInThread(c);
                Throwable t = caller.get(30, TimeUnit.SECONDS);
                callerDone.countDown();
                assertTrue(t instanceof IOException, "the caller's exception: " + t);
                assertTrue(t.getMessage().contains("stalled mid-frame") && t.getMessage().contains((headerBytes
                        + payloadBytes) + " of the "), t.getMessage());
                assertFalse(c.isConnected(), "the connection ended");
                IOException next = org.junit.jupiter.api.Assertions.assertThrows(IOException.class,
                        () -> c.attach("x", resource));
                assertTrue(next.getMessage().contains("stalled mid-frame"), next.getMessage());
            } finally {
                callerDone.countDown();
                c.closeNow();
            }
            fake.get(30, TimeUnit.SECONDS);
        }
        assertFdsBack(fds, "after a server stalled mid-frame under a leading caller");
    }

    @Test
    void aThreadRetryingOnAClosedClientDoesNotKeepTheReaderOut() throws Exception {
        // A thread asks again and again (UNKNOWN_NAME: real round trips, so the reader thread
        // stays out); then the client is closed but drains (a lease it cannot see keeps the
        // connection), and the same thread's requests are refused at once. A refused request
        // is no activity: 200 ms later the reader thread goes in and reads the server's close.
        ReadToken.readerIdleNanos = TimeUnit.MILLISECONDS.toNanos(200);
        Map<String, Integer> fds = fdSnapshot();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicInteger answered = new AtomicInteger();
        AtomicInteger refused = new AtomicInteger();
        ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
        Thread retrying = null;
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer published = owner.allocate(owner.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("c", published);
            SharingClient c = SharingClient.connect(sock);
            try {
                Attachment a = c.attach("c", resource);
                c.forget(a); // close() does not see it: its lease keeps the connection open (draining)
                retrying = new Thread(() -> {
                    while (!stop.get()) {
                        try {
                            c.attach("nothing-here", resource).close();
                            errors.add(new AssertionError("attached a name nobody published"));
                        } catch (SharingException e) {
                            answered.incrementAndGet(); // UNKNOWN_NAME: a round trip
                        } catch (IOException e) {
                            refused.incrementAndGet(); // "the client is closed", later the connection's end
                        } catch (RuntimeException e) {
                            errors.add(e);
                            return;
                        }
                    }
                }, "leader-test-retrying");
                retrying.start();
                await("round trips of the retrying thread", 30, () -> answered.get() > 10);
                c.close();
                await("requests refused", 30, () -> refused.get() > 10);
                assertEquals(1, c.pendingReleases(), "draining for the forgotten attachment's lease");
                server.close(); // the connection's end: only the reader thread reads it now
                await("the draining client read the end of the connection", 30, () -> c.pendingReleases() == 0);
                assertTrue(errors.isEmpty(), "errors: " + errors);
                a.close(); // the connection's end freed its lease: only unmaps
            } finally {
                stop.set(true);
                if (retrying != null) retrying.join(TimeUnit.SECONDS.toMillis(30));
                c.closeNow();
            }
            assertFalse(retrying.isAlive());
        }
        assertFdsBack(fds, "after a client retried attach() while closed");
    }

    @Test
    void aFailureDispatchingALeadersFrameFailsItWithAnIOException() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch callerDone = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s)) {
                        FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "no such name"), attach.requestId,
                                null, 2);
                    }
                    assertTrue(callerDone.await(30, TimeUnit.SECONDS), "the caller returned");
                } catch (IOException | InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                IllegalStateException injected = new IllegalStateException("injected dispatch failure");
                c.dispatchHook = f -> {
                    if (f.type == FrameType.ERROR) throw injected;
                };
                Throwable t = attachInThread(c).get(30, TimeUnit.SECONDS);
                callerDone.countDown();
                assertTrue(t instanceof IOException, "the caller's exception: " + t);
                assertTrue(t.getMessage().contains("the client's reader failed"), t.getMessage());
                assertTrue(t.getMessage().contains("injected dispatch failure"), t.getMessage());
                assertFalse(c.isConnected());
            } finally {
                callerDone.countDown();
            }
            fake.get(30, TimeUnit.SECONDS);
        }
        assertFdsBack(fds, "after a dispatch failure under a leading caller");
    }

    @Test
    void aFollowerWhoseReplyIsUnreadWhenTheLeaderLeavesReadsItItself() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch answerFirst = new CountDownLatch(1);
        CountDownLatch firstAnswered = new CountDownLatch(1);
        CountDownLatch answerSecond = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    int first;
                    int second;
                    try (Frame a = FrameIO.read(s); Frame b = FrameIO.read(s)) {
                        first = a.requestId;
                        second = b.requestId;
                    }
                    assertTrue(answerFirst.await(30, TimeUnit.SECONDS)); // once the second caller follows
                    FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "first"), first, null, 2);
                    firstAnswered.countDown();
                    assertTrue(answerSecond.await(30, TimeUnit.SECONDS));
                    FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "second"), second, null, 2);
                    while (FrameIO.read(s) != null) { /* until the client closes */ }
                } catch (IOException e) {
                    // the client closed
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                long[] before = c.replyStats();
                CompletableFuture<Throwable> leader = attachInThread(c);
                Thread leaderThread = awaitLeader(c);
                CompletableFuture<Throwable> follower = attachInThread(c);
                await("the second caller follows", 30, () -> c.readToken().waitingCallers() == 1);
                answerFirst.countDown();
                assertTrue(firstAnswered.await(30, TimeUnit.SECONDS));
                Throwable first = leader.get(30, TimeUnit.SECONDS);
                assertTrue(first instanceof SharingException && first.getMessage().contains("first"), "" + first);
                assertTrue(c.readToken().holder() != leaderThread, "the leader gave the token back");
                answerSecond.countDown(); // only now: the follower's reply was unread when the leader left
                Throwable second = follower.get(30, TimeUnit.SECONDS);
                assertTrue(second instanceof SharingException && second.getMessage().contains("second"), "" + second);
                long[] after = c.replyStats();
                assertEquals(2, after[0] - before[0], "both callers read their own reply (the follower led for it)");
                assertEquals(0, after[1] - before[1], "replies handed over");
            }
            fake.get(30, TimeUnit.SECONDS);
        }
        assertFdsBack(fds, "after a follower led for its own reply");
    }

    @Test
    void aLeaderTimingOutGivesTheTokenBackAndTheNextLeaderReadsTheLateReply() throws Exception {
        ReadToken.readerIdleNanos = LONG_IDLE;
        Map<String, Integer> fds = fdSnapshot();
        CountDownLatch timedOut = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    answerHelloV2(s);
                    int first;
                    try (Frame a = FrameIO.read(s)) {
                        first = a.requestId;
                    }
                    assertTrue(timedOut.await(30, TimeUnit.SECONDS));
                    try (Frame b = FrameIO.read(s)) {
                        // The late reply first, then the second request's.
                        FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "late"), first, null, 2);
                        FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "second"), b.requestId, null, 2);
                    }
                    while (FrameIO.read(s) != null) { /* until the client closes */ }
                } catch (IOException e) {
                    // the client closed
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                c.setTimeout(java.time.Duration.ofMillis(200));
                long[] atStart = c.replyStats();
                Throwable t = attachInThread(c).get(30, TimeUnit.SECONDS); // leads (the reader keeps out 60 s)
                assertTrue(t instanceof IOException && t.getMessage().contains("no reply to ATTACH"), "" + t);
                assertNull(c.readToken().holder(), "the timed-out leader gave the token back");
                assertEquals(atStart[0], c.replyStats()[0]);
                assertTrue(c.isConnected(), "a timeout between frames does not end the connection");
                timedOut.countDown();
                c.setTimeout(java.time.Duration.ofSeconds(30));
                long[] before = c.replyStats();
                Throwable second = attachInThread(c).get(30, TimeUnit.SECONDS);
                assertTrue(second instanceof SharingException && second.getMessage().contains("second"), "" + second);
                long[] after = c.replyStats();
                assertEquals(1, after[0] - before[0], "the new leader read the late reply and its own");
                assertTrue(c.isConnected());
            }
            fake.get(30, TimeUnit.SECONDS);
        }
        assertFdsBack(fds, "after a leader timed out holding the token");
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

}
