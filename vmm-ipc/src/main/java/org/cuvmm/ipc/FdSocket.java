package org.cuvmm.ipc;

import java.io.Closeable;
import java.io.File;
import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Objects;

import jnr.unixsocket.Credentials;
import jnr.unixsocket.UnixSocketAddress;
import jnr.unixsocket.UnixSocketChannel;
import jnr.unixsocket.UnixSocketOptions;
import org.cuvmm.internal.Checks;

/**
 * A connected Unix-domain stream socket that sends and receives bytes together with file
 * descriptors ({@code SCM_RIGHTS}): the raw-fd transport, for callers who bring their own
 * protocol. {@link SharingServer} and {@link SharingClient} speak the sharing protocol over it.
 *
 * <ul>
 * <li>{@link #send(byte[], int[])}: the bytes and the fds go on one {@code sendmsg}; the
 *     kernel duplicates the fds into the receiver, the caller keeps (and closes) its own.</li>
 * <li>{@link #receive(int)}: exactly {@code length} bytes and every fd that arrived with
 *     them, as a {@link ReceivedMessage} that owns the fds. Received with
 *     {@code MSG_CMSG_CLOEXEC}; fds counted from the control message's data length; when the
 *     kernel dropped fds ({@code MSG_CTRUNC}) or more arrived than allowed, every fd received
 *     is closed and {@link FdTransferException} is thrown. The limit is checked after every
 *     {@code recvmsg}, not once the bytes are complete.</li>
 * </ul>
 *
 * <p>A stream socket keeps no message boundaries: the fds of one {@code send} arrive with
 * the first of its bytes, so a receiver should read exactly the lengths its protocol
 * defines. Thread-safe: one sender and one receiver may work at the same time; {@link
 * #close()} from any thread wakes both.
 *
 * <p>Inside this package, {@link FrameIO} reads sharing-protocol frames through a frame
 * buffer kept here (docs/PROTOCOL.md section 1, reading ahead): at a frame boundary one
 * {@code recvmsg} takes whatever has arrived, up to the largest frame, and the frames after
 * the first wait in the buffer (a frame found whole there costs no {@code recvmsg}). {@link
 * #receive(int)} takes bytes left in that buffer first (with the fds of a frame that starts
 * within them), then reads exactly the rest: so a raw receive after frame reads (a reader
 * draining a connection) sees the stream in order. A socket used only through {@link
 * #receive} never buffers anything.
 *
 * <p>Inside this package too, a socket can defer the consumption of what it reads ({@link
 * #deferConsumption}; {@link SharingClient} and {@link SharingServer} turn it on for their
 * connections; the system property {@value #DEFER_PROPERTY}{@code =false} turns it off, and
 * so does a kernel whose peek offset fails a probe, {@link #peekOffsetWorks}): each {@code
 * recvmsg} then only peeks ({@code MSG_PEEK}, with {@code SO_PEEK_OFF} moving past what was
 * read), and what was read is taken off the kernel's queue later by {@code recvmsg} calls of
 * its own (16 KiB each, usually one): after {@value #DEFER_MAX_READS} reads or {@value
 * #DEFER_MAX_BYTES} bytes, at once after a read that brought fds (or lost some), whenever a
 * wait for bytes ends with nothing or a signal interrupts it, and before the socket is
 * closed. Why: taking bytes off the queue frees the sender's socket memory, and the kernel
 * then wakes every thread waiting on the sender's socket, including the sender's reader
 * waiting for its next frame, which finds nothing and sleeps again (a wasted pair of context
 * switches per read when both sides share a CPU; an interrupt to another CPU otherwise).
 * Deferred, that happens once per {@value #DEFER_MAX_READS} reads. The bytes and fds read are
 * the same either way; see docs/VMM_DESIGN.md (deferred consumption) and docs/PROTOCOL.md
 * section 1 for what a peer can see.
 */
public final class FdSocket implements Closeable {
    /** Longest socket path: {@code sun_path} is 108 bytes with its terminating NUL. */
    static final int MAX_PATH_BYTES = 107;
    private static final int IO_CHUNK = 64 * 1024 + Protocol.HEADER_SIZE;

    private final UnixSocketChannel channel;
    private final int fd;
    private final FdGuard guard;
    private final Object sendLock = new Object();
    private final Object receiveLock = new Object();
    private NativeMsg sendMsg;    // guarded by sendLock
    private NativeMsg receiveMsg; // guarded by receiveLock
    /**
     * The fds of the receive in progress, reused by every receive (guarded by receiveLock,
     * emptied at the start of each): a receive allocates only what it returns.
     */
    private final IntList receivedFds = new IntList();
    /** Whether the kernel dropped fds (MSG_CTRUNC) in the receive in progress; guarded by receiveLock. */
    private boolean truncated;
    /**
     * What the frame reader ({@link #receiveFrameHeader}) received past the frame it returned:
     * bytes in {@link #receiveMsg}'s buffer, and the fds of a later frame. Guarded by
     * receiveLock; its fds are closed by the guard's release (the last call out after close).
     */
    private final FrameBuffer frames = new FrameBuffer();
    /**
     * The receive slice in ms ({@code SO_RCVTIMEO}), 0 when none: {@link #setReceiveSlice}.
     * Written once, before the socket is shared.
     */
    private volatile int sliceMillis;

    /**
     * The system property that turns deferred consumption off ({@code false}); read by each
     * {@link #deferConsumptionAllowed} (SharingClient.Builder.build, SharingServer.Builder.build
     * and each connection the server admits) and {@link #deferConsumption}.
     */
    static final String DEFER_PROPERTY = "cuvmm.ipc.deferConsumption";
    /** Reads peeked before their bytes are taken off the queue. */
    static final int DEFER_MAX_READS = 16;
    /** Bytes peeked before they are taken off the queue. */
    static final int DEFER_MAX_BYTES = 1024;
    /** Room of one consuming read (a larger backlog takes several). */
    private static final int CONSUME_CHUNK = 16 * 1024;
    /**
     * Deferred consumption (see the class comment): on once {@link #deferConsumption} succeeded;
     * the bytes and reads peeked and not yet taken off the kernel's queue; the buffer the
     * consuming reads copy into (their bytes were read already and are dropped). Guarded by
     * receiveLock ({@code deferring} is also read without it, by {@link #isDeferringConsumption});
     * the guard's release takes the lock after the last call out, to take the bytes off before
     * the fd is closed.
     */
    private volatile boolean deferring;
    private int deferredBytes;
    private int deferredReads;
    private NativeMsg consumeMsg;
    /**
     * Set when taking peeked bytes off failed: every later {@code recvmsg} fails, and the close
     * does not drain (guarded by receiveLock).
     */
    private boolean outOfStep;
    /**
     * recvmsg calls and read polls ({@code POLLIN}) made on this socket (tests and the
     * benchmark count them; a bounded send's wait for room, {@code POLLOUT}, is not counted).
     * Written only under {@link #receiveLock} (one writer at a time), read by anyone: plain counters
     * with opaque stores, no atomic read-modify-write per call (issue 11).
     */
    private long recvmsgCalls;
    private long pollCalls;
    // recvmsg calls that read nothing (EAGAIN: a slice passed, or nothing there; EINTR ending a wait).
    private long recvmsgEmpty;
    // recvmsg calls that took deferred bytes off the queue (deferConsumption); not in recvmsgCalls.
    private long consumeCalls;
    private static final java.lang.invoke.VarHandle RECVMSG_CALLS;
    private static final java.lang.invoke.VarHandle CONSUME_CALLS;
    private static final java.lang.invoke.VarHandle POLL_CALLS;
    private static final java.lang.invoke.VarHandle RECVMSG_EMPTY;

    static {
        try {
            java.lang.invoke.MethodHandles.Lookup l = java.lang.invoke.MethodHandles.lookup();
            RECVMSG_CALLS = l.findVarHandle(FdSocket.class, "recvmsgCalls", long.class);
            POLL_CALLS = l.findVarHandle(FdSocket.class, "pollCalls", long.class);
            RECVMSG_EMPTY = l.findVarHandle(FdSocket.class, "recvmsgEmpty", long.class);
            CONSUME_CALLS = l.findVarHandle(FdSocket.class, "consumeCalls", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** Adds one to a counter of {@link #ioCalls()}; the caller holds {@link #receiveLock}. */
    private void count(java.lang.invoke.VarHandle counter) {
        counter.setOpaque(this, (long) counter.getOpaque(this) + 1);
    }

    FdSocket(UnixSocketChannel channel) {
        // Bound now, while this socket's own fd shows fds are there to be had: bound at its
        // first use, at the open-file limit, the binding could not load its class
        // (ErrorPathClasses says why) and the client's reader failed.
        NativeIo.bindPollEarly();
        this.channel = channel;
        this.fd = channel.getFD();
        // The fd is closed directly: jnr's channel.close() skips close(2) when its own
        // shutdown fails (as it may after ours), leaking the fd.
        // The frame buffer's fds are closed with the socket, when no call is inside any more.
        this.guard = new FdGuard(() -> jnr.enxio.channels.Native.shutdown(fd, NativeIo.SHUT_RDWR),
                () -> {
                    try {
                        consumeDeferredBeforeClose();
                        frames.closeFds();
                    } finally {
                        NativeIo.closeQuietly(fd);
                    }
                });
    }

    /**
     * Connects to the Unix-domain socket at {@code path}.
     *
     * @throws IllegalArgumentException when the path is longer than a socket path may be
     * @throws IOException when nothing listens there (the message names the path), or when
     *     the first socket of this JVM finds the process at its open-file limit (the native
     *     layer's first load wants 8 free fds, plus one per class-path jar not open yet; the
     *     message names RLIMIT_NOFILE; a later call tries again)
     * @throws UnsupportedOperationException when the native layer (jnr-posix, jnr-ffi, jffi)
     *     cannot load; the message says what to check
     */
    public static FdSocket connect(Path path) throws IOException {
        File file = checkPath(path).toFile();
        NativeIo.load();
        UnixSocketChannel ch;
        try {
            ch = UnixSocketChannel.open();
        } catch (IOException e) {
            throw NativeIo.explainedFdShortage("cannot connect to " + path + ": no socket could be made", e);
        }
        try {
            ch.connect(new UnixSocketAddress(file));
        } catch (IOException e) {
            ch.close();
            throw new IOException("cannot connect to " + path + ": " + e.getMessage() + " " + connectHint(e.getMessage()),
                    e);
        }
        return new FdSocket(ch);
    }

    /**
     * What to check after a refused {@code connect}, by its reason (the text of its
     * {@code errno}, which is jnr-unixsocket's message): the path and the server for ENOENT
     * and ECONNREFUSED; the socket file's mode and group for EACCES and EPERM (a server's file
     * that this user may not open: "check that its server is up" sent users the wrong way).
     */
    static String connectHint(String reason) {
        if ("No such file or directory".equals(reason) || "Connection refused".equals(reason)) {
            return "(expected: the socket file of a running cuvmm server: check the path, and that its server is up; "
                    + "a file left by a server that stopped, or one that is no socket, refuses connections)";
        }
        if ("Permission denied".equals(reason) || "Operation not permitted".equals(reason)) {
            return "(expected: permission to connect, which needs write permission on the socket file and search "
                    + "permission on its directories: check the socket file's mode and group, which its server sets "
                    + "(cuvmm serve --socket-mode and --socket-group; SharingServer.Builder.socketFileMode and "
                    + "socketFileGroup))";
        }
        return "(expected: the socket file of a running cuvmm server)";
    }

    /**
     * A connected pair, for tests and for handing one end to a child process.
     *
     * @throws IOException when {@code socketpair} fails (no fds), or as {@link #connect} for
     *     the first socket of this JVM at the open-file limit
     * @throws UnsupportedOperationException as {@link #connect}
     */
    public static FdSocket[] pair() throws IOException {
        NativeIo.load();
        UnixSocketChannel[] p;
        try {
            p = UnixSocketChannel.pair();
        } catch (IOException e) {
            throw NativeIo.explainedFdShortage("cannot make a socket pair", e);
        }
        return new FdSocket[] {new FdSocket(p[0]), new FdSocket(p[1])};
    }

    static Path checkPath(Path path) {
        Checks.notNull("path", path);
        int bytes = path.toString().getBytes(StandardCharsets.UTF_8).length;
        if (bytes == 0 || bytes > MAX_PATH_BYTES) {
            throw new IllegalArgumentException("path: " + path + " (expected: 1 to " + MAX_PATH_BYTES
                    + " bytes, the limit of a Unix socket path; this one has " + bytes + "; use a shorter directory)");
        }
        return path;
    }

    /** The connected peer as the kernel recorded it ({@code SO_PEERCRED}). */
    public PeerCredentials peerCredentials() throws IOException {
        enter();
        try {
            Credentials c = channel.getOption(UnixSocketOptions.SO_PEERCRED);
            if (c == null) throw new IOException("SO_PEERCRED returned nothing for fd " + fd);
            return new PeerCredentials(c.getPid(), c.getUid(), c.getGid());
        } finally {
            guard.exit();
        }
    }

    /** {@link #send(byte[], int, int, int[])} of all of {@code data}. */
    public void send(byte[] data, int[] fds) throws IOException {
        Checks.notNull("data", data);
        send(data, 0, data.length, fds);
    }

    /**
     * Sends {@code length} bytes of {@code data} from {@code offset}, and {@code fds} on the
     * same {@code sendmsg} (a short send's remainder follows without fds). The caller keeps
     * ownership of {@code fds}: close them when this returns. Blocks until every byte is
     * handed to the kernel.
     *
     * <p>A {@link org.cuvmm.BufferDescriptor}'s fds are plain ints that the garbage collector
     * may close once the descriptor is unreachable: send them as {@code d.useFds(fds ->
     * socket.send(frame, fds))} (or hold {@code d} in try-with-resources around the send),
     * never as {@code send(frame, buffer.exportDescriptor().fds())}.
     *
     * @param fds 0 to 253 open fds, or null
     * @throws IllegalArgumentException for more than 253 fds, a negative fd, or fds with no
     *     byte to carry them
     * @throws ClosedChannelException when this socket is closed
     * @throws IOException when the peer has gone ({@code EPIPE}) or {@code sendmsg} fails (a
     *     bad fd included); the message says which
     */
    public void send(byte[] data, int offset, int length, int[] fds) throws IOException {
        send(data, offset, length, fds, false, 0);
    }

    /**
     * As {@link #send(byte[], int, int, int[])}, but never waiting past {@code deadlineNanos}
     * ({@link System#nanoTime()}) for room in the socket's send buffer: each {@code sendmsg}
     * is non-blocking ({@code MSG_DONTWAIT}) and a full buffer is waited for in {@code poll}
     * ({@code POLLOUT}) until the deadline. For {@link SharingClient}, whose requests must not
     * outlive their timeout when the server stops reading. Package-private.
     *
     * @throws SendTimeoutException the deadline passed with bytes unsent; its {@link
     *     SendTimeoutException#bytesTransferred} says how many went (0: the stream is in step,
     *     the fds did not go; more: the peer has part of a frame, the stream is out of step)
     */
    void send(byte[] data, int offset, int length, int[] fds, long deadlineNanos) throws IOException {
        send(data, offset, length, fds, true, deadlineNanos);
    }

    /**
     * A bounded send ({@link #send(byte[], int, int, int[], long)}) whose deadline passed.
     * Package-private: the client turns it into its own IOException.
     */
    static final class SendTimeoutException extends SocketTimeoutException {
        private static final long serialVersionUID = 1L;

        SendTimeoutException(int sent, int length) {
            super("send: " + sent + " of " + length + " bytes sent when the deadline passed (the peer is not reading: "
                    + "the socket's send buffer stayed full)");
            bytesTransferred = sent;
        }
    }

    private void send(byte[] data, int offset, int length, int[] fds, boolean bounded, long deadlineNanos)
            throws IOException {
        Checks.notNull("data", data);
        Objects.checkFromIndexSize(offset, length, data.length);
        int[] f = fds == null ? ReceivedMessage.NO_FDS : fds; // shared, never written: no array per call
        if (f.length > NativeIo.MAX_FDS_PER_MESSAGE) {
            throw new IllegalArgumentException("fds: " + f.length + " (expected: at most " + NativeIo.MAX_FDS_PER_MESSAGE
                    + " per send, Linux's SCM_MAX_FD)");
        }
        if (f.length > 0 && length == 0) {
            throw new IllegalArgumentException("length: 0 with " + f.length + " fds (expected: at least one byte to "
                    + "carry the fds)");
        }
        for (int x : f) {
            if (x < 0) throw new IllegalArgumentException("fds: " + Arrays.toString(f) + " (expected: open fds, >= 0)");
        }
        if (length == 0) return;
        synchronized (sendLock) {
            enter();
            try {
                int sent = 0;
                boolean first = true;
                NativeMsg io = sendMsg();
                while (sent < length) {
                    int n = Math.min(IO_CHUNK, length - sent);
                    io.data.clear();
                    io.data.put(data, offset + sent, n);
                    // The fds ride on the first sendmsg only: they arrive with its first byte.
                    int control = first && f.length > 0 ? io.writeRights(f) : 0;
                    int r;
                    int errno;
                    do {
                        r = io.sendmsg(fd, n, control, NativeIo.MSG_NOSIGNAL | (bounded ? NativeIo.MSG_DONTWAIT : 0));
                        errno = r < 0 ? -r : 0;
                    } while (r < 0 && errno == NativeIo.EINTR);
                    String call = control > 0 ? "sendmsg" : "send"; // NativeMsg.sendmsg: send with no fds
                    if (r < 0 && errno == NativeIo.EAGAIN && bounded) { // the buffer is full: wait for room
                        long left = deadlineNanos - System.nanoTime();
                        if (left <= 0) throw new SendTimeoutException(sent, length);
                        poll(NativeIo.POLLOUT, pollMillis(left)); // ready or not: send or check again
                        continue; // the same piece again (its fds too, if it was the first)
                    }
                    if (r < 0) {
                        if (guard.isClosed()) throw new ClosedChannelException();
                        if (errno == NativeIo.EPIPE || errno == NativeIo.ECONNRESET) {
                            throw new IOException(call + ": the peer closed the connection (" + NativeIo.strerror(errno) + ")");
                        }
                        if (errno == NativeIo.EBADF && first && f.length > 0) {
                            throw new IOException(call + ": " + NativeIo.strerror(errno) + "; one of the fds "
                                    + Arrays.toString(f) + " is not open");
                        }
                        throw new IOException(call + ": " + NativeIo.strerror(errno));
                    }
                    if (r == 0 && n > 0) throw new IOException(call + " sent nothing");
                    sent += r;
                    first = false;
                }
            } finally {
                guard.exit();
            }
        }
    }

    /**
     * One {@code sendmsg} ({@code send} when there are no fds) that never blocks ({@code MSG_DONTWAIT}): the first bytes of
     * {@code data} that fit in the socket's send buffer now, with {@code fds} riding on them.
     * Returns how many bytes went: all of them, fewer (the fds went with the first), or 0
     * when the buffer is full or {@code data} is longer than one call sends (nothing went,
     * fds included). The caller keeps ownership of {@code fds}. For {@link SendQueue}'s
     * direct write; the caller sends the rest with {@link #send(byte[], int, int, int[])}.
     *
     * @throws ClosedChannelException when this socket is closed
     * @throws IOException as {@link #send(byte[], int, int, int[])}
     */
    int sendNow(byte[] data, int[] fds) throws IOException {
        int length = data.length;
        if (length == 0 || length > IO_CHUNK || (fds != null && fds.length > NativeIo.MAX_FDS_PER_MESSAGE)) return 0;
        synchronized (sendLock) {
            enter();
            try {
                NativeMsg io = sendMsg();
                io.data.clear();
                io.data.put(data, 0, length);
                int control = fds != null && fds.length > 0 ? io.writeRights(fds) : 0;
                int r;
                int errno;
                do {
                    r = io.sendmsg(fd, length, control, NativeIo.MSG_NOSIGNAL | NativeIo.MSG_DONTWAIT);
                    errno = r < 0 ? -r : 0;
                } while (r < 0 && errno == NativeIo.EINTR);
                if (r >= 0) return r;
                if (errno == NativeIo.EAGAIN) return 0;
                if (guard.isClosed()) throw new ClosedChannelException();
                String call = control > 0 ? "sendmsg" : "send"; // NativeMsg.sendmsg: send with no fds
                if (errno == NativeIo.EPIPE || errno == NativeIo.ECONNRESET) {
                    throw new IOException(call + ": the peer closed the connection (" + NativeIo.strerror(errno) + ")");
                }
                throw new IOException(call + ": " + NativeIo.strerror(errno));
            } finally {
                guard.exit();
            }
        }
    }

    /** {@link #receive(int, int)} allowing up to 253 fds. */
    public ReceivedMessage receive(int length) throws IOException {
        return receive(length, NativeIo.MAX_FDS_PER_MESSAGE);
    }

    /**
     * Reads exactly {@code length} bytes (fewer only at end of stream: see {@link
     * ReceivedMessage#endOfStream()}), with every fd that arrives meanwhile. Never reads past
     * them. Bytes that this package's frame reader received ahead are taken first (see the
     * class comment); a plain raw-fd socket has none.
     *
     * <p>The fd limit is enforced as fds arrive: of the fds that arrive during this call,
     * this process never holds more than {@code maxFds} + 2, however the peer spreads them over its sends. When more than {@code
     * maxFds} arrive before all {@code length} bytes were read, reading stops at once: the
     * exception holds the bytes read so far and {@link FdTransferException#streamInStep()} is
     * false; close the connection (the rest of the message is still unread).
     *
     * @param maxFds how many fds the caller accepts, 0 to 253
     * @throws FdTransferException when the kernel dropped fds ({@code MSG_CTRUNC}) or more than
     *     {@code maxFds} arrived: every fd received is closed, the bytes read are in the
     *     exception
     * @throws ClosedChannelException when this socket was closed
     * @throws IOException when {@code recvmsg} fails; every fd received is closed
     */
    public ReceivedMessage receive(int length, int maxFds) throws IOException {
        return checkedReceive(length, maxFds, false, 0, false);
    }

    /**
     * As {@link #receive(int, int)}, but never waiting past {@code deadlineNanos} ({@link
     * System#nanoTime()}) for bytes. With a receive slice ({@link #setReceiveSlice}) and at
     * least two slices left before the deadline, each {@code recvmsg} blocks (one slice at
     * most: {@code EAGAIN} then means "slice over", and the deadline is checked again);
     * otherwise each {@code recvmsg} is non-blocking ({@code MSG_DONTWAIT}) and when nothing
     * is there this waits in {@code poll} until the deadline. Either way the receive lock is
     * held across the wait, as a blocking receive does. For {@link SharingClient}'s leading
     * caller, which must not block past its request's timeout when the server stops in the
     * middle of a frame. Package-private.
     *
     * @throws SocketTimeoutException the deadline passed with bytes missing: every fd received
     *     is closed; {@link SocketTimeoutException#bytesTransferred} says how many bytes were
     *     read (consumed: the stream is out of step unless it is 0)
     */
    ReceivedMessage receive(int length, int maxFds, long deadlineNanos) throws IOException {
        return receive(length, maxFds, deadlineNanos, false);
    }

    /**
     * As {@link #receive(int, int, long)}; when {@code idleSlice} is true and no byte at all
     * arrives within one slice (the receive slice, or 20 ms on a socket without one), this
     * stops there: {@link SocketTimeoutException} with {@code bytesTransferred} 0 (nothing
     * consumed, the stream in step). For a leading caller waiting for the next frame: it
     * re-checks its deadline, an interrupt and the connection between slices, without a
     * separate {@code poll} before each frame. Package-private.
     */
    ReceivedMessage receive(int length, int maxFds, long deadlineNanos, boolean idleSlice) throws IOException {
        return checkedReceive(length, maxFds, true, deadlineNanos, idleSlice);
    }

    /**
     * The 16-byte header of the next frame, with every fd its frame has so far (for {@link
     * FrameIO}; {@code maxFds} is the frame's limit, 253), bounded or not as {@link
     * #receive(int, int, long, boolean)}. When fewer than 16 bytes are buffered and no fd is
     * held for the frame, each {@code recvmsg} reads ahead: up to the largest frame, with room
     * for 254 fds; the fds of such a read go to the last frame starting in it ({@link
     * FrameBuffer#ownerOfRead}): to this frame (counted against its limit now) or to a later
     * one, which keeps them in the buffer (more than 253 would be closed at once and refuse that
     * frame when it is read, {@link FdTransferException} TOO_MANY_FDS: a guard only, since on
     * Linux one read brings the fds of one {@code sendmsg}, 253 at most). Otherwise it reads
     * exactly the header's missing bytes, as {@link #receive(int, int)} does. When the header
     * is complete (magic and length valid) and its whole payload is already in the buffer with
     * no fd of a frame starting inside it, the returned data is the header followed by that
     * payload (taken from the buffer: a frame that arrived whole is read in one call, with no
     * second receive); otherwise it is the 16 header bytes, and the payload is then read with
     * {@link #receive(int, int)}, which takes the buffered bytes first and never reads past the
     * frame. Package-private.
     *
     * <p>{@code nowNanos} is the caller's reading of {@link System#nanoTime()} taken just
     * before (unused unless {@code bounded}): the first {@code recvmsg}'s choice between
     * blocking for a slice and not is made from it instead of a fresh clock read (issue 11:
     * the leading caller reads the clock once per request, not once per layer). Only a
     * caller that cannot have waited meanwhile passes a reading it took earlier: the leading
     * caller holds the read token, so the receive lock is free for it.
     */
    ReceivedMessage receiveFrameHeader(int maxFds, boolean bounded, long deadlineNanos, boolean idleSlice, long nowNanos)
            throws IOException {
        return checkedReceive(Protocol.HEADER_SIZE, maxFds, bounded, deadlineNanos, idleSlice, true, nowNanos);
    }

    /** How many received bytes the frame buffer holds; 0 once closed (tests). */
    int bufferedBytes() {
        synchronized (receiveLock) {
            if (!guard.enter()) return 0;
            try {
                return frames.buffered();
            } finally {
                guard.exit();
            }
        }
    }

    private ReceivedMessage checkedReceive(int length, int maxFds, boolean bounded, long deadlineNanos,
                                           boolean idleSlice) throws IOException {
        return checkedReceive(length, maxFds, bounded, deadlineNanos, idleSlice, false, bounded ? System.nanoTime() : 0);
    }

    /**
     * Checks the arguments, then {@link #receiveExactly} under the receive lock; {@code
     * nowNanos} is the clock as the caller last read it (bounded receives only).
     */
    private ReceivedMessage checkedReceive(int length, int maxFds, boolean bounded, long deadlineNanos,
                                           boolean idleSlice, boolean frameHeader, long nowNanos) throws IOException {
        if (length < 0) throw new IllegalArgumentException("length: " + length + " (expected: >= 0)");
        if (maxFds < 0 || maxFds > NativeIo.MAX_FDS_PER_MESSAGE) {
            throw new IllegalArgumentException("maxFds: " + maxFds + " (expected: 0 to " + NativeIo.MAX_FDS_PER_MESSAGE + ")");
        }
        synchronized (receiveLock) {
            enter();
            try {
                return receiveExactly(length, maxFds, bounded, deadlineNanos, idleSlice, frameHeader, nowNanos);
            } finally {
                guard.exit();
            }
        }
    }

    /**
     * Turns deferred consumption on (see the class comment), before the first receive and
     * after {@link #setReceiveSlice}: the slice bounds how long a reader waits holding peeked
     * bytes (a peer whose socket send buffer they fill could otherwise never send the frame
     * the reader waits for). Returns false, and the socket reads as before, when the system
     * property {@value #DEFER_PROPERTY} is {@code false}, the kernel's peek offset fails its
     * probe ({@link #peekOffsetWorks}) or the kernel refuses {@code SO_PEEK_OFF}. Package-private: {@link SharingClient} and {@link SharingServer} call it.
     *
     * @throws IllegalStateException when no receive slice is set, or a receive was made already
     * @throws IllegalArgumentException when the property is neither {@code true} nor {@code false}
     */
    boolean deferConsumption() throws IOException {
        if (!deferConsumptionAllowed()) return false;
        synchronized (receiveLock) {
            if (sliceMillis <= 0) {
                throw new IllegalStateException("deferred consumption needs a receive slice: setReceiveSlice first");
            }
            if ((long) RECVMSG_CALLS.getOpaque(this) != 0 || frames.buffered() != 0) {
                throw new IllegalStateException("deferred consumption must start before the first receive");
            }
            enter();
            try {
                if (receiveMsg().setIntOption(fd, NativeIo.SOL_SOCKET, NativeIo.SO_PEEK_OFF, 0) != 0) return false;
                deferring = true;
                return true;
            } finally {
                guard.exit();
            }
        }
    }

    /**
     * False when the system property {@value #DEFER_PROPERTY} is {@code false} (read now), or
     * when this kernel's peek offset cannot be trusted ({@link #peekOffsetWorks}).
     *
     * @throws IllegalArgumentException when the property is neither {@code true} nor {@code false}
     */
    static boolean deferConsumptionAllowed() {
        String v = System.getProperty(DEFER_PROPERTY, "true").trim();
        if (v.equalsIgnoreCase("false")) return false;
        if (!v.equalsIgnoreCase("true")) {
            throw new IllegalArgumentException(DEFER_PROPERTY + ": " + v + " (expected: true or false; false reads "
                    + "sharing sockets plainly, consuming each read)");
        }
        return peekOffsetWorks();
    }

    private static volatile Boolean peekOffsetProbe;

    /**
     * Whether a blocking {@code MSG_PEEK} with {@code SO_PEEK_OFF} at the end of the queue
     * waits for new bytes here, probed on a socket pair of its own until it gives an answer
     * (once per JVM; it waits one receive timeout of 1 ms, which the kernel rounds up to a
     * clock tick or two). A probe that could not be made (no fds left, no memory) answers
     * false for this call only. Linux before commit 7bf3a476ce43 (2025-11; backported to some stable series)
     * lost the offset when such a peek slept, and after the wait read from the head of the
     * queue again: bytes already read came back, after a receive slice or with the new
     * bytes. The probe peeks one byte, then peeks again with a 1 ms receive timeout: a fixed
     * kernel answers {@code EAGAIN}, an affected one the same byte. Then two more bytes, sent
     * one at a time, must come back in one non-blocking peek (an offset applied across
     * segments, which some 4.3-4.4 kernels got wrong). False also when the kernel refuses
     * {@code SO_PEEK_OFF} or answers anything else.
     */
    static boolean peekOffsetWorks() {
        Boolean r = peekOffsetProbe;
        if (r == null) {
            synchronized (FdSocket.class) {
                r = peekOffsetProbe;
                if (r == null) {
                    r = probePeekOffset();
                    if (r != null) peekOffsetProbe = r;
                }
            }
            if (r == null) return false;
        }
        return r;
    }

    /** The kernel's answer, or null when the probe could not be made (an fd, memory). */
    private static Boolean probePeekOffset() {
        FdSocket[] p;
        try {
            p = pair();
        } catch (IOException | RuntimeException | Error e) {
            return null;
        }
        try {
            NativeMsg m = new NativeMsg(16);
            int fd = p[1].fd;
            if (m.setIntOption(fd, NativeIo.SOL_SOCKET, NativeIo.SO_PEEK_OFF, 0) != 0) return false;
            p[1].channel.setOption(UnixSocketOptions.SO_RCVTIMEO, 1);
            p[0].send(new byte[] {7}, null);
            if (peekRetrying(m, fd, 1, 0) != 1 || m.data.get(0) != 7) return false;
            if (peekRetrying(m, fd, 1, 0) != -NativeIo.EAGAIN) return false; // an affected kernel reads the 7 again
            p[0].send(new byte[] {8}, null);
            p[0].send(new byte[] {9}, null);
            return peekRetrying(m, fd, 2, NativeIo.MSG_DONTWAIT) == 2 && m.data.get(0) == 8 && m.data.get(1) == 9;
        } catch (IOException | RuntimeException | Error e) {
            return null;
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    private static int peekRetrying(NativeMsg m, int fd, int length, int flags) {
        int r;
        do {
            r = m.recvmsg(fd, length, 0, NativeIo.MSG_PEEK | flags);
        } while (r == -NativeIo.EINTR);
        return r;
    }

    /** Whether reads on this socket peek and consume later ({@link #deferConsumption}). */
    boolean isDeferringConsumption() {
        return deferring; // not under receiveLock: an idle reader holds it while it waits
    }

    /**
     * Takes the peeked bytes off the kernel's queue ({@link #deferConsumption}), in
     * non-blocking {@code recvmsg} calls with no control area: the fds those bytes carried
     * were installed by the peek that read them, and the kernel releases its own references
     * of them without installing anything. The caller holds receiveLock and is inside the
     * guard (or is the guard's release). On failure the stream is out of step: the caller's
     * IOException ends the connection.
     */
    private void consumeDeferred() throws IOException {
        NativeMsg m = consumeMsg;
        if (m == null) consumeMsg = m = new NativeMsg(CONSUME_CHUNK);
        while (deferredBytes > 0) {
            count(CONSUME_CALLS);
            int r = m.recvmsg(fd, 0, Math.min(deferredBytes, CONSUME_CHUNK), 0, NativeIo.MSG_DONTWAIT);
            if (r < 0 && -r == NativeIo.EINTR) continue;
            if (r <= 0) {
                int left = deferredBytes;
                outOfStep = true; // the kernel still holds bytes this socket already returned
                throw new IOException("recvmsg taking " + left + " bytes already read (MSG_PEEK) off the socket: "
                        + (r == 0 ? "end of stream" : NativeIo.strerror(-r)) + "; the connection is out of step");
            }
            deferredBytes -= r;
        }
        deferredReads = 0;
    }

    /**
     * The guard's release, before the fd is closed: what was peeked is taken off the queue,
     * because closing a socket with unread bytes makes the peer's next read fail with {@code
     * ECONNRESET}, where it would otherwise read the end of the stream. Never throws.
     */
    private void consumeDeferredBeforeClose() {
        synchronized (receiveLock) {
            if (deferredBytes == 0 || outOfStep) return;
            try {
                consumeDeferred();
            } catch (IOException | RuntimeException e) {
                // The fd is closed next either way; the peer then reads ECONNRESET.
            }
        }
    }

    /**
     * Sets {@code SO_RCVTIMEO} to {@code millis} (once, before the socket is shared): a
     * blocking {@code recvmsg} then returns {@code EAGAIN} after one slice with nothing read.
     * A bounded receive ({@link #receive(int, int, long)}) then waits for bytes in a blocking
     * {@code recvmsg}, one slice at a time, instead of a {@code poll} then a {@code recvmsg};
     * an unbounded receive ({@link #receive(int, int)}) that meets the end of a slice waits in
     * one {@code poll} with no timeout, then reads again (so an idle unbounded reader makes
     * one {@code recvmsg} and one {@code poll}, then sleeps: no periodic wake-up).
     * Package-private: {@link SharingClient} uses it.
     */
    void setReceiveSlice(int millis) throws IOException {
        if (millis <= 0) throw new IllegalArgumentException("millis: " + millis + " (expected: > 0)");
        enter();
        try {
            channel.setOption(UnixSocketOptions.SO_RCVTIMEO, millis);
        } finally {
            guard.exit();
        }
        sliceMillis = millis;
    }

    /**
     * {recvmsg calls, poll calls, recvmsg calls that read nothing, recvmsg calls that took
     * deferred bytes off the queue} made on this socket so far (tests, the benchmark). The
     * first counts reads (peeks when deferring), not the consuming calls.
     */
    long[] ioCalls() {
        return new long[] {(long) RECVMSG_CALLS.getOpaque(this), (long) POLL_CALLS.getOpaque(this),
                (long) RECVMSG_EMPTY.getOpaque(this), (long) CONSUME_CALLS.getOpaque(this)};
    }

    /**
     * The fd limit is enforced as the fds arrive, not when the bytes are complete: each
     * {@code recvmsg} offers a control area with room for only one fd more than may still
     * arrive, so the kernel installs at most that many (and drops the rest, with {@code
     * MSG_CTRUNC}); the moment the count passes {@code maxFds}, reading stops and every fd
     * received is closed. A peer that sends one byte with 253 fds per {@code sendmsg} can
     * therefore never make this process hold more than {@code maxFds} + 2 of its fds (the 2:
     * the one extra fd of room, and one more that CMSG alignment can fit).
     *
     * <p>Bytes in the frame buffer are taken first (with its fds when their frame starts
     * within them). A {@code recvmsg} is made only with the buffer empty. With {@code
     * frameHeader} (and no fd held for the frame yet) it reads ahead into the buffer: see
     * {@link #receiveFrameHeader}.
     */
    private ReceivedMessage receiveExactly(int length, int maxFds, boolean bounded, long deadlineNanos,
            boolean idleSlice, boolean frameHeader, long nowNanos) throws IOException {
        int slice = sliceMillis;
        long sliceNanos = slice * 1_000_000L;
        byte[] out = new byte[length];
        IntList fds = receivedFds;
        fds.clear();
        truncated = false;
        int got = 0;
        boolean eos = false;
        boolean excess = false;
        int closedOnArrival = 0; // fds of an excess found in the buffer: closed when they arrived
        NativeMsg io = receiveMsg();
        FrameBuffer buf = frames;
        boolean firstRead = true; // its block decision uses nowNanos (bounded receives): no clock read
        try {
            int take = Math.min(length, buf.buffered());
            if (take > 0) {
                io.data.get(buf.start, out, 0, take);
                if (buf.fdsAt >= 0 && buf.fdsAt < buf.start + take) { // their frame starts in these bytes
                    for (int i = 0; i < buf.fds.size(); i++) fds.add(buf.fds.get(i));
                    truncated = buf.truncated;
                    if (buf.excess) closedOnArrival = buf.arrived;
                    excess = buf.excess || fds.size() > maxFds;
                    buf.clearFds();
                }
                buf.start += take;
                if (buf.start == buf.end) buf.start = buf.end = 0;
                got = take;
            }
            while (got < length && !excess) {
                // Read ahead only at a frame's start or in its header, with no fd held for it:
                // the read's fds then go wholly to one frame (this one or a later one).
                boolean ahead = frameHeader && fds.size() == 0 && !truncated;
                int offset = 0;
                int want = Math.min(IO_CHUNK, length - got);
                if (ahead) {
                    io.data.put(0, out, 0, got); // the partial header, for the walk over the frames read
                    offset = got;
                    want = IO_CHUNK - got;
                }
                // Block in recvmsg (one slice at most) when a slice is set and the deadline is
                // at least two slices away (the kernel rounds the slice up to its tick, so the
                // last slices are waited in poll, which keeps the deadline to the ms).
                boolean block = !bounded || (slice > 0 && deadlineNanos - (firstRead ? nowNanos : System.nanoTime())
                        >= 2 * sliceNanos);
                firstRead = false;
                // A signal ends a bounded blocking wait like a slice (EINTR): retried with a fresh
                // slice, a stream of signals (a wall-clock profiler) would keep the deadline unseen.
                int r = recvOnce(io, offset, want, maxFds - fds.size() + 1, fds, !block, bounded && block);
                if (r < 0) { // EAGAIN: nothing now (non-blocking) or a slice passed with nothing (blocking)
                    if (bounded && !block && deadlineNanos - System.nanoTime() <= 0) {
                        throw timedOut(got, length, "the deadline passed");
                    }
                    if (!bounded) {
                        pollIn(-1); // an idle unbounded reader: sleep until something comes, then read again
                        continue;
                    }
                    if (idleSlice && got == 0) {
                        // Waiting for the first byte: one slice, then back to the caller.
                        if (block || !pollIn(pollMillis(Math.min(slice > 0 ? sliceNanos : 20_000_000L,
                                deadlineNanos - System.nanoTime())))) {
                            throw timedOut(got, length, "the slice ended");
                        }
                        continue;
                    }
                    if (block) continue; // the slice ended: check the deadline again
                    if (!pollUntil(deadlineNanos)) throw timedOut(got, length, "the deadline passed");
                    continue;
                }
                if (r == 0 && guard.isClosed()) throw new ClosedChannelException();
                if (r == 0) {
                    eos = true;
                    break;
                }
                if (ahead) {
                    int readTo = offset + r;
                    int owner = FrameBuffer.ownerOfRead(io.data, offset, readTo);
                    int n = Math.min(length - got, r);
                    io.data.get(offset, out, got, n);
                    got += n;
                    if (offset + n < readTo) { // bytes past this header: kept for the next reads
                        buf.start = offset + n;
                        buf.end = readTo;
                    }
                    if (owner > 0 && (fds.size() > 0 || truncated)) {
                        // The read's fds belong to a later frame (owner > 0 needs this header whole).
                        buf.adopt(owner, fds, truncated, Protocol.MAX_FDS_PER_FRAME);
                        truncated = false;
                    }
                } else {
                    io.data.get(0, out, got, r);
                    got += r;
                }
                if (fds.size() > maxFds) {
                    excess = true;
                    break;
                }
            }
        } catch (IOException | RuntimeException | Error e) {
            NativeIo.closeAll(fds.toArray());
            throw e;
        }
        byte[] data = got == length ? out : Arrays.copyOf(out, got);
        int[] received = fds.toArray();
        if (excess) {
            NativeIo.closeAll(received);
            boolean inStep = got == length;
            int count = Math.max(closedOnArrival, received.length);
            throw new FdTransferException(FdTransferException.Reason.TOO_MANY_FDS, (truncated ? "at least " : "")
                    + count + " file descriptors arrived, more than the " + maxFds
                    + " allowed; closed them all" + (inStep ? "" : "; stopped after " + got + " of " + length
                    + " bytes: the stream is out of step, close the connection"), data, count, inStep);
        }
        if (truncated) {
            NativeIo.closeAll(received);
            throw new FdTransferException(FdTransferException.Reason.CONTROL_TRUNCATED,
                    "the kernel dropped file descriptors (MSG_CTRUNC): this process is probably at its open-file "
                            + "limit (" + NativeIo.openFileLimitText() + "): raise it (ulimit -n, or setrlimit) or "
                            + "close descriptors it no longer needs" + (received.length == 0 ? " (none arrived)"
                            : "; closed the " + received.length + " that arrived"),
                    data, received.length, true);
        }
        if (frameHeader && got == length && !eos) {
            try {
                data = withBufferedPayload(out, io, buf); // copies before it takes: the buffer is as it was on a failure
            } catch (RuntimeException | Error e) {
                NativeIo.closeAll(received); // the header's fds: nothing else will close them (review of the one-pass read)
                throw e;
            }
        }
        return new ReceivedMessage(data, received, eos);
    }

    /**
     * The frame header {@code header} (complete, its fds checked) followed by its whole
     * payload when that is all in the frame buffer with no fd of a frame starting inside it
     * (so taking it brings no fd: nothing to count or close); else {@code header} itself. A
     * header with a bad magic or an impossible length is returned alone (the frame reader
     * refuses it before any payload byte is taken). Saves the frame reader a second receive
     * (lock, guard, arrays) for a frame that arrived whole.
     */
    private static byte[] withBufferedPayload(byte[] header, NativeMsg io, FrameBuffer buf) {
        long length = header.length == Protocol.HEADER_SIZE ? Protocol.trustedPayloadLength(header) : -1;
        if (length < 0 || length > buf.buffered()) return header;
        int n = (int) length;
        if (buf.fdsAt >= 0 && buf.fdsAt < buf.start + n) return header; // fds start in it: the exact read takes them
        if (n == 0) return header;
        byte[] frame = Arrays.copyOf(header, Protocol.HEADER_SIZE + n);
        io.data.get(buf.start, frame, Protocol.HEADER_SIZE, n);
        buf.start += n;
        if (buf.start == buf.end) buf.start = buf.end = 0;
        return frame;
    }

    private static SocketTimeoutException timedOut(int got, int length, String when) {
        SocketTimeoutException t = new SocketTimeoutException("recvmsg: " + got + " of " + length + " bytes read when "
                + when);
        t.bytesTransferred = got;
        return t;
    }

    /** A poll timeout for {@code nanos}, rounded up (0 and below: 0). */
    private static int pollMillis(long nanos) {
        return nanos <= 0 ? 0 : (int) Math.min(Integer.MAX_VALUE, (nanos + 999_999) / 1_000_000);
    }

    /**
     * One recvmsg of up to {@code want} bytes into {@code io.data} from {@code offset}, with room for {@code
     * roomFds} fds (at least 1); appends the fds that arrived; returns bytes read, 0 at end of
     * stream; -1 on {@code EAGAIN}: nothing there when {@code dontWait}, or a receive slice
     * ({@code SO_RCVTIMEO}) passed with nothing read; also -1 on {@code EINTR} when {@code
     * eintrEndsWait} (else the call is repeated).
     */
    private int recvOnce(NativeMsg io, int offset, int want, int roomFds, IntList fds, boolean dontWait,
            boolean eintrEndsWait) throws IOException {
        // Room for what may still arrive plus one: an excess is seen at once, and the kernel
        // installs no more fds than fit (the rest are dropped, MSG_CTRUNC).
        if (outOfStep) {
            throw new IOException("this socket is out of step: bytes it read with MSG_PEEK could not be taken off the "
                    + "queue; close it");
        }
        int control = NativeMsg.controlSpaceFor(roomFds);
        int r;
        int errno;
        do {
            count(RECVMSG_CALLS);
            r = io.recvmsg(fd, offset, want, control, NativeIo.MSG_CMSG_CLOEXEC | (dontWait ? NativeIo.MSG_DONTWAIT : 0)
                    | (deferring ? NativeIo.MSG_PEEK : 0));
            errno = r < 0 ? -r : 0;
            // A signal restarts the wait with a fresh slice: a stream of signals (a wall-clock
            // profiler) must not keep the held bytes on the queue for as long as it lasts.
            if (errno == NativeIo.EINTR && deferredBytes > 0 && !guard.isClosed()) consumeDeferred();
        } while (r < 0 && errno == NativeIo.EINTR && !eintrEndsWait);
        if (r < 0) {
            if (guard.isClosed()) throw new ClosedChannelException();
            if (errno == NativeIo.EAGAIN || errno == NativeIo.EINTR) {
                count(RECVMSG_EMPTY);
                // About to wait (poll, another slice) or to return to a caller who will: what was
                // peeked is taken off now, so a peer whose send buffer it fills can send again.
                if (deferredBytes > 0) consumeDeferred();
                return -1;
            }
            // The peer closed with data of ours unread: nothing more will come.
            if (errno == NativeIo.ECONNRESET) return 0;
            throw new IOException("recvmsg: " + NativeIo.strerror(errno));
        }
        if (deferring && r > 0) deferredBytes += r; // first: the kernel's peek offset has moved
        // Count from each control message's length: CMSG_SPACE(4) == CMSG_SPACE(8).
        int controlLength = io.controlLength();
        io.readRights(controlLength, fds);
        boolean cut = (io.flags() & NativeIo.MSG_CTRUNC) != 0;
        if (cut) truncated = true;
        if (deferring && r > 0) {
            // A read that brought fds (or lost some) is taken off at once: the fds' files stay
            // in flight, counted against their sender, until their bytes leave the queue.
            if (++deferredReads >= DEFER_MAX_READS || deferredBytes >= DEFER_MAX_BYTES || controlLength > 0 || cut) {
                consumeDeferred(); // on failure the caller (receiveExactly) closes this read's fds with the others
            }
        }
        return r;
    }

    /**
     * One {@code poll} for {@code POLLIN} ({@code timeoutMillis} -1: no timeout); the caller
     * has entered the guard. False: time ran out or a signal.
     */
    private boolean pollIn(int timeoutMillis) throws IOException {
        count(POLL_CALLS);
        return poll(NativeIo.POLLIN, timeoutMillis);
    }

    /**
     * One {@code poll} on this socket for {@code events}, up to {@code timeoutMillis}: true when
     * ready, false when it timed out or a signal ended it ({@code EINTR}).
     */
    private boolean poll(short events, int timeoutMillis) throws IOException {
        // One struct pollfd per call (8 bytes, on the heap: jnr copies it in and out); rare
        // (near a deadline, an idle reader, a full send buffer), so not worth a kept native buffer.
        java.nio.ByteBuffer pollFd = java.nio.ByteBuffer.allocate(8).order(java.nio.ByteOrder.nativeOrder());
        pollFd.putInt(0, fd);
        pollFd.putShort(4, events);
        int r = NativeIo.poll(pollFd, 1, timeoutMillis);
        if (r >= 0) return r > 0;
        if (-r == NativeIo.EINTR) return false;
        if (guard.isClosed()) throw new ClosedChannelException();
        throw new IOException("poll: " + NativeIo.strerror(-r));
    }

    /** Polls (the guard entered) until readable (true) or {@code deadlineNanos} passed (false). */
    private boolean pollUntil(long deadlineNanos) throws IOException {
        for (;;) {
            long left = deadlineNanos - System.nanoTime();
            if (left <= 0) return false;
            // Rounded up: a poll that returns 0 has waited past the deadline.
            if (pollIn((int) Math.min(Integer.MAX_VALUE, (left + 999_999) / 1_000_000))) return true;
        }
    }

    private NativeMsg sendMsg() {
        if (sendMsg == null) sendMsg = new NativeMsg(IO_CHUNK);
        return sendMsg;
    }

    private NativeMsg receiveMsg() {
        if (receiveMsg == null) receiveMsg = new NativeMsg(IO_CHUNK);
        return receiveMsg;
    }

    private void enter() throws ClosedChannelException {
        if (!guard.enter()) throw new ClosedChannelException();
    }

    /** Stops sending: the peer reads end of stream after what was sent. Receiving continues. */
    public void shutdownOutput() throws IOException {
        enter();
        try {
            jnr.enxio.channels.Native.shutdown(fd, 1);
        } finally {
            guard.exit();
        }
    }

    /** Wakes any thread blocked in send or receive on this socket; neither can be used again. */
    void shutdown() {
        if (guard.enter()) {
            try {
                jnr.enxio.channels.Native.shutdown(fd, NativeIo.SHUT_RDWR);
            } finally {
                guard.exit();
            }
        }
    }

    /** False once {@link #close()} has begun. */
    public boolean isOpen() { return !guard.isClosed(); }

    /**
     * Closes the socket. Threads blocked in send or receive wake with {@link
     * ClosedChannelException}; the fd is closed when the last of them leaves. Idempotent.
     */
    @Override
    public void close() { guard.close(); }

    @Override
    public String toString() { return "FdSocket[fd " + fd + (guard.isClosed() ? ", closed" : "") + "]"; }

    /** A growable int array. */
    static final class IntList {
        private int[] a;
        private int n;

        IntList() { this(4); }

        /** With room for {@code capacity} ints before {@link #add} must grow the array. */
        IntList(int capacity) { a = new int[capacity]; }

        void add(int v) {
            if (n == a.length) a = Arrays.copyOf(a, n * 2);
            a[n++] = v;
        }

        int size() { return n; }

        int get(int i) {
            Objects.checkIndex(i, n);
            return a[i];
        }

        void clear() { n = 0; }

        int[] toArray() { return n == 0 ? ReceivedMessage.NO_FDS : Arrays.copyOf(a, n); }
    }
}
