package org.cuvmm;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * A long-lived use of a buffer held on behalf of someone else: a consumer process that
 * imported it, an asynchronous operation still running. While any lease is held,
 * {@link VirtualMemoryBuffer#close()} refuses and names the holders; the buffer stays
 * usable. Obtained from {@link VirtualMemoryBuffer#lease(String)}; {@link #close()} ends it
 * (idempotent). It throws only when ending the last lease runs the buffer's pending close
 * ({@link VirtualMemoryBuffer#closeWhenUnused()}) and that close's teardown fails: it then
 * throws that failure, and the lease is ended all the same (released, no longer counted).
 */
public final class BufferLease implements AutoCloseable {
    private final VirtualMemoryBuffer buffer;
    /** A String, or a Supplier of one ({@link VirtualMemoryBuffer#leaseDescribedBy}). */
    private final Object holder;
    // A field set by compare-and-set (VarHandle), not an AtomicBoolean: a sharing server takes
    // one lease per attach (issue 11: one object fewer per round).
    private static final VarHandle CLAIMED;

    static {
        try {
            CLAIMED = MethodHandles.lookup().findVarHandle(BufferLease.class, "claimed", boolean.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** Claimed (CAS false to true) by the one close that ends the lease. */
    private volatile boolean claimed;
    /** Set once that close has given the use back (see {@link #isReleased()}). */
    private volatile boolean released;
    /**
     * This lease's hash: the buffer keeps its leases in a hash set, and an object's first
     * identity hash is a call into the VM; a sharing server takes a lease per attach (issue
     * 11). Equality stays identity.
     */
    private final int hash = java.util.concurrent.ThreadLocalRandom.current().nextInt();

    /** The most of a failed description's exception text {@link #holder()} quotes. */
    private static final int MAX_FAILURE_TEXT = 200;

    BufferLease(VirtualMemoryBuffer buffer, Object holder) {
        this.buffer = buffer;
        this.holder = holder;
    }

    /**
     * Who holds it, as given to {@link VirtualMemoryBuffer#lease(String)}, or made now by the
     * supplier given to {@link VirtualMemoryBuffer#leaseDescribedBy} instead (a supplier that
     * throws or returns null gives a fixed text naming that: this never throws, so a refused
     * close still says why it refused).
     */
    @SuppressWarnings("unchecked")
    public String holder() {
        if (holder instanceof String s) return s;
        String text;
        try {
            text = ((java.util.function.Supplier<String>) holder).get();
        } catch (RuntimeException | Error e) {
            // An Error too (an assertion, a stack overflow in the caller's description): it is
            // a diagnostic text, and a refused close must still refuse with its own message.
            // Bounded: a supplier that closes its own buffer fails with the refusal, whose
            // message holds this text again, down to a stack overflow (an independent probe:
            // a 378 KB message).
            // Its toString() may throw too (an application's exception whose getMessage()
            // fails): HostFunctions.describe falls back to the class name.
            String why = HostFunctions.describe(e);
            if (why.length() > MAX_FAILURE_TEXT) why = why.substring(0, MAX_FAILURE_TEXT) + "...";
            return "(holder description unavailable: " + why + ")";
        }
        return text == null ? "(no holder description)" : text;
    }

    public VirtualMemoryBuffer buffer() { return buffer; }

    /**
     * True once the lease has ended: its use of the buffer is given back, so a
     * {@link VirtualMemoryBuffer#close()} after this reads true is not refused for this lease.
     * (False while another thread's {@link #close()} is still ending it.)
     */
    public boolean isReleased() { return released; }

    /** Ends the lease. Idempotent. */
    @Override
    public void close() {
        if (!CLAIMED.compareAndSet(this, false, true)) return;
        try {
            buffer.endLease(this);
        } finally {
            // Only after the use went back (the claim above used to be the flag, so an owner
            // that saw isReleased() and closed could be refused "in use"). In a finally: an end
            // that throws (a deferred close's teardown) still gave its use back first.
            released = true;
        }
    }

    /** Identity, as before (a lease is its own). */
    @Override
    public boolean equals(Object o) { return this == o; }

    @Override
    public int hashCode() { return hash; }

    @Override
    public String toString() { return "lease held by " + holder() + (released ? " (released)" : ""); }
}
