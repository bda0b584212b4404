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
    private final ReceivedMessage fds;

    Frame(FrameType type, int requestId, Messages.Message message, ReceivedMessage fds) {
        this.type = type;
        this.requestId = requestId;
        this.message = message;
        this.fds = fds;
    }

    /** Transfers the fds to the caller (who must close them). */
    int[] takeFds() { return fds.takeFds(); }

    int fdCount() { return fds.fdCount(); }

    @Override
    public void close() { fds.close(); }

    @Override
    public String toString() { return type + "#" + requestId + " " + message; }

    /** The 16-byte header + payload of a frame. */
    static byte[] encode(FrameType type, int requestId, byte[] payload) {
        if (payload.length > Protocol.MAX_PAYLOAD) {
            throw new IllegalArgumentException("payload: " + payload.length + " bytes (expected: at most "
                    + Protocol.MAX_PAYLOAD + ")");
        }
        return ByteBuffer.allocate(Protocol.HEADER_SIZE + payload.length)
                .putInt(Protocol.MAGIC).putShort((short) Protocol.VERSION).putShort((short) type.code())
                .putInt(requestId).putInt(payload.length).put(payload).array();
    }

    static byte[] encode(Messages.Message m, int requestId) {
        return encode(m.type(), requestId, m.encode());
    }
}
