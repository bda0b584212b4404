package org.cuvmm.pool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;

/**
 * The fields of a {@link FreeListStripe}, between the leading padding of
 * {@link CacheLinePadding} and the trailing padding of {@code FreeListStripe}.
 *
 * <p>The stripe's lock is a field here, not the object's monitor: {@code synchronized} writes
 * the object header on every enter and exit, and the header sits just after whatever the
 * garbage collector copied before the stripe, often the array of stripes that every thread
 * reads on every allocation. Two threads then bounce that line on each operation. Measured
 * on the host driver (2 cores): with the monitor, two threads on one pool ran at 0.56x to
 * 1.07x of one thread in JMH runs (0.4x to 1.9x round by round in a test harness, changing
 * whenever a garbage collection moved the objects); with this field, 1.97x, as with one pool
 * per thread (bench/RESULTS-sharing-pool.md).
 */
abstract class FreeListStripeFields extends CacheLinePadding {
    private static final VarHandle LOCKED;

    static {
        try {
            LOCKED = MethodHandles.lookup().findVarHandle(FreeListStripeFields.class, "locked", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** Spins before the lock starts yielding the processor to a holder that may be descheduled. */
    private static final int SPINS_BEFORE_YIELD = 64;
    /** Yields before a waiter parks: many more waiters than cores must not starve the holder. */
    private static final int SPINS_BEFORE_PARK = SPINS_BEFORE_YIELD + 64;
    /** Longest park between attempts, in nanoseconds. */
    private static final long MAX_PARK_NANOS = 1_000_000;

    // Links: guarded by the lock.
    PoolSlot newest;
    PoolSlot oldest;
    /** Slots on this list; written under the lock, read without it to skip empty stripes. */
    volatile int count;
    /** {@code freedAtNanos} of {@link #oldest}; read without the lock by eviction. */
    volatile long oldestFreedAtNanos;

    /** 1 while a thread holds the lock. Accessed through {@link #LOCKED}. */
    @SuppressWarnings("unused")
    private volatile int locked;

    /**
     * Takes the lock. Critical sections only relink a few slots, and a return also drops its
     * live count there (three adds on its accounting cell: {@code LifetimePool.push}); no
     * allocation, no driver call, no logging. So a waiter spins, then yields, then parks for growing intervals (up
     * to 1 ms): a holder is never blocked, only at worst descheduled, and waiters that far
     * outnumber the cores (or a CPU quota) do not keep it off a core.
     */
    final void lock() {
        if (!LOCKED.compareAndSet(this, 0, 1)) lockContended();
    }

    private void lockContended() {
        long parkNanos = 1_000;
        for (int spins = 0;; spins++) {
            if ((int) LOCKED.getVolatile(this) == 0 && LOCKED.compareAndSet(this, 0, 1)) return;
            if (spins < SPINS_BEFORE_YIELD) {
                Thread.onSpinWait();
            } else if (spins < SPINS_BEFORE_PARK) {
                Thread.yield();
            } else {
                LockSupport.parkNanos(parkNanos);
                parkNanos = Math.min(MAX_PARK_NANOS, parkNanos * 2);
            }
        }
    }

    /**
     * Releases the lock: a release store (the list writes before it are visible to the next
     * holder). The non-empty hint needs no more: a push's volatile {@code count} store comes
     * before its volatile read of the hint, and volatile accesses are totally ordered (see
     * LifetimePool, "the non-empty hint"). Never throws; callers call it in {@code finally}.
     */
    final void unlock() {
        LOCKED.setRelease(this, 0);
    }
}

/**
 * One free list of one size class of a {@link LifetimePool}: idle slots, newest first, doubly
 * linked through {@link PoolSlot#newer} and {@link PoolSlot#older}. Allocation takes the
 * newest (its pages are the most likely to be warm in caches and TLBs); eviction takes the
 * oldest. Every method except {@link #lock()} and {@link #unlock()} runs under the lock.
 */
@SuppressWarnings("unused")
final class FreeListStripe extends FreeListStripeFields {
    // Trailing padding (see CacheLinePadding).
    private long q00, q01, q02, q03, q04, q05, q06, q07, q08, q09, q10, q11, q12, q13, q14, q15;

    void pushNewest(PoolSlot s, long nowNanos) {
        s.freedAtNanos = nowNanos;
        s.newer = null;
        s.older = newest;
        if (newest != null) {
            newest.newer = s;
        } else {
            oldest = s;
            oldestFreedAtNanos = nowNanos;
        }
        newest = s;
        s.setState(PoolSlot.IDLE);
        count = count + 1;
    }

    PoolSlot popNewest() {
        PoolSlot s = newest;
        if (s == null) return null;
        newest = s.older;
        if (newest != null) {
            newest.newer = null;
        } else {
            oldest = null;
        }
        s.older = null;
        s.setState(PoolSlot.TAKEN);
        count = count - 1;
        return s;
    }

    /**
     * The newest slot that an allocation ordered by {@code key} (a stream key, or null for a
     * host-ordered allocation) can use without a driver call ({@link #readyFor}), looking at
     * no more than {@code limit} slots from the newest; else the newest. Null when empty.
     */
    PoolSlot popPreferred(Object key, int limit) {
        PoolSlot s = newest;
        if (s == null || readyFor(s, key)) return popNewest();
        int seen = 1;
        for (PoolSlot c = s.older; c != null && seen < limit; c = c.older, seen++) {
            if (readyFor(c, key)) {
                unlinkInner(c);
                return c;
            }
        }
        return popNewest();
    }

    /** No stream work may still target the slot, or {@code key}'s stream is ordered after it. */
    static boolean readyFor(PoolSlot s, Object key) {
        return !s.pending || (key != null && (key == s.recordedOn || key == s.waitedBy));
    }

    /** Unlinks {@code c}, which is on this list and not its newest. */
    private void unlinkInner(PoolSlot c) {
        PoolSlot newerSlot = c.newer; // not null: c is not the newest
        newerSlot.older = c.older;
        if (c.older != null) {
            c.older.newer = newerSlot;
        } else {
            oldest = newerSlot;
            oldestFreedAtNanos = newerSlot.freedAtNanos;
        }
        c.newer = null;
        c.older = null;
        c.setState(PoolSlot.TAKEN);
        count = count - 1;
    }

    PoolSlot popOldest() {
        PoolSlot s = oldest;
        if (s == null) return null;
        oldest = s.newer;
        if (oldest != null) {
            oldest.older = null;
            oldestFreedAtNanos = oldest.freedAtNanos;
        } else {
            newest = null;
        }
        s.newer = null;
        s.setState(PoolSlot.DEAD);
        count = count - 1;
        return s;
    }

    /** Unlinks every slot; returns the newest, the others follow through {@code older}. */
    PoolSlot detachAll() {
        PoolSlot s = newest;
        newest = null;
        oldest = null;
        count = 0;
        return s;
    }
}
