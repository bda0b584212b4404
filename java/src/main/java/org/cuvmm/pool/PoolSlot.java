package org.cuvmm.pool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

import org.cuvmm.internal.BufferRecycler;
import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * One native range a pool made, for its whole life: created on a miss, handed out and taken
 * back any number of times, released by eviction, trim or pool close. A slot is also the
 * {@link BufferRecycler} of every buffer made over its range, so a steady-state allocation
 * creates no pool object besides the {@code VirtualMemoryBuffer} itself.
 *
 * <p>Owns {@link #range} from creation until {@link LifetimePool#release} deallocates it; while
 * a buffer is live the buffer uses it, and the buffer's close (or cleaner) hands it back
 * through {@link #recycle}.
 *
 * <p>State, in {@link #state}:
 * <pre>
 *   miss: TAKEN --wrap--> LIVE --buffer closed--> RETURNING --push--> IDLE --take--> TAKEN --wrap--> LIVE ...
 *                                                     |                 \--evict / trim--> DEAD
 *                                                     \--not kept (over the cap, pool closed, exported leak)--> DEAD
 * </pre>
 * IDLE slots are on exactly one free list; the moves into and out of IDLE happen under that
 * list's lock. {@code LIVE -> RETURNING} is a CAS, so a second recycle of the same range is
 * detected and ignored.
 */
final class PoolSlot extends CacheLinePadding implements BufferRecycler {
    static final int TAKEN = 0;
    static final int LIVE = 1;
    static final int RETURNING = 2;
    static final int IDLE = 3;
    static final int DEAD = 4;

    private static final VarHandle STATE;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(PoolSlot.class, "state", int.class);
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
    // that holds the slot (see LifetimePool.Stripe). head side = most recently freed.
    PoolSlot newer;
    PoolSlot older;
    long freedAtNanos;

    @SuppressWarnings("unused") // accessed through STATE
    private volatile int state = TAKEN;

    PoolSlot(LifetimePool home, NativeRangeHandle range, int sizeIdx, long classSize) {
        this.home = home;
        this.range = range;
        this.sizeIdx = sizeIdx;
        this.classSize = classSize;
    }

    /** Publishes a hand-out: {@link #reqSize} is visible to whoever later sees {@link #LIVE}. */
    void markLive(long reqSize) {
        this.reqSize = reqSize;
        STATE.setRelease(this, LIVE);
    }

    /** LIVE to RETURNING; false when the slot was not live (a second recycle). */
    boolean beginReturn() { return STATE.compareAndSet(this, LIVE, RETURNING); }

    /** Only under the lock of the stripe that (un)links the slot, or for a slot no list holds. */
    void setState(int s) { STATE.setVolatile(this, s); }

    int state() { return (int) STATE.getVolatile(this); }

    @Override
    public void recycle(NativeRangeHandle returned, boolean leaked) {
        home.recycle(this, returned, leaked);
    }

    // Cache-line padding after the fields: slots made one after another sit side by side in
    // the heap, and two threads working on two slots must not write to one line.
    @SuppressWarnings("unused")
    private long q00, q01, q02, q03, q04, q05, q06, q07;

    @Override
    public String toString() {
        return "PoolSlot[" + home.lifetime().key() + ", class " + sizeIdx + " (" + classSize + " bytes), state "
                + state() + "]";
    }
}
