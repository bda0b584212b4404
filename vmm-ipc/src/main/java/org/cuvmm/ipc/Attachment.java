package org.cuvmm.ipc;

import java.io.IOException;
import java.io.UncheckedIOException;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * A buffer attached through a {@link SharingClient}: the imported {@link VirtualMemoryBuffer}
 * and the lease the server counts for it. {@link #close()} closes the buffer (unmapping the
 * memory) and then releases the lease. Thread-safe.
 */
public final class Attachment implements AutoCloseable {
    private final SharingClient client;
    private final String name;
    private final long leaseId;
    private final VirtualMemoryBuffer buffer;
    private volatile boolean dropped;
    private boolean closed;

    Attachment(SharingClient client, String name, long leaseId, VirtualMemoryBuffer buffer) {
        this.client = client;
        this.name = name;
        this.leaseId = leaseId;
        this.buffer = buffer;
    }

    /** The imported buffer (origin IMPORTED). Closed by {@link #close()}. */
    public VirtualMemoryBuffer buffer() { return buffer; }

    public String name() { return name; }

    public long leaseId() { return leaseId; }

    /** True once the server sent a DROP for this lease: the owner withdrew the buffer. */
    public boolean isDropped() { return dropped; }

    void markDropped() { dropped = true; }

    public synchronized boolean isClosed() { return closed; }

    /**
     * Closes the buffer, then sends RELEASE and waits for RELEASED. If the connection has
     * ended, the server already freed the lease and only the buffer is closed. Idempotent.
     *
     * @throws IllegalStateException when the buffer is in use on another thread (nothing is
     *     released; close again later), or the server refused the release
     * @throws UncheckedIOException when the server did not answer in time
     */
    @Override
    public synchronized void close() {
        if (closed) return;
        buffer.close();
        closed = true;
        client.forget(this);
        try {
            client.release(leaseId);
        } catch (SharingException e) {
            throw new IllegalStateException("release of '" + name + "' lease " + leaseId + ": " + e.getMessage(), e);
        } catch (IOException e) {
            if (client.isConnected()) throw new UncheckedIOException(e);
            // The connection has ended: the server freed the lease with it.
        }
    }

    @Override
    public String toString() {
        return "Attachment['" + name + "', lease " + leaseId + ", " + buffer + (dropped ? ", dropped" : "") + "]";
    }
}
