package org.cuvmm.ipc;

import java.io.IOException;
import java.util.concurrent.TimeUnit;

/**
 * Reads one frame from an {@link FdSocket}, validating it in the order docs/PROTOCOL.md
 * section 4 gives: magic, length, (payload read), version, type, payload, fd count. On any
 * failure every fd that arrived with the frame is closed and a {@link ProtocolException} says
 * which rule broke and whether the stream is still in step. The fd limit (253 per frame,
 * header and payload together) is enforced by the socket as the fds arrive, and passing it
 * is always fatal: reading stops at once (even on the frame's last byte; the fds are closed),
 * so one rule holds wherever the count passes 253. Package-private.
 *
 * <p>Reading ahead (docs/PROTOCOL.md section 1): at a frame boundary the socket makes one
 * {@code recvmsg} of up to the largest frame ({@link FdSocket#receiveFrameHeader}); a frame
 * that arrived whole is then read with that one call, and frames that came with it are
 * returned by later reads with no call at all. The fds of a read belong to the last frame
 * that starts in it (the frame in progress when none does). A frame whose header is known
 * but whose payload is not all there is completed with exact reads (never past it), as
 * before. A half-read frame is still never resumed after {@link Stalled}: its bytes were
 * consumed.
 */
final class FrameIO {
    private FrameIO() {}

    /**
     * The next frame of any version this implementation speaks (1 or 2: for tools and tests
     * that take what comes; a connection reads with its own version), or null at a clean end
     * of stream (between frames).
     *
     * @throws ProtocolException a bad frame; fds closed; fatal when the stream cannot be trusted
     * @throws IOException the socket failed or was closed
     */
    static Frame read(FdSocket socket) throws IOException {
        return read(socket, Protocol.VERSION, Protocol.LATEST_VERSION);
    }

    /** The next frame of a connection speaking {@code version}, or null at a clean end of stream. */
    static Frame read(FdSocket socket, int version) throws IOException {
        return read(socket, version, version);
    }

    /**
     * The next frame whose header's version is {@code minVersion} to {@code maxVersion} (a range
     * before a connection's version is chosen), or null at a clean end of stream; the frame's
     * {@link Frame#version} says which it had. Types are read as the frame's version has them.
     */
    static Frame read(FdSocket socket, int minVersion, int maxVersion) throws IOException {
        return read(socket, minVersion, maxVersion, false, 0, false, 0);
    }

    /**
     * As {@link #read(FdSocket, int, int)}, but never waiting past {@code deadlineNanos}
     * ({@link System#nanoTime()}) for the frame's bytes ({@link FdSocket#receive(int, int,
     * long)}): for a caller of {@link SharingClient} that reads while it waits for its reply,
     * whose timeout must hold even when the server stops in the middle of a frame.
     *
     * @throws Stalled the deadline passed before the frame was complete: every fd that
     *     arrived with it is closed; unless {@link Stalled#midFrame()} is false (no byte was
     *     read) the stream is out of step and the connection must be closed
     */
    static Frame readBefore(FdSocket socket, int minVersion, int maxVersion, long deadlineNanos) throws IOException {
        return read(socket, minVersion, maxVersion, true, deadlineNanos, false, System.nanoTime());
    }

    /**
     * As {@link #readBefore}, but waiting for the frame's first byte one receive slice at most
     * ({@link FdSocket#receive(int, int, long, boolean)}): when none came, {@link Stalled}
     * with {@link Stalled#midFrame()} false (nothing consumed). For a leading caller, which
     * waits for its reply in the {@code recvmsg} itself, re-checking its deadline, an
     * interrupt and the connection after each slice. {@code nowNanos}: the caller's reading
     * of {@link System#nanoTime()} taken just before (the frame's start for a stall's message,
     * and the first receive's slice decision: {@link FdSocket#receiveFrameHeader}).
     */
    static Frame readWithinSlice(FdSocket socket, int minVersion, int maxVersion, long deadlineNanos, long nowNanos)
            throws IOException {
        return read(socket, minVersion, maxVersion, true, deadlineNanos, true, nowNanos);
    }

    /**
     * The deadline of {@link #readBefore} passed before the frame was complete. A half-read
     * frame cannot be resumed (its bytes are consumed and its state is lost): the reader
     * closes the connection.
     */
    static final class Stalled extends IOException {
        private static final long serialVersionUID = 1L;
        private final long bytesRead;

        Stalled(String message, long bytesRead) {
            super(message);
            this.bytesRead = bytesRead;
        }

        /** True when part of the frame was read (the stream is out of step). */
        boolean midFrame() { return bytesRead > 0; }
    }

    private static ReceivedMessage receive(FdSocket socket, int length, int maxFds, boolean bounded, long deadline,
            boolean idleSlice) throws IOException {
        return bounded ? socket.receive(length, maxFds, deadline, idleSlice) : socket.receive(length, maxFds);
    }

    private static Stalled stalled(java.net.SocketTimeoutException e, long before, String total, long started) {
        long read = before + e.bytesTransferred;
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        return new Stalled("the server stalled mid-frame: " + read + " of the " + total + " bytes of a frame "
                + "arrived, then nothing until the reading caller's timeout (" + ms + " ms after the frame began); "
                + "a half-read frame cannot be resumed", read);
    }

    /** {@code started}: {@link System#nanoTime()} as the caller read it just before (bounded reads only). */
    private static Frame read(FdSocket socket, int minVersion, int maxVersion, boolean bounded, long deadline,
            boolean idleSlice, long started) throws IOException {
        boolean dropped = false;
        String dropReason = null;
        ReceivedMessage head;
        try {
            // One recvmsg for a frame that arrives whole: the header read reads ahead and, when
            // the whole payload is buffered with no fd starting in it, returns it with the
            // header (no payload read); else the payload read takes the buffered bytes first
            // (FdSocket#receiveFrameHeader).
            head = socket.receiveFrameHeader(Protocol.MAX_FDS_PER_FRAME, bounded, deadline, idleSlice, started);
        } catch (java.net.SocketTimeoutException e) {
            throw stalled(e, 0, Protocol.HEADER_SIZE + " header", started);
        } catch (FdTransferException e) {
            // Passing the limit in the header is fatal even on its last byte: the payload
            // must not get a fresh allowance.
            if (e.reason() == FdTransferException.Reason.TOO_MANY_FDS || !e.streamInStep()) {
                // On the header's last byte the header is whole: when it is trusted (magic and
                // length valid) the refusal carries its request id (PROTOCOL.md section 2), and an
                // ERROR stays unanswered; before that, request id 0 and the type is unknown.
                byte[] got = e.data();
                int requestId = Protocol.trustedPayloadLength(got) >= 0 ? Messages.Reader.intAt(got, 8) : 0;
                ProtocolException x = tooManyFds(requestId, 0, e);
                x.frameType = trustedType(got);
                throw x;
            }
            dropped = true;
            dropReason = e.getMessage();
            head = new ReceivedMessage(e.data(), new int[0], e.data().length < Protocol.HEADER_SIZE);
        }
        ReceivedMessage payload = null;
        try {
            if (head.length() == 0 && head.endOfStream()) return null;
            if (head.endOfStream()) {
                throw new ProtocolException(ErrorCode.TRUNCATED, 0, "the stream ended after " + head.length()
                        + " of the 16 header bytes");
            }
            // Read from the array itself (no ByteBuffer per frame).
            byte[] hd = head.data();
            int magic = Messages.Reader.intAt(hd, 0);
            int frameVersion = (hd[4] & 0xFF) << 8 | (hd[5] & 0xFF);
            int typeCode = (hd[6] & 0xFF) << 8 | (hd[7] & 0xFF);
            int requestId = Messages.Reader.intAt(hd, 8);
            long length = Integer.toUnsignedLong(Messages.Reader.intAt(hd, 12));
            if (magic != Protocol.MAGIC) {
                throw new ProtocolException(ErrorCode.BAD_MAGIC, 0, String.format("bad magic 0x%08X (expected: "
                        + "0x%08X, \"CVMM\"); not a cuvmm frame, closing the connection", magic, Protocol.MAGIC));
            }
            if (length > Protocol.MAX_PAYLOAD) {
                // The header is not trusted (its length is impossible): request id 0.
                throw new ProtocolException(ErrorCode.TOO_LARGE, 0, "payload length " + length
                        + " (expected: at most " + Protocol.MAX_PAYLOAD + "); closing the connection");
            }
            // The header is trusted from here: every refusal below names the frame's type (when
            // known), so an ERROR is never answered whatever else is wrong with it (bad version,
            // payload, fds; docs/PROTOCOL.md section 3, ERROR).
            // A type is read as the frame's own version has it (the highest version accepted
            // when the frame's is not: the frame is refused anyway, BAD_VERSION).
            boolean versionOk = frameVersion >= minVersion && frameVersion <= maxVersion;
            int typesOf = versionOk ? frameVersion : maxVersion;
            FrameType type = FrameType.of(typeCode, typesOf);
            try {
                // The socket returns the header with its payload when that was whole in the
                // read-ahead buffer (FdSocket#receiveFrameHeader): then (and for a 0-byte
                // payload) no second receive; payload stays null.
                if (hd.length != Protocol.HEADER_SIZE + length) {
                    try {
                        // The frame's fd limit counts the header's fds too.
                        payload = receive(socket, (int) length, Protocol.MAX_FDS_PER_FRAME - head.fdCount(), bounded,
                                deadline, false);
                    } catch (java.net.SocketTimeoutException e) {
                        throw stalled(e, Protocol.HEADER_SIZE, (Protocol.HEADER_SIZE + length) + "", started);
                    } catch (FdTransferException e) {
                        if (e.reason() == FdTransferException.Reason.TOO_MANY_FDS || !e.streamInStep()) {
                            throw tooManyFds(requestId, head.fdCount(), e);
                        }
                        dropped = true;
                        dropReason = e.getMessage();
                        payload = new ReceivedMessage(e.data(), new int[0], e.data().length < length);
                    }
                }
                if (payload != null && payload.endOfStream()) {
                    throw new ProtocolException(ErrorCode.TRUNCATED, requestId, "the stream ended after "
                            + payload.length() + " of the " + length + " payload bytes");
                }
                if (!versionOk) {
                    throw new ProtocolException(ErrorCode.BAD_VERSION, requestId, "protocol version " + frameVersion
                            + " (expected: " + (minVersion == maxVersion ? "" + minVersion : minVersion + " to "
                            + maxVersion) + "); frame skipped");
                }
                if (type == null) {
                    throw new ProtocolException(ErrorCode.UNKNOWN_TYPE, requestId, "frame type " + typeCode
                            + " (expected: 1 to " + FrameType.maxCode(typesOf) + "); frame skipped");
                }
                Frame f = checkFrame(type, frameVersion, requestId, head, payload, dropped, dropReason);
                if (payload == null) head = null; // the frame owns it now (checkFds)
                return f;
            } catch (ProtocolException e) {
                e.frameType = type;
                throw e;
            }
        } finally {
            if (head != null) head.close();
            if (payload != null) payload.close();
        }
    }

    /**
     * More fds than a frame may carry arrived: the socket stopped reading (and closed them)
     * at once. Fatal wherever it happened: before the frame's last byte the stream is out of
     * step, and on it the rule stays the same (docs/PROTOCOL.md section 1).
     */
    private static ProtocolException tooManyFds(int requestId, int withHeader, FdTransferException e) {
        // Counted for the whole frame: the socket's own message counts only its last receive
        // (the payload's allowance is what the header left).
        int count = withHeader + e.fdsClosed();
        return new ProtocolException(ErrorCode.FD_COUNT_MISMATCH, true, requestId, 0, "more than "
                + Protocol.MAX_FDS_PER_FRAME + " fds arrived within one frame (" + (withHeader > 0 ? withHeader
                + " with its header, then " + e.fdsClosed() + " more: " : "") + "at least " + count
                + "); closed them all" + (e.streamInStep() ? "" : "; the stream is out of step"));
    }

    /** The type of a complete header whose magic and length pass (a trusted header), else null. */
    private static FrameType trustedType(byte[] header) {
        if (Protocol.trustedPayloadLength(header) < 0) return null;
        return FrameType.of((header[6] & 0xFF) << 8 | (header[7] & 0xFF));
    }

    /**
     * Payload and fd checks of a frame whose header passed (type known). {@code payload} is
     * null when {@code head} holds the whole frame (the payload after its 16 bytes, none for a
     * 0-byte payload): the returned frame then owns {@code head} (its fds).
     */
    private static Frame checkFrame(FrameType type, int version, int requestId, ReceivedMessage head,
                                    ReceivedMessage payload, boolean dropped, String dropReason)
            throws ProtocolException {
        Messages.Message m;
        try {
            m = payload == null ? Messages.decode(type, version, head.data(), Protocol.HEADER_SIZE)
                    : Messages.decode(type, version, payload.data());
        } catch (ProtocolException e) {
            throw e.withRequestId(requestId);
        }
        try {
            return checkFds(type, version, requestId, head, payload, dropped, dropReason, m);
        } catch (ProtocolException e) {
            // The payload parsed: the client forgets the new ids it names (PROTOCOL.md 13.3).
            if (m instanceof Messages.DescriptorV2 d2) e.descriptor = d2;
            throw e;
        }
    }

    private static Frame checkFds(FrameType type, int version, int requestId, ReceivedMessage head,
                                  ReceivedMessage payload, boolean dropped, String dropReason, Messages.Message m)
            throws ProtocolException {
        int got = head.fdCount() + (payload == null ? 0 : payload.fdCount());
        // Only a DESCRIPTOR carries fds: no call through the Message interface for the other
        // types (on every frame read, that call site sees every message type: an itable call).
        int expected = type == FrameType.DESCRIPTOR ? m.fdCount() : 0;
        if (!dropped && got == expected) {
            // Read whole, the frame takes the header's message (and its fds) as it is.
            if (payload == null) return new Frame(type, requestId, m, head, version);
            int[] all = concat(head.takeFds(), payload.takeFds());
            return new Frame(type, requestId, m, new ReceivedMessage(NO_BYTES, all, false), version);
        }
        long lease = m instanceof Messages.Descriptor d ? d.leaseId()
                : m instanceof Messages.DescriptorV2 d2 ? d2.leaseId() : 0;
        if (dropped) {
            ProtocolException x = new ProtocolException(ErrorCode.FD_COUNT_MISMATCH, false, requestId, lease, type + ": "
                    + dropReason);
            x.fdsDroppedHere = true;
            throw x;
        }
        if (got > Protocol.MAX_FDS_PER_FRAME) { // the socket stops first; kept as a guard, fatal like it
            throw new ProtocolException(ErrorCode.FD_COUNT_MISMATCH, true, requestId, lease, type + " arrived with "
                    + got + " fds (expected: at most " + Protocol.MAX_FDS_PER_FRAME + " per frame); closed them");
        }
        if (type != FrameType.DESCRIPTOR && expected == 0 && got > 0) {
            throw new ProtocolException(ErrorCode.UNEXPECTED_FDS, requestId, type + " arrived with " + got
                    + " fds (expected: none; only DESCRIPTOR carries fds); closed them");
        }
        throw new ProtocolException(ErrorCode.FD_COUNT_MISMATCH, false, requestId, lease, type + " says "
                + expected + (m instanceof Messages.DescriptorV2 ? " chunks with the FD flag" : " chunks")
                + " but arrived with " + got + " fds" + (got > 0 ? "; closed them" : ""));
    }

    /** The data of a frame's fd holder (never read or written). */
    private static final byte[] NO_BYTES = new byte[0];

    /** {@code a} then {@code b}: one of them as it is when the other is empty. */
    private static int[] concat(int[] a, int[] b) {
        if (b.length == 0) return a;
        if (a.length == 0) return b;
        int[] c = new int[a.length + b.length];
        System.arraycopy(a, 0, c, 0, a.length);
        System.arraycopy(b, 0, c, a.length, b.length);
        return c;
    }

    /** Sends {@code m} with {@code requestId}, and {@code fds} (kept by the caller) on the same sendmsg. */
    static void write(FdSocket socket, Messages.Message m, int requestId, int[] fds) throws IOException {
        write(socket, m, requestId, fds, Protocol.VERSION);
    }

    /**
     * As {@link #write(FdSocket, Messages.Message, int, int[])} with header version {@code
     * version}. The frame is built in one array ({@link Frame#encode(Messages.Message, int,
     * int)}); no fds is passed as a shared empty array.
     */
    static void write(FdSocket socket, Messages.Message m, int requestId, int[] fds, int version) throws IOException {
        socket.send(Frame.encode(m, requestId, version), fds == null ? Frame.NO_FDS : fds);
    }
}
