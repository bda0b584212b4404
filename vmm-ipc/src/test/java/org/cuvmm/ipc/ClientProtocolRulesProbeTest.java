package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.Test;

/**
 * Independent probe: the client checked against the client-side rules of docs/PROTOCOL.md,
 * with a fake server written from the document (FakeServerSupport: every case also checks that
 * no fd, mapping or client thread is left after the client's close).
 */
class ClientProtocolRulesProbeTest extends FakeServerSupport {

    /** Section 2: request ids are non-zero and fresh; replies are matched by id, even out of order. */
    @Test
    void outOfOrderRepliesAreMatchedByIdAndIdsAreFreshAndNonZero() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a1 = next(s, v, FrameType.ATTACH);
            Frame a2 = next(s, v, FrameType.ATTACH);
            // answer the second first: lease = 100 + the name's length, so each caller can check its own
            for (Frame a : new Frame[] {a2, a1}) {
                String name = ((Messages.Attach) a.message).name();
                try (BufferDescriptor d = real.exportDescriptor()) {
                    s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(100 + name.length(), 1, 2 * G,
                            2 * G)), d.fds());
                }
            }
        });
        try (SharingClient c = client(1)) {
            CompletableFuture<Attachment> x = CompletableFuture.supplyAsync(() -> attachQuietly(c, "x"));
            IpcTestSupport.await("the first ATTACH read", 10, () -> seenTypes().contains(FrameType.ATTACH));
            CompletableFuture<Attachment> yy = CompletableFuture.supplyAsync(() -> attachQuietly(c, "yy"));
            try (Attachment ax = x.get(10, TimeUnit.SECONDS); Attachment ay = yy.get(10, TimeUnit.SECONDS)) {
                assertEquals(101, ax.leaseId());
                assertEquals(102, ay.leaseId());
                BytePattern.verify(ax.buffer(), 9);
            }
        }
        f.get(10, TimeUnit.SECONDS);
        Set<Integer> ids = new HashSet<>();
        for (Frame fr : seen) {
            if (fr.type == FrameType.ERROR) continue;
            assertNotEquals(0, fr.requestId, "request id 0 on " + fr.type);
            assertTrue(ids.add(fr.requestId), "request id " + fr.requestId + " used twice: " + seen);
        }
    }

    private Attachment attachQuietly(SharingClient c, String name) {
        try {
            return c.attach(name, resource);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** Section 13.1: BAD_VERSION to the v2 HELLO: HELLO again in version 1, same connection, a fresh non-zero id. */
    @Test
    void badVersionFallsBackWithAFreshIdOnTheSameConnection() throws Exception {
        CompletableFuture<int[]> f = CompletableFuture.supplyAsync(() -> {
            try (FdSocket s = listen.accept()) {
                Frame h1 = FrameIO.read(s);
                h1.close();
                FrameIO.write(s, new Messages.Error(ErrorCode.BAD_VERSION, "protocol version 2 (expected: 1); frame skipped"),
                        h1.requestId, null, 1);
                Frame h2 = FrameIO.read(s);
                h2.close();
                FrameIO.write(s, new Messages.HelloOk(1, 253), h2.requestId, null, 1);
                while (next(s, 1, null) != null) { /* drain */ }
                return new int[] {h1.version, h1.requestId, h2.version, h2.requestId, h2.type.code()};
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        });
        try (SharingClient c = SharingClient.builder(sock).build()) {
            assertEquals(1, c.protocolVersion());
        }
        int[] r = f.get(10, TimeUnit.SECONDS);
        assertEquals(2, r[0]);
        assertEquals(1, r[2]);
        assertEquals(FrameType.HELLO.code(), r[4]);
        assertNotEquals(0, r[1]);
        assertNotEquals(0, r[3]);
        assertNotEquals(r[1], r[3], "a fresh id for the second HELLO");
    }

    /** Sections 4 and 8: the connection's TIMEOUT (id 0) then the end of the stream fail the waiting ATTACH with TIMEOUT. */
    @Test
    void timeoutWithIdZeroFailsTheWaitingRequest() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.TIMEOUT, "idle"), 0, null, v);
            s.shutdownOutput();
        });
        try (SharingClient c = client(2)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.TIMEOUT, e.code(), e.getMessage());
            assertFalse(c.isConnected());
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * Section 2: FD_COUNT_MISMATCH with request id 0 (more than 253 fds before the header's
     * 16th byte) is fatal: the server closes. A waiting request should fail with the server's
     * reason, as for TIMEOUT, not with a bare "closed the connection".
     */
    @Test
    void fdCountMismatchWithIdZeroIsFatalAndReported() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.FD_COUNT_MISMATCH, "more than 253 fds"), 0, null, v);
            s.shutdownOutput();
        });
        try (SharingClient c = client(2)) {
            IOException e = assertThrows(IOException.class, () -> c.attach("x", resource));
            assertTrue(e instanceof SharingException se && se.code() == ErrorCode.FD_COUNT_MISMATCH,
                    "the server's fatal FD_COUNT_MISMATCH should be the reason: " + e);
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** Section 1/4: the stream ends mid-frame (fds attached to the cut frame): the ATTACH fails, fds closed. */
    @Test
    void endOfStreamMidFrameFailsTheRequestAndClosesTheFds() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            byte[] whole = raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(300, 1, 2 * G, 2 * G));
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(java.util.Arrays.copyOf(whole, 20), d.fds());
            }
            s.shutdownOutput();
        });
        try (SharingClient c = client(1)) {
            IOException e = assertThrows(IOException.class, () -> c.attach("x", resource));
            assertFalse(c.isConnected(), e.toString());
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * The same cut frame, whichever thread reads it: the connection counts as ended before the
     * waiting ATTACH fails, so its caller never sees {@code isConnected()} true
     * after a fatal error. A callback on the request's future runs on the completing thread at
     * the moment of completion: deterministic, where the test above only sees the race rarely
     * (a CI run once saw isConnected() true there).
     */
    @Test
    void aFatalBadFrameEndsTheConnectionBeforeTheRequestFails() throws Exception {
        CountDownLatch attachRead = new CountDownLatch(1);
        CountDownLatch watching = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            attachRead.countDown();
            assertTrue(watching.await(10, TimeUnit.SECONDS), "the test never watched the request");
            byte[] whole = raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(301, 1, 2 * G, 2 * G));
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(java.util.Arrays.copyOf(whole, 20), d.fds());
            }
            s.shutdownOutput();
        });
        try (SharingClient c = client(1)) {
            CompletableFuture<IOException> attempt = CompletableFuture.supplyAsync(() -> {
                try (Attachment unexpected = c.attach("x", resource)) {
                    return null;
                } catch (IOException e) {
                    return e;
                }
            });
            assertTrue(attachRead.await(10, TimeUnit.SECONDS), "the fake server never read the ATTACH");
            List<CompletableFuture<Frame>> waiting = c.pendingReplies();
            assertEquals(1, waiting.size(), "one request waits: the ATTACH");
            List<Boolean> connectedWhenFailed = new java.util.concurrent.CopyOnWriteArrayList<>();
            waiting.get(0).whenComplete((r, t) -> connectedWhenFailed.add(c.isConnected()));
            watching.countDown();
            IOException e = attempt.get(10, TimeUnit.SECONDS);
            assertTrue(e instanceof SharingException, "the cut frame should fail the ATTACH: " + e);
            assertEquals(List.of(false), connectedWhenFailed, "isConnected() when the ATTACH failed (" + e + ")");
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** Section 1: fds with any frame but DESCRIPTOR: UNEXPECTED_FDS, fds closed (fd counts checked in tearDown). */
    @Test
    void fdsWithFramesThatCarryNoneAreClosedAndRefused() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            int[] p = IpcTestSupport.pipe();
            try {
                s.send(raw(2, FrameType.DROP, 0, concat(ByteBuffer.allocate(8).putLong(77).array(), str("ghost"))), p);
                s.send(raw(2, FrameType.EVICT, 0, ByteBuffer.allocate(12).putInt(1).putLong(5).array()), p);
                s.send(raw(2, FrameType.ERROR, 0, concat(ByteBuffer.allocate(4).putInt(ErrorCode.BAD_REQUEST_ID.code())
                        .array(), str("id 0"))), p);
                Frame a = next(s, v, FrameType.ATTACH);
                s.send(raw(2, FrameType.ERROR, a.requestId, concat(ByteBuffer.allocate(4).putInt(ErrorCode.UNKNOWN_NAME
                        .code()).array(), str("nope"))), p);
                a = next(s, v, FrameType.ATTACH);
                FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "clean"), a.requestId, null, v);
            } finally {
                NativeIo.closeAll(p);
            }
        });
        try (SharingClient c = client(2)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNEXPECTED_FDS, e.code(), e.getMessage());
            e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code(), e.getMessage());
            assertTrue(c.isConnected());
            IpcTestSupport.await("4 UNEXPECTED_FDS errors", 10, () -> seenErrors().stream()
                    .filter(x -> x.errorCode() == ErrorCode.UNEXPECTED_FDS).count() == 4);
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** Sections 2 and 8: names 1 to 255 bytes, messages 0 to 4096 bytes, enforced on receive (BAD_PAYLOAD). */
    @Test
    void nameAndMessageLimitsAreEnforcedOnReceive() throws Exception {
        byte[] longName = "n".repeat(256).getBytes(StandardCharsets.UTF_8);
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            s.send(raw(1, FrameType.DROP, 0, concat(ByteBuffer.allocate(8).putLong(78).array(),
                    ByteBuffer.allocate(2).putShort((short) 256).array(), longName)), null);
            s.send(raw(1, FrameType.DROP, 0, concat(ByteBuffer.allocate(8).putLong(79).array(), new byte[2])), null);
            Frame a = next(s, v, FrameType.ATTACH);
            byte[] msg = "m".repeat(4097).getBytes(StandardCharsets.UTF_8);
            s.send(raw(1, FrameType.ERROR, a.requestId, concat(ByteBuffer.allocate(6).putInt(ErrorCode.UNKNOWN_NAME.code())
                    .putShort((short) 4097).array(), msg)), null);
            a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "clean"), a.requestId, null, v);
        });
        try (SharingClient c = client(1)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.BAD_PAYLOAD, e.code(), e.getMessage());
            e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code(), e.getMessage());
            IpcTestSupport.await("3 BAD_PAYLOAD errors", 10, () -> seenErrors().stream()
                    .filter(x -> x.errorCode() == ErrorCode.BAD_PAYLOAD).count() == 3);
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * Section 13.6: EVICT of an id a lease still maps: the mapping stays (readable) until the lease
     * ends, no FORGET before; then unmap, FORGET. Section 13.3: a DESCRIPTOR naming the evicted id
     * without its fd is UNKNOWN_ID.
     */
    @Test
    void evictWhileLeasedWaitsForTheLeaseAndAfterItTheIdIsUnknown() throws Exception {
        CountDownLatch attached = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(500, 2 * G, 1), a.requestId, d.fds(), v);
            }
            attached.await();
            FrameIO.write(s, new Messages.Evict(new long[] {1}), 0, null, v);
            a = next(s, v, FrameType.ATTACH);
            s.send(raw(2, FrameType.DESCRIPTOR, a.requestId, v2desc(501, 2 * G, new long[] {2 * G}, new long[] {1},
                    new int[] {0})), null);
        });
        try (SharingClient c = client(2)) {
            try (Attachment a = c.attach("x", resource)) {
                attached.countDown();
                Thread.sleep(200); // the reader thread reads the EVICT meanwhile
                SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
                assertEquals(ErrorCode.UNKNOWN_ID, e.code(), e.getMessage());
                BytePattern.verify(a.buffer(), 9);
                assertFalse(seenTypes().contains(FrameType.FORGET), "no FORGET while a lease maps id 1: " + seenTypes());
            }
            IpcTestSupport.await("the FORGET of id 1", 10, () -> java.util.Arrays.equals(forgotten(), new long[] {1}));
        }
        f.get(10, TimeUnit.SECONDS);
        int release = -1, forget = -1;
        List<FrameType> t = seenTypes();
        for (int i = 0; i < t.size(); i++) {
            if (seen.get(i).message instanceof Messages.Release r && r.leaseId() == 500) release = i;
            if (t.get(i) == FrameType.FORGET) forget = i;
        }
        assertTrue(release >= 0 && forget >= 0, "" + t);
    }

    /** Section 13.12: TOO_MANY_IDS makes the cache FORGET its idle ids, await FORGOTTEN, and ask once more; twice is thrown. */
    @Test
    void tooManyIdsForgetsIdleIdsThenRetriesOnce() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(600, 2 * G, 1), a.requestId, d.fds(), v);
            }
            a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.TOO_MANY_IDS, "full"), a.requestId, null, v);
            a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(601, 2 * G, 2), a.requestId, d.fds(), v);
            }
            a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.TOO_MANY_IDS, "full"), a.requestId, null, v);
            a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.TOO_MANY_IDS, "still full"), a.requestId, null, v);
        });
        try (SharingClient c = client(2)) {
            c.attach("x", resource).close();
            try (Attachment a = c.attach("x", resource)) {
                assertEquals(601, a.leaseId());
                BytePattern.verify(a.buffer(), 9);
            }
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.TOO_MANY_IDS, e.code(), e.getMessage());
        }
        f.get(10, TimeUnit.SECONDS);
        List<FrameType> t = seenTypes();
        // HELLO ATTACH RELEASE ATTACH FORGET ATTACH RELEASE ATTACH FORGET ATTACH
        int firstForget = t.indexOf(FrameType.FORGET);
        assertTrue(firstForget > 0 && t.subList(firstForget, t.size()).contains(FrameType.ATTACH), "" + t);
        assertEquals(5, t.stream().filter(x -> x == FrameType.ATTACH).count(), "" + t);
        assertEquals("[1, 2]", java.util.Arrays.toString(forgotten()));
    }


    /** A fake v2 server whose frames are read by a thread of their own into a queue: nothing is answered unless the script does. */
    CompletableFuture<Void> manual(Script script) {
        return CompletableFuture.runAsync(() -> {
            try (FdSocket s = listen.accept()) {
                Frame hello = FrameIO.read(s);
                hello.close();
                seen.add(hello);
                FrameIO.write(s, new Messages.HelloOk(2, 253), hello.requestId, null, 2);
                Thread t = new Thread(() -> {
                    try {
                        for (;;) {
                            Frame f = FrameIO.read(s);
                            if (f == null) break;
                            f.close();
                            seen.add(f);
                            queue.add(f);
                        }
                    } catch (IOException | RuntimeException end) {
                        // ended
                    }
                    queue.add(END);
                }, "probe fake reader");
                t.start();
                script.run(s, 2);
                t.join(15_000);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
    }

    final java.util.concurrent.LinkedBlockingQueue<Frame> queue = new java.util.concurrent.LinkedBlockingQueue<>();
    static final Frame END = new Frame(FrameType.ERROR, 0, new Messages.Error(0, "end"), null);

    /** Frames take() passed over, kept for a later take() of their type. */
    final List<Frame> backlog = new java.util.ArrayList<>();

    /**
     * The next frame of {@code type}, or null after {@code ms}. Frames of other types are kept
     * for later takes: RELEASE and FORGET may come in either order (PROTOCOL.md 13.6).
     */
    Frame take(FrameType type, long ms) throws InterruptedException {
        for (java.util.Iterator<Frame> i = backlog.iterator(); i.hasNext();) {
            Frame f = i.next();
            if (f.type == type) {
                i.remove();
                return f;
            }
        }
        long end = System.currentTimeMillis() + ms;
        for (;;) {
            Frame f = queue.poll(Math.max(1, end - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
            if (f == null || f == END) return null;
            if (f.type == type) return f;
            backlog.add(f);
        }
    }

    /**
     * Section 13.10: between its FORGET and the FORGOTTEN a client still maps a DESCRIPTOR
     * (answering an ATTACH sent before the FORGET) that names the id without its fd, from the
     * kept fd; it must not FORGET that id a second time.
     */
    @Test
    void aDescriptorNamingAnIdBeingForgottenIsMappedFromTheKeptFd() throws Exception {
        CompletableFuture<Void> f = manual((s, v) -> {
            Frame a = take(FrameType.ATTACH, 10_000);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(700, 2 * G, 1), a.requestId, d.fds(), v);
            }
            Frame b = take(FrameType.ATTACH, 10_000);
            // the client closes its attachment of lease 700: RELEASE, and (cache of 0) FORGET [1]
            List<Frame> got = new java.util.ArrayList<>();
            Frame rel = null, forget = null;
            long end = System.currentTimeMillis() + 5000;
            while ((rel == null || forget == null) && System.currentTimeMillis() < end) {
                Frame x = queue.poll(100, TimeUnit.MILLISECONDS);
                if (x == null || x == END) continue;
                if (x.type == FrameType.RELEASE) rel = x;
                if (x.type == FrameType.FORGET) forget = x;
            }
            if (rel == null) throw new AssertionError("no RELEASE of lease 700");
            forgetBeforeLateDescriptor = forget != null;
            // Replies in request order: the DESCRIPTOR of B (id 1, no fd: held until FORGOTTEN), RELEASED, FORGOTTEN.
            s.send(raw(2, FrameType.DESCRIPTOR, b.requestId, v2desc(701, 2 * G, new long[] {2 * G}, new long[] {1},
                    new int[] {0})), null);
            FrameIO.write(s, new Messages.Released(700), rel.requestId, null, v);
            if (forget != null) FrameIO.write(s, new Messages.Forgotten(1), forget.requestId, null, v);
            Frame rel2 = take(FrameType.RELEASE, 10_000);
            if (rel2 != null) FrameIO.write(s, new Messages.Released(701), rel2.requestId, null, v);
            Frame forget2 = take(FrameType.FORGET, 1000);
            if (forget2 != null) FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_ID, "id 1 forgotten"),
                    forget2.requestId, null, v);
        });
        try (SharingClient c = SharingClient.builder(sock).clientName("victim").protocolVersion(2).cacheMaxEntries(0)
                .timeout(java.time.Duration.ofSeconds(5)).build()) {
            Attachment a = c.attach("x", resource);
            CompletableFuture<Attachment> b = CompletableFuture.supplyAsync(() -> attachQuietly(c, "x"));
            IpcTestSupport.await("the second ATTACH read", 10, () -> seenTypes().stream()
                    .filter(x -> x == FrameType.ATTACH).count() == 2);
            a.close();
            try (Attachment ab = b.get(10, TimeUnit.SECONDS)) {
                assertEquals(701, ab.leaseId());
                BytePattern.verify(ab.buffer(), 9);
            }
            Thread.sleep(300);
        }
        f.get(20, TimeUnit.SECONDS);
        assertTrue(forgetBeforeLateDescriptor, "the race was set up: FORGET read before the late DESCRIPTOR went");
        assertEquals("[1]", java.util.Arrays.toString(forgotten()), "id 1 forgotten once: " + seenTypes());
        assertTrue(seenErrors().isEmpty(), "no ERROR from the client: " + seenErrors());
    }

    volatile boolean forgetBeforeLateDescriptor;

    /** Section 13.10: an EVICT of an id whose FORGET is in flight is ignored (no second FORGET). */
    @Test
    void anEvictCrossingTheClientsForgetIsIgnored() throws Exception {
        CompletableFuture<Void> f = manual((s, v) -> {
            Frame a = take(FrameType.ATTACH, 10_000);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(800, 2 * G, 1), a.requestId, d.fds(), v);
            }
            Frame rel = take(FrameType.RELEASE, 10_000);
            FrameIO.write(s, new Messages.Released(800), rel.requestId, null, v);
            Frame forget = take(FrameType.FORGET, 10_000);
            FrameIO.write(s, new Messages.Evict(new long[] {1}), 0, null, v);
            FrameIO.write(s, new Messages.Forgotten(1), forget.requestId, null, v);
            Frame forget2 = take(FrameType.FORGET, 1000);
            if (forget2 != null) FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_ID, "id 1 forgotten"),
                    forget2.requestId, null, v);
        });
        try (SharingClient c = SharingClient.builder(sock).clientName("victim").protocolVersion(2).cacheMaxEntries(0)
                .timeout(java.time.Duration.ofSeconds(5)).build()) {
            c.attach("x", resource).close();
            Thread.sleep(1200);
            assertTrue(c.isConnected());
        }
        f.get(20, TimeUnit.SECONDS);
        assertEquals("[1]", java.util.Arrays.toString(forgotten()), "id 1 forgotten once: " + seenTypes());
    }

    /** Section 5/6: a DROP right behind its DESCRIPTOR (before attach returns) is still notified, with the attachment. */
    @Test
    void aDropRightBehindItsDescriptorIsNotifiedWithTheAttachment() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(900, 1, 2 * G, 2 * G)), d.fds());
            }
            FrameIO.write(s, new Messages.Drop(900, "x"), 0, null, v);
        });
        java.util.concurrent.CopyOnWriteArrayList<DropNotice> notices = new java.util.concurrent.CopyOnWriteArrayList<>();
        try (SharingClient c = client(1)) {
            c.addDropListener(notices::add);
            try (Attachment a = c.attach("x", resource)) {
                IpcTestSupport.await("the DROP notice", 10, () -> !notices.isEmpty());
                assertEquals(900, notices.get(0).leaseId());
                assertEquals("x", notices.get(0).name());
                assertTrue(notices.get(0).attachment() == a, "" + notices);
                assertTrue(a.isDropped());
            }
            Thread.sleep(100);
            assertEquals(1, notices.size(), "" + notices);
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** Section 13.1: on a v2 connection a frame with version 1 is skipped and answered BAD_VERSION, not fatal. */
    @Test
    void aFrameOfTheOtherVersionIsSkippedWithBadVersion() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "v1 header"), a.requestId, null, 1);
            a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "clean"), a.requestId, null, v);
        });
        try (SharingClient c = client(2)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.BAD_VERSION, e.code(), e.getMessage());
            e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code(), e.getMessage());
            IpcTestSupport.await("the client's BAD_VERSION", 10, () -> seenErrors().stream()
                    .anyMatch(x -> x.errorCode() == ErrorCode.BAD_VERSION));
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** Sections 4 and 8: TIMEOUT (id 0) fails every waiting request, the leader's and a follower's. */
    @Test
    void timeoutWithIdZeroFailsEveryWaitingRequest() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            next(s, v, FrameType.ATTACH);
            next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.TIMEOUT, "idle"), 0, null, v);
            s.shutdownOutput();
        });
        try (SharingClient c = client(2)) {
            CompletableFuture<Attachment> x = CompletableFuture.supplyAsync(() -> attachQuietly(c, "x"));
            CompletableFuture<Attachment> y = CompletableFuture.supplyAsync(() -> attachQuietly(c, "y"));
            for (CompletableFuture<Attachment> r : List.of(x, y)) {
                Throwable t = assertThrows(java.util.concurrent.ExecutionException.class, () -> r.get(10, TimeUnit.SECONDS))
                        .getCause().getCause();
                assertTrue(t instanceof SharingException se && se.code() == ErrorCode.TIMEOUT, "" + t);
            }
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * Section 13.4: a FORGET answered UNKNOWN_ID: the client treats its ids as forgotten, and a
     * later DESCRIPTOR naming one without its fd is rejected with UNKNOWN_ID; the connection stays.
     */
    @Test
    void aForgetAnsweredUnknownIdForgetsTheIdsAnyway() throws Exception {
        CompletableFuture<Void> f = manual((s, v) -> {
            Frame a = take(FrameType.ATTACH, 10_000);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(1000, 2 * G, 1), a.requestId, d.fds(), v);
            }
            Frame rel = take(FrameType.RELEASE, 10_000);
            FrameIO.write(s, new Messages.Released(1000), rel.requestId, null, v);
            Frame forget = take(FrameType.FORGET, 10_000);
            FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_ID, "not held"), forget.requestId, null, v);
            a = take(FrameType.ATTACH, 10_000);
            s.send(raw(2, FrameType.DESCRIPTOR, a.requestId, v2desc(1001, 2 * G, new long[] {2 * G}, new long[] {1},
                    new int[] {0})), null);
            rel = take(FrameType.RELEASE, 10_000);
            if (rel != null) FrameIO.write(s, new Messages.Released(1001), rel.requestId, null, v);
            a = take(FrameType.ATTACH, 10_000);
            if (a != null) FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "clean"), a.requestId, null, v);
        });
        try (SharingClient c = SharingClient.builder(sock).clientName("victim").protocolVersion(2).cacheMaxEntries(0)
                .timeout(java.time.Duration.ofSeconds(5)).build()) {
            c.attach("x", resource).close();
            IpcTestSupport.await("the FORGET", 10, () -> seenTypes().contains(FrameType.FORGET));
            Thread.sleep(100);
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNKNOWN_ID, e.code(), e.getMessage());
            e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code(), e.getMessage());
            assertTrue(c.isConnected());
        }
        f.get(20, TimeUnit.SECONDS);
    }

    /** Section 4: an ERROR with id 0 and a non-fatal code (BAD_REQUEST_ID) leaves the connection and its waiting request. */
    @Test
    void aNonFatalErrorWithIdZeroLeavesTheRequestWaiting() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            FrameIO.write(s, new Messages.Error(ErrorCode.BAD_REQUEST_ID, "id 0"), 0, null, v);
            FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "the answer"), a.requestId, null, v);
        });
        try (SharingClient c = client(1)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code(), e.getMessage());
            assertTrue(c.isConnected());
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * Section 13.6: an EVICT right behind the DESCRIPTOR that brought the id (read before the
     * attach imports it): the attach still works from the fd; unmapped and FORGET once the lease ends.
     */
    @Test
    void anEvictRightBehindTheDescriptorStillAttachesThenForgets() throws Exception {
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(1100, 2 * G, 1), a.requestId, d.fds(), v);
            }
            FrameIO.write(s, new Messages.Evict(new long[] {1}), 0, null, v);
            a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(1101, 2 * G, 2), a.requestId, d.fds(), v);
            }
        });
        try (SharingClient c = client(2)) {
            try (Attachment a = c.attach("x", resource)) {
                BytePattern.verify(a.buffer(), 9);
                Thread.sleep(100);
                assertFalse(seenTypes().contains(FrameType.FORGET), "no FORGET while the lease maps id 1");
            }
            IpcTestSupport.await("the FORGET of id 1", 10, () -> java.util.Arrays.equals(forgotten(), new long[] {1}));
            // nothing of id 1 is kept: a second attach gets the fd again (id 2), and works
            try (Attachment b = c.attach("x", resource)) {
                BytePattern.verify(b.buffer(), 9);
            }
            ImportCache.Stats st = c.importCache().stats();
            assertEquals(1, st.idsHeld(), "only id 2 held: " + st);
            assertEquals(1, st.fdsKept(), "only id 2's fd kept: " + st);
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** Section 13.4: the client keeps a forgotten id's fd until FORGOTTEN, then closes it. */
    @Test
    void aForgottenIdsFdIsKeptUntilForgotten() throws Exception {
        CountDownLatch answer = new CountDownLatch(1);
        CompletableFuture<Void> f = manual((s, v) -> {
            Frame a = take(FrameType.ATTACH, 10_000);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(1200, 2 * G, 1), a.requestId, d.fds(), v);
            }
            Frame rel = take(FrameType.RELEASE, 10_000);
            FrameIO.write(s, new Messages.Released(1200), rel.requestId, null, v);
            Frame forget = take(FrameType.FORGET, 10_000);
            answer.await();
            FrameIO.write(s, new Messages.Forgotten(1), forget.requestId, null, v);
        });
        try (SharingClient c = SharingClient.builder(sock).clientName("victim").protocolVersion(2).cacheMaxEntries(0)
                .timeout(java.time.Duration.ofSeconds(5)).build()) {
            c.attach("x", resource).close();
            IpcTestSupport.await("the FORGET", 10, () -> seenTypes().contains(FrameType.FORGET));
            Thread.sleep(100);
            assertEquals(1, c.importCache().stats().fdsKept(), "kept until FORGOTTEN: " + c.importCache().stats());
            answer.countDown();
            IpcTestSupport.await("the fd closed at FORGOTTEN", 10, () -> c.importCache().stats().fdsKept() == 0);
            assertEquals(0, c.importCache().stats().idsHeld());
        }
        f.get(20, TimeUnit.SECONDS);
    }

    /**
     * Section 1: more than 253 fds within one frame, spread over several sends, is fatal on
     * receive: the client stops reading, closes every fd (tearDown counts them), and the
     * waiting request fails with FD_COUNT_MISMATCH.
     */
    @Test
    void moreThan253FdsSpreadOverOneFrameAreFatalAndAllClosed() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            byte[] whole = raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(1300, 1, 2 * G, 2 * G));
            int[] p = IpcTestSupport.pipe();
            try {
                int[] many = new int[200];
                java.util.Arrays.fill(many, p[0]);
                s.send(whole, 0, 8, many);
                int[] more = new int[60];
                java.util.Arrays.fill(more, p[1]);
                try {
                    s.send(whole, 8, whole.length - 8, more);
                } catch (IOException closed) {
                    // the client may have closed already
                }
            } finally {
                NativeIo.closeAll(p);
            }
        });
        try (SharingClient c = client(1)) {
            SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
            assertEquals(ErrorCode.FD_COUNT_MISMATCH, e.code(), e.getMessage());
            assertFalse(c.isConnected());
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * Sections 1 and 10: a refusal right after accept (ERROR id 0, then close, the HELLO unread):
     * the client reports the server's code, whether or not its HELLO's send failed.
     */
    @Test
    void aRefusalRightAfterAcceptIsReportedWithItsCode() throws Exception {
        for (int round = 0; round < 10; round++) {
            final int r = round;
            CompletableFuture<Void> f = CompletableFuture.runAsync(() -> {
                try (FdSocket s = listen.accept()) {
                    FrameIO.write(s, new Messages.Error(ErrorCode.TOO_MANY_CONNECTIONS, "full"), 0, null, 1);
                    if (r % 2 == 0) Thread.sleep(30); // the HELLO arrives and stays unread
                } catch (IOException | InterruptedException e) {
                    throw new RuntimeException(e);
                }
            });
            SharingException e = assertThrows(SharingException.class, () -> client(2).close());
            assertEquals(ErrorCode.TOO_MANY_CONNECTIONS, e.code(), "round " + round + ": " + e.getMessage());
            f.get(10, TimeUnit.SECONDS);
        }
    }

    /** DropNotice ordering: DROPs are notified in the order they arrived, one per DROP, on one thread. */
    @Test
    void dropNoticesKeepTheirOrder() throws Exception {
        CountDownLatch attached = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            for (int i = 0; i < 3; i++) {
                Frame a = next(s, v, FrameType.ATTACH);
                try (BufferDescriptor d = real.exportDescriptor()) {
                    s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(1400 + i, 1, 2 * G, 2 * G)),
                            d.fds());
                }
            }
            attached.await();
            for (int i : new int[] {2, 0, 1}) FrameIO.write(s, new Messages.Drop(1400 + i, "x" + i), 0, null, v);
        });
        java.util.concurrent.CopyOnWriteArrayList<String> heard = new java.util.concurrent.CopyOnWriteArrayList<>();
        try (SharingClient c = client(1)) {
            c.addDropListener(n -> heard.add(n.leaseId() + ":" + n.name() + ":" + (n.attachment() != null)
                    + ":" + Thread.currentThread().getName().startsWith("cuvmm-ipc-client")));
            List<Attachment> as = new java.util.ArrayList<>();
            for (int i = 0; i < 3; i++) as.add(c.attach("x", resource));
            attached.countDown();
            IpcTestSupport.await("3 DROP notices", 10, () -> heard.size() == 3);
            for (Attachment a : as) {
                assertTrue(a.isDropped());
                a.close();
            }
        }
        f.get(10, TimeUnit.SECONDS);
        assertEquals(List.of("1402:x2:true:true", "1400:x0:true:true", "1401:x1:true:true"), heard);
    }
}
