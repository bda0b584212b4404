package org.cuvmm.ipc;

import java.nio.ByteBuffer;

/**
 * One received, validated frame and the fds that came with it, which it owns until {@link
 * #takeFds()} or {@link #close()}. Package-private.
 */
final class Frame implements AutoCloseable {
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
        return encode(m.type(), requestId, m.encode());
    }

    static byte[] encode(Messages.Message m, int requestId, int version) {
        return encode(m.type(), requestId, m.encode(), version);
    }
}
