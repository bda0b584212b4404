package org.cuvmm.ipc;

import java.util.Arrays;

/**
 * Bytes received from an {@link FdSocket}, and the file descriptors that arrived with them.
 * The message <em>owns</em> the fds: {@link #close()} closes every fd not taken with
 * {@link #takeFds()}. Each fd is closed exactly once. Thread-safe.
 */
public final class ReceivedMessage implements AutoCloseable {
    /** No fds (a length-0 array cannot change, so all share it). */
    static final int[] NO_FDS = new int[0];

    private final byte[] data;
    private final boolean endOfStream;
    private int[] fds;
    private boolean released;

    ReceivedMessage(byte[] data, int[] fds, boolean endOfStream) {
        this.data = data;
        this.fds = fds;
        this.endOfStream = endOfStream;
    }

    /** The bytes received (the message's own array). */
    public byte[] data() { return data; }

    /** How many bytes were received ({@code data().length}). */
    public int length() { return data.length; }

    /** True when the stream ended before the requested number of bytes arrived. */
    public boolean endOfStream() { return endOfStream; }

    /** Number of fds still owned by this message. */
    public synchronized int fdCount() { return released ? 0 : fds.length; }

    /**
     * The fd numbers, in arrival order (a copy; the message still owns them).
     *
     * @throws IllegalStateException when they were taken or closed
     */
    public synchronized int[] fds() {
        requireOwned();
        return fds.clone();
    }

    /**
     * Transfers ownership of the fds to the caller, who must close each of them; this
     * message will not.
     *
     * @throws IllegalStateException when they were already taken or closed
     */
    public synchronized int[] takeFds() {
        requireOwned();
        released = true;
        int[] out = fds;
        fds = NO_FDS;
        return out;
    }

    /** Closes every fd this message still owns. Idempotent. */
    @Override
    public synchronized void close() {
        if (released) return;
        released = true;
        NativeIo.closeAll(fds);
        fds = NO_FDS;
    }

    private void requireOwned() {
        if (released) {
            throw new IllegalStateException("the fds of this message were already taken or closed");
        }
    }

    @Override
    public synchronized String toString() {
        return "ReceivedMessage[" + data.length + " bytes, fds " + (released ? "released" : Arrays.toString(fds))
                + (endOfStream ? ", end of stream" : "") + "]";
    }
}
