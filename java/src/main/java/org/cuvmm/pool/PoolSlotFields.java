package org.cuvmm.pool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * The fields of a {@link PoolSlot}, between the leading padding of {@link CacheLinePadding}
 * and the trailing padding of {@code PoolSlot}. They live in a class of their own because the
 * JVM lays out a class's {@code long} fields before its {@code int} and reference fields: in
 * one class with its padding, {@link #state} and the links would land after the padding,
 * unprotected.
 */
abstract class PoolSlotFields extends CacheLinePadding {
    static final int TAKEN = 0;
    static final int LIVE = 1;
    static final int RETURNING = 2;
    static final int IDLE = 3;
    static final int DEAD = 4;

    private static final VarHandle STATE;
    private static final VarHandle WATCH;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(PoolSlotFields.class, "state", int.class);
            WATCH = MethodHandles.lookup().findVarHandle(PoolSlotFields.class, "watch", LeakWatch.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    final LifetimePool home;
    final NativeRangeHandle range;
    final int sizeIdx;
    final long classSize;

    /**
     * {@code size()} of the buffer now made over this slot. Written before the release store
     * of {@link #LIVE}, read after the CAS that leaves it, so the recycling thread sees it.
     */
    long reqSize;

    // Free-list links and the time this slot was freed: guarded by the lock of the stripe
    // that holds the slot (see FreeListStripe). head side = most recently freed.
    PoolSlot newer;
    PoolSlot older;
    long freedAtNanos;

    // Stream-ordered returns (see LifetimePool, "Streams"). Plain fields, touched only by the
    // slot's owner of the moment (the thread closing its buffer, the thread that took it off a
    // free list, the thread releasing it) and published by the stripe lock, like the links.
    /** The slot's event: created on its first stream-ordered free, re-recorded on each, closed when the slot is released. */
    org.cuvmm.Event event;
    /**
     * The events of other devices this slot's frees were recorded on before (by device
     * ordinal; null until a free on a second device): kept, not destroyed, so that frees
     * alternating between devices create no event once each device has one. Never pending:
     * the stream of the free that set {@link #event} aside was ordered after it first (it
     * waited for it then, or at its allocation). Closed with
     * the slot.
     */
    org.cuvmm.Event[] eventsOfOtherDevices;
    /** True while {@link #event}'s last record may not have completed: stream work may still target the memory. */
    boolean pending;
    /** The key (BufferAccess.Bridge#streamKey) of the stream {@link #event} was last recorded on. */
    Object recordedOn;
    /** The key of a stream made to wait for that record since, or null: it is ordered after it too. */
    Object waitedBy;

    // Starts at 0, TAKEN, by default (no volatile store and fence in the constructor).
    @SuppressWarnings("unused") // accessed through STATE
    private volatile int state;

    /**
     * The pool's watch on the buffer now made over this slot, while it is live; null once that
     * buffer was closed. Holding it here keeps the watch reachable exactly as long as the
     * slot (so the garbage collector enqueues it); dropping it at close means a buffer closed
     * in time never reaches the leak queue's consumer. See {@link LeakWatch}.
     */
    @SuppressWarnings("unused") // accessed through WATCH
    private volatile LeakWatch watch;

    PoolSlotFields(LifetimePool home, NativeRangeHandle range, int sizeIdx, long classSize) {
        this.home = home;
        this.range = range;
        this.sizeIdx = sizeIdx;
        this.classSize = classSize;
    }

    /** Publishes a hand-out: {@link #reqSize} is visible to whoever later sees {@link #LIVE}. */
    final void markLive(long reqSize) {
        this.reqSize = reqSize;
        STATE.setRelease(this, LIVE);
    }

    /** LIVE to RETURNING; false when the slot was not live (a second recycle). */
    final boolean beginReturn() { return STATE.compareAndSet(this, LIVE, RETURNING); }

    /** Only under the lock of the stripe that (un)links the slot, or for a slot no list holds. */
    final void setState(int s) { STATE.setVolatile(this, s); }

    final int state() { return (int) STATE.getVolatile(this); }

    /** Watches the buffer just made over this slot (after {@link #markLive}). */
    final void setWatch(LeakWatch w) { WATCH.setRelease(this, w); }

    /** The watch on the buffer now made over this slot, null when none; for tests. */
    final LeakWatch watch() { return (LeakWatch) WATCH.getVolatile(this); }

    /** The buffer was closed: its watch no longer counts. */
    final void dropWatch() { WATCH.setRelease(this, (LeakWatch) null); }

    /**
     * Takes {@code w} for a leak report; false when the buffer was closed or the slot was
     * handed out again since {@code w} was made (then {@code w} means nothing).
     */
    final boolean claimWatch(LeakWatch w) { return WATCH.compareAndSet(this, w, (LeakWatch) null); }
}
