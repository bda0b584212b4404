package org.cuvmm.ipc;

import java.nio.ByteBuffer;

/**
 * One received, validated frame and the fds that came with it, which it owns until {@link
 * #takeFds()} or {@link #close()}. Package-private.
 */
final class Frame implements AutoCloseable {
    /** No fds, shared: passed to FdSocket.send instead of null (which makes an array per call); never written to. */
    static final int[] NO_FDS = new int[0];

    final FrameType type;
    final int requestId;
    final Messages.Message message;
    /** The version field of its header. */
    final int version;
    private final ReceivedMessage fds;

    Frame(FrameType type, int requestId, Messages.Message message, ReceivedMessage fds) {
        this(type, requestId, message, fds, Protocol.VERSION);
    }

    Frame(FrameType type, int requestId, Messages.Message message, ReceivedMessage fds, int version) {
        this.type = type;
        this.requestId = requestId;
        this.message = message;
        this.fds = fds;
        this.version = version;
    }

    /** Transfers the fds to the caller (who must close them). */
    int[] takeFds() { return fds.takeFds(); }

    int fdCount() { return fds.fdCount(); }

    @Override
    public void close() { fds.close(); }

    @Override
    public String toString() { return type + "#" + requestId + " " + message; }

    /** The 16-byte header (version 1) + payload of a frame. */
    static byte[] encode(FrameType type, int requestId, byte[] payload) {
        return encode(type, requestId, payload, Protocol.VERSION);
    }

    /** The 16-byte header with {@code version} + payload of a frame. */
    static byte[] encode(FrameType type, int requestId, byte[] payload, int version) {
        if (payload.length > Protocol.MAX_PAYLOAD) {
            throw new IllegalArgumentException("payload: " + payload.length + " bytes (expected: at most "
                    + Protocol.MAX_PAYLOAD + ")");
        }
        return ByteBuffer.allocate(Protocol.HEADER_SIZE + payload.length)
                .putInt(Protocol.MAGIC).putShort((short) version).putShort((short) type.code())
                .putInt(requestId).putInt(payload.length).put(payload).array();
    }

    static byte[] encode(Messages.Message m, int requestId) {
        return encode(m, requestId, Protocol.VERSION);
    }

    /**
     * The frame of {@code m}, built in one array: the payload is written after 16 reserved
     * bytes, then the header in front (no payload array copied into a second one).
     */
    static byte[] encode(Messages.Message m, int requestId, int version) {
        // The per-round replies and requests with a single u64 payload, built straight into
        // their frame: no Writer and no interface calls (issue 11). The same bytes as below.
        if (m instanceof Messages.Release r) return u64Frame(FrameType.RELEASE, r.leaseId(), requestId, version);
        if (m instanceof Messages.Released r) return u64Frame(FrameType.RELEASED, r.leaseId(), requestId, version);
        if (m instanceof Messages.Attach a) {
            byte[] f = asciiNameFrame(a.name(), requestId, version);
            if (f != null) return f;
        }
        Messages.Writer w = new Messages.Writer(Protocol.HEADER_SIZE, m.sizeHint());
        m.write(w);
        int length = w.position() - Protocol.HEADER_SIZE;
        if (length > Protocol.MAX_PAYLOAD) {
            throw new IllegalArgumentException("payload: " + length + " bytes (expected: at most "
                    + Protocol.MAX_PAYLOAD + ")");
        }
        byte[] a = w.array();
        Messages.Writer.putInt(a, 0, Protocol.MAGIC);
        a[4] = (byte) (version >>> 8);
        a[5] = (byte) version;
        int type = m.type().code();
        a[6] = (byte) (type >>> 8);
        a[7] = (byte) type;
        Messages.Writer.putInt(a, 8, requestId);
        Messages.Writer.putInt(a, 12, length);
        return w.bytes();
    }

    /**
     * An ATTACH whose name is ASCII and of a valid length (1 to {@link Protocol#MAX_NAME_BYTES}
     * bytes): its u16 length and one byte per char, as {@link Messages.Writer#string} writes
     * it; null for any other name (the general path encodes or refuses it).
     */
    private static byte[] asciiNameFrame(String name, int requestId, int version) {
        if (name == null) return null;
        int n = name.length();
        if (n < 1 || n > Protocol.MAX_NAME_BYTES) return null;
        byte[] a = new byte[Protocol.HEADER_SIZE + 2 + n];
        for (int i = 0; i < n; i++) {
            char c = name.charAt(i);
            if (c >= 0x80) return null;
            a[Protocol.HEADER_SIZE + 2 + i] = (byte) c;
        }
        header(a, FrameType.ATTACH, requestId, version, 2 + n);
        a[Protocol.HEADER_SIZE] = (byte) (n >>> 8);
        a[Protocol.HEADER_SIZE + 1] = (byte) n;
        return a;
    }

    private static void header(byte[] a, FrameType type, int requestId, int version, int length) {
        Messages.Writer.putInt(a, 0, Protocol.MAGIC);
        a[4] = (byte) (version >>> 8);
        a[5] = (byte) version;
        int code = type.code();
        a[6] = (byte) (code >>> 8);
        a[7] = (byte) code;
        Messages.Writer.putInt(a, 8, requestId);
        Messages.Writer.putInt(a, 12, length);
    }

    /** A frame whose payload is one big-endian u64 ({@code RELEASE}, {@code RELEASED}). */
    private static byte[] u64Frame(FrameType type, long value, int requestId, int version) {
        byte[] a = new byte[Protocol.HEADER_SIZE + 8];
        header(a, type, requestId, version, 8);
        Messages.Writer.putInt(a, 16, (int) (value >>> 32));
        Messages.Writer.putInt(a, 20, (int) value);
        return a;
    }
}
