package org.cuvmm.pool;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * The hot-path counters of one stripe of a {@link LifetimePool}, with 128 bytes of padding on
 * each side ({@link CacheLinePadding}; every field is a {@code long}, so they stay in order).
 * A thread updates the cell of its stripe index; the pool's totals are the sums over all
 * cells (read by stats, JMX, and the peak and cap checks when they cannot be skipped). The
 * adds are atomic because threads outnumbering the stripes share cells. Like
 * {@link java.util.concurrent.atomic.LongAdder}, but one line for all five counters, so an
 * allocate or a release touches one line the thread rarely shares.
 */
final class AccountingCell extends CacheLinePadding {
    private static final VarHandle LIVE_BYTES;
    private static final VarHandle LIVE_COUNT;
    private static final VarHandle LIVE_REQUESTED_BYTES;
    private static final VarHandle HITS;
    private static final VarHandle LARGER_CLASS_HITS;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            LIVE_BYTES = l.findVarHandle(AccountingCell.class, "liveBytes", long.class);
            LIVE_COUNT = l.findVarHandle(AccountingCell.class, "liveCount", long.class);
            LIVE_REQUESTED_BYTES = l.findVarHandle(AccountingCell.class, "liveRequestedBytes", long.class);
            HITS = l.findVarHandle(AccountingCell.class, "hits", long.class);
            LARGER_CLASS_HITS = l.findVarHandle(AccountingCell.class, "largerClassHits", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    // Each may be negative in one cell (a buffer allocated on one stripe, released on another);
    // only the sums mean something.
    private volatile long liveBytes;
    private volatile long liveCount;
    private volatile long liveRequestedBytes;
    private volatile long hits;
    private volatile long largerClassHits;
    @SuppressWarnings("unused")
    private long q00, q01, q02, q03, q04, q05, q06, q07, q08, q09, q10, q11, q12, q13, q14, q15;

    /** A buffer of {@code classSize} capacity and {@code reqSize} bytes was handed out. */
    void allocated(long classSize, long reqSize, boolean hit, boolean largerClass) {
        LIVE_BYTES.getAndAdd(this, classSize);
        LIVE_COUNT.getAndAdd(this, 1L);
        LIVE_REQUESTED_BYTES.getAndAdd(this, reqSize);
        if (hit) HITS.getAndAdd(this, 1L);
        if (largerClass) LARGER_CLASS_HITS.getAndAdd(this, 1L);
    }

    /** A buffer handed out with {@link #allocated} came back. */
    void released(long classSize, long reqSize) {
        LIVE_BYTES.getAndAdd(this, -classSize);
        LIVE_COUNT.getAndAdd(this, -1L);
        LIVE_REQUESTED_BYTES.getAndAdd(this, -reqSize);
    }

    long liveBytes() { return liveBytes; }
    long liveCount() { return liveCount; }
    long liveRequestedBytes() { return liveRequestedBytes; }
    long hits() { return hits; }
    long largerClassHits() { return largerClassHits; }
}
