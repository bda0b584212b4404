package org.cuvmm;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Counts what in this process still maps the memory of one {@link
 * VirtualMemoryResource#importBuffer(BufferDescriptor, Runnable) import}: the imported
 * buffer, every buffer derived from it by {@code modifyAllocation} (alias, grown in place,
 * moved, and derivations of those, which may mix imported chunks with local ones), and
 * every {@code asByteBuffer} view of any of them. Each takes one reference when made and
 * drops it after its native reference is gone (explicit close or cleaner), so the memory
 * is unmapped in this process when the count reaches zero.
 *
 * <p>At zero the callback runs exactly once, on whichever thread dropped the last
 * reference (possibly the cleaner thread), holding no lock; a RuntimeException from it is logged
 * (logger {@code org.cuvmm}) and swallowed. A derived buffer or view can only be made while
 * its source holds a reference, so the count never rises again from zero.
 *
 * <p>A hold may have a <em>parent</em>: the hold of a {@linkplain VirtualMemoryBuffer#share
 * shared view} counts the view and what derives from it, and owns one reference on the hold
 * of the buffer it was shared from (when that buffer has one). At zero it runs its own
 * callback ({@code whenGone}), then drops that parent reference, so an import's
 * {@code whenUnmapped} waits for every view of it. Package-private.
 */
final class ImportHold {
    private static final System.Logger LOG = System.getLogger("org.cuvmm");

    private final AtomicInteger refs = new AtomicInteger(1); // the imported buffer's
    private final AtomicReference<Runnable> whenUnmapped;
    /** What this hold counts, for messages: its {@code toString()} is built only when one is written. */
    private final Object what;
    private final ImportHold parent; // one reference this hold owns, dropped at zero; or null

    ImportHold(Runnable whenUnmapped, String what) {
        this(whenUnmapped, what, null);
    }

    /** A hold that owns the reference on {@code parent} (already taken) the caller passes, or null. */
    ImportHold(Runnable whenUnmapped, Object what, ImportHold parent) {
        this.whenUnmapped = new AtomicReference<>(whenUnmapped);
        this.what = what;
        this.parent = parent;
    }

    /** One more holder (a derived buffer or view); returns this. */
    ImportHold retain() {
        for (;;) {
            int n = refs.get();
            if (n <= 0) {
                // Unreachable: a holder is made only from a source that still holds a reference.
                throw new IllegalStateException(what + " is no longer mapped; nothing can hold it");
            }
            if (refs.compareAndSet(n, n + 1)) return this;
        }
    }

    /** One holder is gone (its native reference dropped); the last one runs the callback. */
    void release() {
        if (refs.decrementAndGet() != 0) return;
        Runnable r = whenUnmapped.getAndSet(null);
        try {
            if (r != null) r.run();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "the callback of " + what + " (whenUnmapped or whenGone) threw " + e, e);
        } finally {
            if (parent != null) parent.release();
        }
    }

    /**
     * Drops the only reference without running the callback (the holder it was made for was
     * never handed out), still dropping the parent's reference.
     */
    void releaseUnfired() {
        whenUnmapped.set(null);
        release();
    }

    /** Holders still alive (buffers and views); 0 once the callback has run. */
    int holders() { return refs.get(); }
}
