package org.cuvmm.ipc;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.function.Function;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * A buffer attached through a {@link SharingClient}: the imported {@link VirtualMemoryBuffer}
 * and the lease the server counts for it. Thread-safe.
 *
 * <h2>The lease follows this process's mappings</h2>
 * The lease is released (RELEASE sent) when the last buffer or view in this process that
 * maps any of the imported memory is gone: the imported buffer, every buffer {@code
 * modifyAllocation} derived from it (alias, grown in place, moved, and grows of those), and
 * every {@code asByteBuffer} view of any of them, each gone when closed or released by the
 * cleaner (docs/VMM_DESIGN.md section 14). So the producer never gets memory back (a pool
 * never reuses it) while this process can still read or write it. {@link #close()} closes
 * the imported buffer; when that was the last mapping it releases the lease at once and
 * waits for RELEASED; otherwise it returns, and the lease is released, without waiting,
 * when the last alias or view goes (on that thread, or the cleaner's, which hand the
 * RELEASE to the client's event thread). If the process dies or the connection ends, the
 * server frees the lease itself.
 */
public final class Attachment implements AutoCloseable {
    private final SharingClient client;
    private final String name;
    private final long leaseId;
    private final VirtualMemoryBuffer buffer;
    /**
     * The two claims below are fields set by compare-and-set through {@link VarHandle}s, not
     * AtomicBooleans: two objects fewer per attach (issue 11, allocation per cached round).
     */
    private static final VarHandle RELEASE_CLAIMED;
    private static final VarHandle CLOSE_CLAIMED;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            RELEASE_CLAIMED = l.findVarHandle(Attachment.class, "releaseClaimed", boolean.class);
            CLOSE_CLAIMED = l.findVarHandle(Attachment.class, "closeClaimed", boolean.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** Test seam: run by a close right after it claimed the work, before it closes the buffer. Null: nothing. */
    static volatile Runnable afterCloseClaimed;

    /** How often a close racing another one looks whether that one is over (rare: only a race waits). */
    private static final long CLOSE_RACE_POLL_NANOS = 100_000;

    /** Claimed (CAS false to true) by whoever sends the one RELEASE of this lease. */
    private volatile boolean releaseClaimed;
    private volatile boolean dropped;
    /**
     * Claimed by the one thread that closes; given back when the buffer refuses to close (in
     * use on another thread), so a later close can try again. No monitor: the buffer's close
     * is a teardown (the final unmap/release), and no lock is held across one.
     */
    private volatile boolean closeClaimed;
    /** The thread inside {@link #close()}'s buffer.close(), so an unmap it causes is released synchronously. */
    private volatile Thread closing;
    private volatile boolean unmappedByClose;
    private volatile boolean closed;

    /**
     * Imports through {@code importer}, which must pass the callback it is given to {@code
     * VirtualMemoryResource.importBuffer(descriptor, whenUnmapped)}.
     */
    Attachment(SharingClient client, String name, long leaseId, Function<Runnable, VirtualMemoryBuffer> importer) {
        this.client = client;
        this.name = name;
        this.leaseId = leaseId;
        this.buffer = importer.apply(this::unmapped);
    }

    /**
     * The imported buffer (origin IMPORTED; on a protocol-version-2 connection whose import
     * cache is on, origin SHARED_VIEW: a view of the import the cache keeps mapped, which the
     * lease follows exactly as it follows an import), closed by {@link #close()}. Aliases and views
     * made of it keep the lease until they are gone.
     */
    public VirtualMemoryBuffer buffer() { return buffer; }

    /** The name this attachment was attached under (as given to {@link SharingClient#attach}). */
    public String name() { return name; }

    /** The lease the server granted for it (unique for the life of the server; PROTOCOL.md section 3). */
    public long leaseId() { return leaseId; }

    /**
     * True once the server sent a DROP for this lease: the owner withdrew the buffer. Also
     * after {@link #close()}, for a DROP that arrived while an alias or view of the buffer
     * still kept the lease (its {@link DropNotice} carries a null attachment then).
     */
    public boolean isDropped() { return dropped; }

    void markDropped() { dropped = true; }

    /**
     * True once {@link #close()} has closed this attachment's buffer (its lease may still be
     * kept by aliases or views; {@link #isReleased()} says when it has ended).
     */
    public boolean isClosed() { return closed; }

    /**
     * True once nothing in this process maps the memory any more, so the lease is being (or
     * has been) given back: RELEASE sent or queued for sending.
     */
    public boolean isReleased() { return releaseClaimed; }

    /**
     * Closes the buffer. When no alias or view of it still maps the memory, then sends
     * RELEASE and waits for RELEASED; otherwise the lease stays held and is released
     * (without waiting) when the last of them goes. If the connection has ended, the server
     * already freed the lease and only the buffer is closed. Idempotent.
     *
     * <p>Stream work recorded on the buffer (its asynchronous copies and fills,
     * {@code recordUse}, {@code withAddress(stream, ...)}) is waited for first, as
     * {@link VirtualMemoryBuffer#close()} does: the lease goes back only once the consumer's
     * streams are done with the memory. Called from a host function, the close is handed to
     * cuvmm's release thread instead, and RELEASE follows when that thread unmaps.
     *
     * <p>A close racing another one on this attachment waits until that one's close of the
     * buffer is over: when it succeeded, this returns (the other sends the release); when it
     * was refused, this one tries itself, and throws as that one did if the buffer is still in
     * use. No lock is held while the buffer is unmapped or the release is awaited.
     *
     * @throws IllegalStateException when the buffer is in use on another thread (nothing is
     *     closed or released: the attachment stays open; close again later), the server
     *     refused the release, or this thread was interrupted while it waited for a racing
     *     close (the interrupt flag is kept; {@link #isClosed()} is false while that close
     *     runs or if it was refused)
     * @throws UncheckedIOException when the server did not answer in time, or this thread was
     *     interrupted while it waited for RELEASED (the interrupt flag is kept); either way the
     *     attachment is closed and its RELEASE sent, and the server frees the lease when it reads
     *     it or when the connection ends
     */
    @Override
    public void close() {
        close(true);
    }

    /**
     * {@link #close()}; with {@code waitForReply} false the RELEASE is handed to the client's
     * event thread and not waited for (for {@link SharingClient#close()} once the server has
     * let one release time out: the others would each wait a whole timeout too).
     */
    void close(boolean waitForReply) {
        if (closed) return;
        if (!CLOSE_CLAIMED.compareAndSet(this, false, true) && !claimAfterRacingClose()) return;
        Runnable seam = afterCloseClaimed;
        if (seam != null) seam.run();
        closing = Thread.currentThread();
        try {
            buffer.close();
        } catch (RuntimeException | Error e) {
            closeClaimed = false; // refused (in use on another thread): still open, closable later
            throw e;
        } finally {
            closing = null;
        }
        closed = true;
        if (unmappedByClose) client.forget(this);
        else client.forgetKeepingLease(this); // an alias or view keeps the lease: a DROP is still notified
        // Outside the monitor: a blocking request. Released here only if this close unmapped
        // the last mapping; if an alias or view lives on, unmapped() releases later.
        if (!unmappedByClose || !RELEASE_CLAIMED.compareAndSet(this, false, true)) return;
        if (!waitForReply) {
            client.releaseLater(leaseId);
            return;
        }
        try {
            client.release(leaseId);
        } catch (IOException e) {
            // Ended (either side, or client.close() already finished): the server freed the
            // lease with the connection. Not isConnected(): that is false from client.close()
            // on, while the connection still drains and this RELEASE counts. Checked before
            // the SharingException: a connection ended over the server's bad frame or its
            // fatal ERROR fails this release with a copy of that SharingException, which is
            // no refusal of the release (it was thrown as one: an independent probe,
            // ClientFailurePathsProbeTest).
            if (client.connectionEnded()) return;
            if (e instanceof SharingException) {
                throw new IllegalStateException("release of '" + name + "' lease " + leaseId + ": " + e.getMessage(), e);
            }
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Another close holds the claim: waits for its outcome instead of returning at once (a
     * refused one gives the claim back, and the work would be left undone with neither caller
     * told: an independent probe saw 7 to 11 attachments per run left open, their leases
     * held). True when this thread now holds the claim (the other was refused); false when
     * the attachment is closed. Polled, so the claimer's path (every round's close) signals
     * nothing. An interrupt ends the wait with an IllegalStateException (the flag kept).
     */
    private boolean claimAfterRacingClose() {
        // The claimer itself, re-entering from inside its own buffer close: nothing to wait for.
        if (closing == Thread.currentThread()) return false;
        long pause = CLOSE_RACE_POLL_NANOS;
        for (;;) {
            if (closed) return false;
            if (CLOSE_CLAIMED.compareAndSet(this, false, true)) return true;
            // Backs off to 10 ms: the other close may wait for stream work recorded on the buffer.
            java.util.concurrent.locks.LockSupport.parkNanos(pause);
            pause = Math.min(pause * 2, 10_000_000L);
            if (Thread.interrupted()) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("close of '" + name + "' lease " + leaseId + ": interrupted while "
                        + "another thread was closing it (isClosed() is false while that close runs or if it was "
                        + "refused: then the attachment is open; close it again later)");
            }
        }
    }

    /**
     * The import's whenUnmapped callback: nothing in this process maps the memory any more.
     * Runs on the thread that dropped the last mapping (possibly the cleaner), so it never
     * blocks: inside {@link #close()} it leaves the release to close; elsewhere it hands the
     * RELEASE to the client's event thread.
     */
    private void unmapped() {
        if (closing == Thread.currentThread()) {
            unmappedByClose = true;
            return;
        }
        if (RELEASE_CLAIMED.compareAndSet(this, false, true)) client.releaseLater(leaseId);
    }

    @Override
    public String toString() {
        return "Attachment['" + name + "', lease " + leaseId + ", " + buffer + (dropped ? ", dropped" : "") + "]";
    }
}
