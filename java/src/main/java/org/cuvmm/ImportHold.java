package org.cuvmm;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

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

    // The count and the callback are fields updated through VarHandles, not AtomicInteger and
    // AtomicReference objects: a shared view makes one hold per attach of a cached import
    // (issue 11: two objects fewer per round).
    private static final VarHandle REFS;
    private static final VarHandle WHEN_UNMAPPED;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            REFS = l.findVarHandle(ImportHold.class, "refs", int.class);
            WHEN_UNMAPPED = l.findVarHandle(ImportHold.class, "whenUnmapped", Runnable.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private volatile int refs = 1; // the imported buffer's
    private volatile Runnable whenUnmapped;
    /** What this hold counts, for messages: its {@code toString()} is built only when one is written. */
    private final Object what;
    /** {@link #what} is the buffer a shared view was made of: messages say "the shared view of" it. */
    private final boolean sharedView;
    private final ImportHold parent; // one reference this hold owns, dropped at zero; or null

    ImportHold(Runnable whenUnmapped, String what) {
        this(whenUnmapped, what, null);
    }

    /** A hold that owns the reference on {@code parent} (already taken) the caller passes, or null. */
    ImportHold(Runnable whenUnmapped, Object what, ImportHold parent) {
        this(whenUnmapped, what, false, parent);
    }

    /**
     * As {@link #ImportHold(Runnable, Object, ImportHold)}; {@code sharedView}: the hold of a
     * shared view of {@code what} (named so in messages, with no name object made per view).
     */
    ImportHold(Runnable whenUnmapped, Object what, boolean sharedView, ImportHold parent) {
        this.whenUnmapped = whenUnmapped;
        this.what = what;
        this.sharedView = sharedView;
        this.parent = parent;
    }

    /** What this hold counts, for a message. */
    private String what() { return sharedView ? "the shared view of " + what : String.valueOf(what); }

    /** One more holder (a derived buffer or view); returns this. */
    ImportHold retain() {
        for (;;) {
            int n = refs;
            if (n <= 0) {
                // Unreachable: a holder is made only from a source that still holds a reference.
                throw new IllegalStateException(what() + " is no longer mapped; nothing can hold it");
            }
            if (REFS.compareAndSet(this, n, n + 1)) return this;
        }
    }

    /** One holder is gone (its native reference dropped); the last one runs the callback. */
    void release() {
        if ((int) REFS.getAndAdd(this, -1) - 1 != 0) return;
        Runnable r = (Runnable) WHEN_UNMAPPED.getAndSet(this, (Runnable) null);
        try {
            if (r != null) r.run();
        } catch (RuntimeException e) {
            // Swallowed, as documented: also when e cannot describe itself (a toString() that
            // throws) or the logger fails; only the log line is lost then.
            try {
                LOG.log(System.Logger.Level.WARNING, "the callback of " + what() + " (whenUnmapped or whenGone) threw "
                        + HostFunctions.describe(e), e);
            } catch (RuntimeException | Error logFailed) {
                // the callback's failure is not the closing caller's
            }
        } finally {
            if (parent != null) parent.release();
        }
    }

    /**
     * Drops the only reference without running the callback (the holder it was made for was
     * never handed out), still dropping the parent's reference.
     */
    void releaseUnfired() {
        whenUnmapped = null;
        release();
    }

    /** Holders still alive (buffers and views); 0 once the callback has run. */
    int holders() { return refs; }
}
