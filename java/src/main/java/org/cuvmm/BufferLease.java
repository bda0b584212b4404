package org.cuvmm;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A long-lived use of a buffer held on behalf of someone else: a consumer process that
 * imported it, an asynchronous operation still running. While any lease is held,
 * {@link VirtualMemoryBuffer#close()} refuses and names the holders; the buffer stays
 * usable. Obtained from {@link VirtualMemoryBuffer#lease(String)}; {@link #close()} ends it
 * (idempotent, never throws).
 */
public final class BufferLease implements AutoCloseable {
    private final VirtualMemoryBuffer buffer;
    /** A String, or a Supplier of one ({@link VirtualMemoryBuffer#lease(java.util.function.Supplier)}). */
    private final Object holder;
    private final AtomicBoolean released = new AtomicBoolean();

    BufferLease(VirtualMemoryBuffer buffer, Object holder) {
        this.buffer = buffer;
        this.holder = holder;
    }

    /** Who holds it, as given to {@link VirtualMemoryBuffer#lease(String)} (or made by the supplier given instead). */
    @SuppressWarnings("unchecked")
    public String holder() {
        return holder instanceof String s ? s : String.valueOf(((java.util.function.Supplier<String>) holder).get());
    }

    public VirtualMemoryBuffer buffer() { return buffer; }

    public boolean isReleased() { return released.get(); }

    /** Ends the lease. Idempotent. */
    @Override
    public void close() {
        if (released.compareAndSet(false, true)) buffer.endLease(this);
    }

    @Override
    public String toString() { return "lease held by " + holder() + (released.get() ? " (released)" : ""); }
}
