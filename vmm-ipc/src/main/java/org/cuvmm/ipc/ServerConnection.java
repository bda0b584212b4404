package org.cuvmm.ipc;

import java.io.IOException;

/**
 * One client of a {@link SharingServer}: a reader thread that reads and answers frames, and
 * a {@link SendQueue} whose thread sends them (the reader sends its replies itself when the
 * queue is idle: {@link SendQueue#flush()}). A bad frame is answered with an ERROR; a fatal
 * one also ends this connection (only this one). When the connection ends for any reason,
 * its leases are released. Package-private.
 */
final class ServerConnection {
    private static final int QUEUE_CAPACITY = 256;
    /** How long an ending connection's writer may take to send its last fd-less frames. */
    static final long WRITER_GRACE_MILLIS = 5000;

    final long id;
    final FdSocket socket;
    final PeerCredentials peer;
    final SendQueue out;
    private final SharingServer server;
    private final Thread reader;
    /** Lease id -> lease; touched by the reader and by the server on close ({@link LongMap}: no boxed id per lease). */
    final LongMap<Publication.Lease> leases = new LongMap<>();
    private volatile String clientName = "";
    /**
     * The connection's protocol version: 0 until HELLO, then the version of the HELLO's
     * header (1 or 2). Written once by the reader, before HELLO_OK is queued.
     */
    private volatile int version;
    /** The allocation ids this connection holds (version 2; null for version 1 and before HELLO). */
    volatile ConnectionIds ids;
    /** EVICT ids the release notice could not queue at once (queue full): offered again when room frees. */
    private final java.util.concurrent.ConcurrentLinkedQueue<Long> unsentEvicts =
            new java.util.concurrent.ConcurrentLinkedQueue<>();
    /**
     * DROPs {@code unpublish} could not queue at once (queue full, say of replies to a client
     * that pipelines requests while it reads): offered again when room frees, like EVICTs, as
     * long as the lease is held. At most one per lease, so bounded by the lease limit.
     */
    private final java.util.concurrent.ConcurrentLinkedQueue<Messages.Drop> unsentDrops =
            new java.util.concurrent.ConcurrentLinkedQueue<>();
    /** Written by the reader; read by the {@link IdleWatchdog}. */
    private volatile boolean helloDone;
    /** Set by the reader once the connection has ended (right before the server forgets it). */
    private volatile boolean ended;
    /** When the connection was accepted ({@link System#nanoTime()}). */
    final long startNanos = System.nanoTime();
    /** When the last frame (good or bad) arrived; written by the reader. */
    private volatile long lastFrameNanos = startNanos;
    /** Set once the connection is ending (timed out, or its reader stopped); written under {@link #bookkeeping}. */
    private volatile boolean ending;
    /** Why the watchdog cut this connection (null if it did not); written under {@link #bookkeeping}. */
    private volatile String timeoutReason;
    /**
     * Makes "holds no lease and is idle, so end it" ({@link #timeOut}) atomic with "not
     * ending, so grant this lease" ({@link #addLeaseUnlessEnding}): a lease is never granted
     * on a connection the watchdog is cutting, and a connection that holds a lease is never
     * cut. Held only for that bookkeeping, never across I/O or a driver call.
     */
    private final Object bookkeeping = new Object();
    /** The {@link IdleWatchdog}'s next check of this connection (cancelled when it ends); written by the watchdog. */
    volatile java.util.concurrent.ScheduledFuture<?> watchdogTask;

    ServerConnection(SharingServer server, long id, FdSocket socket, PeerCredentials peer) {
        this.server = server;
        this.id = id;
        this.socket = socket;
        this.peer = peer;
        this.out = new SendQueue(socket, QUEUE_CAPACITY, "cuvmm-ipc-conn-" + id + "-write");
        out.afterTake = this::offerUnsentNotices;
        out.onQueued = server::descriptorQueued; // only DESCRIPTORs are queued with tryOffer
        this.reader = new Thread(this::run, "cuvmm-ipc-conn-" + id + "-read");
        reader.setDaemon(true);
    }

    String clientName() { return clientName; }

    /** The connection's protocol version (0 before HELLO). */
    int version() { return version; }

    /** The version frames to this client carry: version 1 until HELLO_OK (as every version-1 server). */
    int wireVersion() {
        int v = version;
        return v == 0 ? Protocol.VERSION : v;
    }

    /** {@code m} as a frame of this connection's version. */
    byte[] encode(Messages.Message m, int requestId) { return Frame.encode(m, requestId, wireVersion()); }

    /** "pid 42 uid 1000 'worker'": who this is, for lease holders and logs. */
    String describe() {
        String d = described;
        return d != null ? d : "pid " + peer.pid() + " uid " + peer.uid() + (clientName.isEmpty() ? "" : " '" + clientName + "'");
    }

    /** {@link #describe()} made once at HELLO (the client's name is fixed from then on): every ATTACH names its holder with it. */
    private volatile String described;

    void start() {
        out.start();
        Runnable seam = beforeReaderStart;
        if (seam != null) seam.run();
        reader.start();
    }

    /** Test seam: run by {@link #start} after the sender started, before the reader starts (tests throw there). Null: nothing. */
    static volatile Runnable beforeReaderStart;

    boolean helloDone() { return helloDone; }

    long lastFrameNanos() { return lastFrameNanos; }

    boolean holdsLeases() { return !leases.isEmpty(); }

    boolean isEnding() { return ending; }

    /** True once the connection has ended: its threads are done or leaving, the server no longer serves it. */
    boolean hasEnded() { return ended; }

    /**
     * The watchdog's second step, {@link #WRITER_GRACE_MILLIS} after {@link #timeOut}: the
     * writer ends by itself once it has sent the TIMEOUT (it then closes the socket, which
     * ends the reader), but a client that does not read keeps it blocked in {@code sendmsg},
     * and the reader in {@code recvmsg}, for as long as the client stays connected. Shutting
     * the socket down wakes both (PROTOCOL.md section 6: the server "shuts the socket down if
     * the client does not read"), and the reader ends the connection. Never blocks.
     */
    void cutIfStillSending() {
        if (out.isAlive()) socket.shutdown();
    }

    /**
     * Ends a connection that did not speak in time (called by the {@link IdleWatchdog}), unless
     * it now holds a lease or a frame arrived since the watchdog read {@code seenLastFrame}
     * (then false: nothing done, the watchdog looks again). Otherwise marks it ending (from
     * then on an ATTACH gets no lease and no reply of its own), queues an ERROR {@code TIMEOUT}
     * (request id 0) as the connection's last frame and lets the writer send it and close the
     * socket, which wakes the reader, which ends the connection and reports the timeout to the
     * listeners (on the reader's thread, like every other event of the connection). Never blocks.
     */
    boolean timeOut(String why, long seenLastFrame) {
        synchronized (bookkeeping) {
            if (!leases.isEmpty() || lastFrameNanos != seenLastFrame || ending) return false;
            ending = true;
            timeoutReason = why; // reported by the reader in end(): listeners never run on the watchdog
        }
        // One step: a reply the reader queues meanwhile goes before this TIMEOUT, never after.
        out.offerLast(new SendQueue.Item(encode(new Messages.Error(ErrorCode.TIMEOUT, why), 0), null, null));
        return true;
    }

    /**
     * Records a lease unless the connection is ending (then false, nothing recorded: the
     * caller sends no reply, the connection's TIMEOUT answers). Called by the reader, under the
     * publication's monitor.
     */
    boolean addLeaseUnlessEnding(long leaseId, Publication.Lease lease) {
        synchronized (bookkeeping) {
            if (ending) return false;
            leases.put(leaseId, lease);
            return true;
        }
    }

    private void run() {
        try {
            for (;;) {
                Frame f;
                try {
                    int v = version;
                    f = v == 0 ? FrameIO.read(socket, Protocol.VERSION, server.maxProtocolVersion())
                            : FrameIO.read(socket, v);
                    lastFrameNanos = System.nanoTime();
                } catch (ProtocolException e) {
                    lastFrameNanos = System.nanoTime();
                    if (e.frameType == FrameType.ERROR) {
                        // An ERROR whose header is trusted is never answered, even a malformed
                        // one; one that broke the stream (too many fds) ends the connection unanswered.
                        server.fireError(this, e.code(), "a malformed ERROR from the client (not answered"
                                + (e.fatal() ? "; closing the connection" : "") + "): " + e.getMessage(), false);
                        if (e.fatal()) break;
                        continue;
                    }
                    server.fireError(this, e.code(), e.getMessage(), false);
                    reply(e.requestId(), e.code(), e.getMessage());
                    if (e.fatal()) break;
                    continue;
                } catch (IOException e) {
                    break; // closed, reset: the connection is over
                }
                if (f == null) break;
                try (f) {
                    handle(f);
                } catch (RuntimeException e) {
                    server.log(System.Logger.Level.WARNING, "connection " + id + " (" + peer + "): " + f.type
                            + " failed: " + e, e);
                    reply(f.requestId, ErrorCode.INTERNAL, f.type + " failed in the server: " + e);
                }
                sendUnsentNotices();
            }
        } catch (Throwable t) {
            server.log(System.Logger.Level.ERROR, "connection " + id + " (" + peer + ") reader failed: " + t, t);
        } finally {
            end();
        }
    }

    /**
     * Ends the connection in the order that keeps fds and leases consistent: no frame that
     * carries fds is sent once the connection is ending ({@link SendQueue#finish()} discards
     * them, closing their fds); the writer is given a bounded time to send the fd-less tail
     * (a fatal ERROR, say), and if the peer does not read, the socket is closed under it,
     * after which nothing more can be sent. Only then are the leases released: every fd the
     * client can still read was sent while its lease was held, and the end of stream follows.
     */
    private void end() {
        synchronized (bookkeeping) {
            ending = true;
        }
        String timedOut = timeoutReason;
        if (timedOut != null) server.fireError(this, ErrorCode.TIMEOUT, timedOut, false);
        out.finish();
        boolean interrupted = false;
        try {
            out.join(WRITER_GRACE_MILLIS);
        } catch (InterruptedException e) {
            interrupted = true;
        }
        if (out.isAlive()) socket.close(); // wakes the writer; no byte can be sent after this
        try {
            out.join(WRITER_GRACE_MILLIS); // its drain closes the fds of what was never sent
        } catch (InterruptedException e) {
            interrupted = true;
        }
        try {
            server.releaseLeases(this);
        } finally { // whatever a lease's end threw, the connection is gone
            ended = true;
            server.connectionEnded(this);
        }
        if (interrupted) Thread.currentThread().interrupt();
    }

    private void handle(Frame f) {
        if (f.type == FrameType.ERROR) {
            Messages.Error e = (Messages.Error) f.message;
            ErrorCode code = e.errorCode();
            server.fireError(this, code, e.message() + (code == null ? " (code " + e.code() + ")" : ""), true);
            return; // never answer an ERROR with an ERROR
        }
        if (!f.type.fromClient()) {
            refuse(f.requestId, ErrorCode.UNEXPECTED_FRAME, f.type + " is sent by servers, not clients" + fdNote(f));
            return;
        }
        if (f.requestId == 0) {
            refuse(0, ErrorCode.BAD_REQUEST_ID, f.type + " with request id 0 (expected: a non-zero id; 0 is reserved "
                    + "for frames that answer nothing)");
            return;
        }
        if (f.type == FrameType.HELLO) {
            if (helloDone) {
                refuse(f.requestId, ErrorCode.UNEXPECTED_FRAME, "HELLO was already sent on this connection");
                return;
            }
            if (f.version >= Protocol.VERSION_2) {
                server.ensureReleaseNotices();
                ids = new ConnectionIds(server.maxIdsPerConnection());
            }
            version = f.version;
            helloDone = true;
            clientName = ((Messages.Hello) f.message).clientName();
            described = describe();
            send(f.requestId, new Messages.HelloOk(version, Protocol.MAX_FDS_PER_FRAME));
            return;
        }
        if (!helloDone) {
            refuse(f.requestId, ErrorCode.UNEXPECTED_FRAME, f.type + " before HELLO (expected: HELLO first)");
            return;
        }
        switch (f.type) {
            case ATTACH -> server.attach(this, f.requestId, ((Messages.Attach) f.message).name());
            case RELEASE -> server.release(this, f.requestId, ((Messages.Release) f.message).leaseId());
            case FORGET -> server.forget(this, f.requestId, ((Messages.Forget) f.message).ids());
            default -> refuse(f.requestId, ErrorCode.UNEXPECTED_FRAME, f.type + " is not a request");
        }
    }

    private static String fdNote(Frame f) {
        int n = f.fdCount();
        return n == 0 ? "" : "; closed the " + n + " fds it carried";
    }

    /**
     * Answers a bad frame caught after it parsed (direction, request id, state: PROTOCOL.md
     * section 4): the listeners hear it ({@link SharingListener#error}), as they hear one the
     * frame reader refused, then the ERROR is queued.
     */
    private void refuse(int requestId, ErrorCode code, String message) {
        server.fireError(this, code, message, false);
        reply(requestId, code, message);
    }

    /** Queues an ERROR reply (waits for room). */
    void reply(int requestId, ErrorCode code, String message) {
        send(requestId, new Messages.Error(code, message));
    }

    /** Queues a reply without fds (waits for room). */
    void send(int requestId, Messages.Message m) {
        out.put(new SendQueue.Item(encode(m, requestId), null, null));
    }

    /**
     * The producer released allocations this connection holds (ids in {@code evicted}): offers
     * the EVICT frames without blocking (the release notice runs on the core's thread
     * {@code cuvmm-release-notices}, which must not block). What finds no room is parked and
     * offered again as soon as room frees: the writer offers parked ids after each frame it
     * takes ({@link SendQueue#afterTake}), and the reader sends them after its next frame; so
     * a client that reads but never sends still gets every EVICT.
     */
    void evict(long[] evicted) {
        for (long e : evicted) unsentEvicts.add(e);
        // Parked first, then offered: a writer that took a frame before the park finds room
        // here; one that takes after it sees the parked ids (afterTake).
        offerUnsentNotices();
    }

    /**
     * The owner withdrew {@code name}, on which this connection holds lease {@code leaseId}:
     * offers its DROP without blocking (unpublish never waits for a client). What finds no
     * room is parked, as EVICTs are, and offered again as soon as room frees (an independent
     * probe lost 1 DROP in 500 to a queue full of replies while its client read all along).
     * A parked DROP whose lease is released meanwhile is not sent. False when the connection
     * is ending (nothing more will be sent to it).
     */
    boolean drop(long leaseId, String name) {
        unsentDrops.add(new Messages.Drop(leaseId, name));
        offerUnsentNotices();
        return !out.isDead() && !out.isFinishing();
    }

    /** Offers the parked DROPs and EVICT ids without blocking; what finds no room stays parked. Any thread. */
    private void offerUnsentNotices() {
        offerUnsentDrops();
        offerUnsentEvicts();
    }

    /** Test seam: run when a parked DROP's offer was refused, before it is parked again. Null: nothing. */
    static volatile Runnable afterNoticeRefused;

    /** Test seam: run after a DROP's lease was found held, right before the DROP is offered. Null: nothing. */
    static volatile Runnable beforeDropOffered;

    private void offerUnsentDrops() {
        Messages.Drop d;
        while ((d = unsentDrops.poll()) != null) {
            Publication.Lease lease = leases.get(d.leaseId());
            if (lease == null) continue; // released meanwhile: nothing to tell
            Runnable before = beforeDropOffered;
            if (before != null) before.run();
            // offer, not tryOffer (see offerUnsentEvicts); the refused item carries no fd.
            if (!out.offer(dropItem(d, lease))) {
                Runnable seam = afterNoticeRefused;
                if (seam != null) seam.run();
                unsentDrops.add(d); // no room (or the writer is gone): parked again
                // Room may have freed while it was out of the list (the writer's looks after its
                // takes found nothing): look again, or it would wait for the client's next frame
                // (a review found it stranded so, the client waiting for it).
                if (!out.hasRoom()) return;
            }
        }
    }

    private void offerUnsentEvicts() {
        while (!unsentEvicts.isEmpty()) {
            java.util.List<Long> batch = new java.util.ArrayList<>();
            Long e;
            while (batch.size() < Protocol.MAX_IDS_PER_FRAME && (e = unsentEvicts.poll()) != null) batch.add(e);
            if (batch.isEmpty()) return;
            long[] part = batch.stream().mapToLong(Long::longValue).toArray();
            // offer, not tryOffer: it wakes the sender thread when no writer holds the token
            // (tryOffer leaves that to a flush() this thread must not make). A refused item
            // carries no fd, so its release closes nothing.
            if (!out.offer(new SendQueue.Item(encode(new Messages.Evict(part), 0), null, null))) {
                unsentEvicts.addAll(batch); // no room (or the writer is gone): parked again
                if (!out.hasRoom()) return; // else room freed while the batch was out: again (as DROPs)
            }
        }
    }

    /**
     * The DROP of {@code lease}, sent only once the lease's DESCRIPTOR has left: it is queued
     * behind it, but an ending connection discards a DESCRIPTOR still queued (no fd once the
     * connection ends) and still sends fd-less frames, and a DROP must never name a lease the
     * client did not get (PROTOCOL.md section 5: "at any time after the DESCRIPTOR of their
     * lease"; an independent probe read one when the server closed right after an unpublish).
     * Nor after the RELEASED of its lease: a DROP offered by an unpublish that found the lease
     * held just before the client's RELEASE ended it would be queued behind that RELEASED; the
     * writer skips it ({@link Publication.Lease#dropWanted}, asked as it takes the frame, sees
     * the release, which happened before the RELEASED was queued).
     */
    private SendQueue.Item dropItem(Messages.Drop d, Publication.Lease lease) {
        return new SendQueue.Item(encode(d, 0), null, null, null, lease::dropWanted);
    }

    /** On the reader: sends the DROPs and EVICT ids that could not be queued at once (waits for room, like a reply). */
    private void sendUnsentNotices() {
        Messages.Drop d;
        while ((d = unsentDrops.poll()) != null) {
            Publication.Lease lease = leases.get(d.leaseId());
            if (lease != null) out.put(dropItem(d, lease));
        }
        if (unsentEvicts.isEmpty()) return;
        java.util.List<Long> batch = new java.util.ArrayList<>();
        Long e;
        while ((e = unsentEvicts.poll()) != null) {
            batch.add(e);
            if (batch.size() == Protocol.MAX_IDS_PER_FRAME || unsentEvicts.isEmpty()) {
                long[] part = batch.stream().mapToLong(Long::longValue).toArray();
                batch.clear();
                out.put(new SendQueue.Item(encode(new Messages.Evict(part), 0), null, null));
            }
        }
    }

    /** Closes the socket: the reader and the writer wake and end. */
    void close() { socket.close(); }

    /** Waits for the reader and the writer until {@code deadline} ({@link System#nanoTime()}). */
    void joinUntil(long deadline) throws InterruptedException {
        SharingServer.joinUntil(reader, deadline);
        out.joinUntil(deadline);
    }

    @Override
    public String toString() { return "connection " + id + " (" + peer + (clientName.isEmpty() ? "" : ", " + clientName) + ")"; }
}
