package org.cuvmm.pool;

import java.lang.management.BufferPoolMXBean;

/**
 * The JMX view of one lifetime of a {@link VirtualMemoryPool}, registered by
 * {@link VirtualMemoryPool.Builder#registerMBeans(boolean) registerMBeans(true)} under
 * {@code org.cuvmm:type=VirtualMemoryPool,name=<name>,lifetime=<local|exported>} and
 * unregistered when the pool closes. JConsole and VisualVM show it in the MBeans tab.
 *
 * <p>The {@link BufferPoolMXBean} attributes keep that interface's meaning (as for the JDK's
 * "direct" pool): {@code Count}, {@code TotalCapacity} and {@code MemoryUsed} describe
 * <em>live</em> buffers only; idle memory kept for reuse is reported apart, as
 * {@code RetainedBytes}. Sizes are in bytes. Every attribute is read when asked, without a
 * lock; see {@link PoolStats} for the meaning of each value.
 *
 * <p><b>Released bytes may still be mapped elsewhere.</b> Memory this pool released (evicted,
 * trimmed, closed) leaves these figures at once, but the physical memory stays alive while
 * any process maps it: an exported buffer's allocations may still be mapped by consumers
 * (protocol version 2 keeps them mapped in the consumer's import cache until the server's
 * EVICT is acknowledged). The sharing server counts them: {@code
 * org.cuvmm.ipc.SharingServer.stats()}, "released, still mapped by N consumers", and in JMX
 * its {@code org.cuvmm.ipc.SharingServerMXBean} ({@code org.cuvmm:type=SharingServer,...},
 * registered when the server is built with {@code registerMBean(true)}).
 */
public interface VirtualMemoryPoolMXBean extends BufferPoolMXBean {
    /** The pool's name ({@link VirtualMemoryPool#name()}). */
    @Override
    String getName();

    /** Live buffers ({@link PoolStats#liveCount()}). */
    @Override
    long getCount();

    /** Sum of the live buffers' {@code size()} ({@link PoolStats#liveRequestedBytes()}). */
    @Override
    long getTotalCapacity();

    /** Memory mapped by live buffers, their size classes summed ({@link PoolStats#liveBytes()}). */
    @Override
    long getMemoryUsed();

    /** "local" or "exported". */
    String getLifetime();

    /** The highest {@code MemoryUsed} so far. */
    long getPeakMemoryUsed();

    /** Idle buffers kept for reuse. */
    long getRetainedCount();

    /** Capacity of the idle buffers kept for reuse (never part of {@code MemoryUsed}). */
    long getRetainedBytes();

    /** The most idle capacity kept; {@link Long#MAX_VALUE} when unbounded. */
    long getRetentionCap();

    /**
     * Sets the retention cap; lowering it releases least-recently-freed idle buffers at once.
     *
     * @throws IllegalArgumentException when {@code capBytes} is negative
     */
    void setRetentionCap(long capBytes);

    /** Allocations served from idle memory. */
    long getHits();

    /** Hits served from an idle buffer of a larger class. */
    long getLargerClassHits();

    /** Allocations that needed new memory from the driver. */
    long getMisses();

    /** Idle buffers released by the retention cap, or released at close for exceeding it alone ({@link PoolStats#evictions()}). */
    long getEvictions();

    /** Capacity released by the retention cap. */
    long getEvictedBytes();

    /** Capacity released by trims and by the pool's close ({@link PoolStats#trimmedBytes()}). */
    long getTrimmedBytes();

    /** Buffers found leaked (unreachable, never closed) and taken back ({@link PoolStats#leaks()}). */
    long getLeaks();

    /** Cross-stream reuses that made a stream wait for a free's event ({@link PoolStats#streamWaits()}). */
    long getStreamWaits();

    /** Allocations without a stream that waited for a stream-ordered free ({@link PoolStats#hostWaits()}). */
    long getHostWaits();

    /** Releases every idle buffer of this lifetime; returns the capacity released. */
    long trim();
}
