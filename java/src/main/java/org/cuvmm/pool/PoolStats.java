package org.cuvmm.pool;

/**
 * A snapshot of one lifetime's accounting in a {@link VirtualMemoryPool}, from
 * {@link VirtualMemoryPool#stats(PoolLifetime)}. Read-only; the values do not change after
 * it is taken.
 *
 * <p><em>Live</em> buffers are handed out and not yet returned (closed, or for an exported
 * buffer, closed with every lease gone). <em>Retained</em> buffers are idle in the pool,
 * mapped and ready for reuse. The two never overlap: retained memory is never reported as
 * live. Sizes are in bytes; a buffer's <em>capacity</em> is its size class
 * ({@link SizeClasses#classSize(int)}), at least the size it was asked for.
 *
 * <p>A returned buffer whose memory the pool does not keep (the pool is closed; its class is
 * over the retention cap; a leaked exported buffer; memory that an alias, a grow or a view of
 * the closed buffer still maps, or local memory that was ever exported) leaves the live count
 * when it is returned, and the pool lets go of its memory after that: on the returning thread,
 * or later on cuvmm's release thread while stream work recorded on it is still pending (and
 * always when it is returned from a host function; when that thread cannot be started, the
 * returning thread waits for the work and lets go itself, see {@link VirtualMemoryPool},
 * "Release"). Memory that another mapping still holds
 * (an alias, a view, another process) is freed when that mapping goes. So no live and no
 * retained buffer says that nothing is handed out or kept, not that every byte is already
 * back with the driver.
 *
 * <p>A snapshot taken while other threads allocate and release is not one atomic cut across
 * all values, and the live figures are themselves sums of per-thread counters read one after
 * another: under concurrency one may miss a buffer allocated or closed during the read, but
 * no figure is ever below 0. Taken while the pool is quiet, a snapshot is exact.
 */
public interface PoolStats {
    /** The pool's name. */
    String poolName();

    /** Which of the pool's two lifetimes this describes. */
    PoolLifetime lifetime();

    /** Live buffers. */
    long liveCount();

    /** Capacity of the live buffers (the sum of their size classes): the memory they map. */
    long liveBytes();

    /** Sum of {@code size()} of the live buffers: what their users asked for. */
    long liveRequestedBytes();

    /**
     * The highest {@link #liveBytes()} since the pool was built: never below a live figure a
     * snapshot or the bean's {@code MemoryUsed} reported before. A total that held only for an
     * instant no reader saw (an allocation overlapping another thread's return of a buffer the
     * pool does not keep) may be missed: the return then counts as having come first.
     */
    long peakLiveBytes();

    /** Idle buffers kept for reuse. */
    long retainedCount();

    /** Capacity of the idle buffers kept for reuse. */
    long retainedBytes();

    /** The most capacity kept idle; {@link Long#MAX_VALUE} when unbounded. */
    long retentionCapBytes();

    /**
     * Allocations served from an idle buffer (no new memory from the driver), larger-class
     * reuse included. Reusing memory whose stream-ordered free may still be pending makes one
     * wait ({@link #streamWaits()} or {@link #hostWaits()}); any other hit makes no driver call.
     */
    long hits();

    /** The part of {@link #hits()} served from an idle buffer of a larger class. */
    long largerClassHits();

    /** Allocations that needed new memory from the driver. */
    long misses();

    /** Idle buffers released because the retention cap was exceeded (or a buffer alone exceeded it). */
    long evictions();

    /** Capacity released by those evictions. */
    long evictedBytes();

    /**
     * Capacity released by {@link VirtualMemoryPool#trim()} and by closing the pool (a buffer
     * returned to the pool after it closed included).
     */
    long trimmedBytes();

    /**
     * Buffers found unreachable and never closed (every pooled buffer is watched), counted when
     * found; each comes back through this accounting (kept for reuse, or released for an
     * exported buffer) then, or, when stream work was recorded on it, once that work completed.
     */
    long leaks();

    /**
     * Allocations on a stream that reused memory freed on another stream whose free may not
     * have completed, so the allocating stream was made to wait for the free's event
     * ({@code cuStreamWaitEvent}), plus stream-ordered frees on a stream not yet ordered after
     * an earlier pending free of the same memory (the same call). See
     * {@link VirtualMemoryPool}, "Streams".
     */
    long streamWaits();

    /**
     * Allocations without a stream that reused memory freed in stream order, whose free was
     * then waited for on the allocating thread ({@code cuEventSynchronize}).
     */
    long hostWaits();

    /**
     * Events the pool created for stream-ordered frees: at most one per pooled range and device
     * its frees were on (each is reused, and kept while the range lives).
     */
    long eventsCreated();

    /**
     * Releases (eviction, trim, pool close, a return to a closed pool) of memory whose
     * stream-ordered free had not completed, handed to cuvmm's release thread
     * ("cuvmm-stream-release"), which releases it once the free's event completed; and every
     * release that came due on a host-function thread, where no CUDA call may be made. A
     * release that thread could not take (it could not be started) is counted too, though the
     * calling thread waited for the event and released it itself.
     */
    long deferredReleases();
}
