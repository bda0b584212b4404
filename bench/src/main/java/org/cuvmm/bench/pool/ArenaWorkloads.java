package org.cuvmm.bench.pool;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.VirtualMemoryPool;

/**
 * The arena-design workloads, over a pool or straight over the resource (the reference).
 * One {@code round} of each:
 *
 * <ul>
 * <li>(a) {@link #freedBeforeNextRound}: allocate four outputs (2, 8, 8, 32 MiB), then close all four;</li>
 * <li>(b) {@link #keptAlive}: a ring of {@link #RING} live buffers (slot i holds 4, 8 or 16 MiB,
 *     by i mod 3); a round closes the oldest and allocates its replacement (same size);</li>
 * <li>(c) {@link #alternatingSizes}: allocate+close of 2, 64, 6, 24 MiB in turn, one per round.</li>
 * </ul>
 *
 * <p>Used by {@link ArenaBenchmark} and, for counting, by the report. Not thread-safe.
 */
public final class ArenaWorkloads implements AutoCloseable {
    public static final long MIB = 1L << 20;
    public static final long[] ROUND_SIZES = {2 * MIB, 8 * MIB, 8 * MIB, 32 * MIB};
    public static final long[] RING_SIZES = {4 * MIB, 8 * MIB, 16 * MIB};
    public static final long[] ALTERNATING = {2 * MIB, 64 * MIB, 6 * MIB, 24 * MIB};
    public static final int RING = 8;

    private final VirtualMemoryResource resource;
    private final VirtualMemoryPool pool; // null: straight to the resource
    private final VirtualMemoryBuffer[] outputs = new VirtualMemoryBuffer[ROUND_SIZES.length];
    private final VirtualMemoryBuffer[] ring = new VirtualMemoryBuffer[RING];
    private int ringNext;
    private int alt;

    public ArenaWorkloads(boolean pooled) {
        resource = VirtualMemoryResource.create(0);
        pool = pooled ? VirtualMemoryPool.builder().resource(resource).name("bench-arena").build() : null;
        for (int i = 0; i < RING; i++) ring[i] = allocate(RING_SIZES[i % RING_SIZES.length]);
    }

    private VirtualMemoryBuffer allocate(long size) {
        return pool != null ? pool.allocate(size) : resource.allocate(size);
    }

    public long freedBeforeNextRound() {
        long sum = 0;
        for (int i = 0; i < outputs.length; i++) {
            outputs[i] = allocate(ROUND_SIZES[i]);
            sum += outputs[i].address();
        }
        for (int i = 0; i < outputs.length; i++) {
            outputs[i].close();
            outputs[i] = null;
        }
        return sum;
    }

    public long keptAlive() {
        int i = ringNext;
        ring[i].close();
        ring[i] = allocate(RING_SIZES[i % RING_SIZES.length]);
        ringNext = (i + 1) % RING;
        return ring[i].address();
    }

    public long alternatingSizes() {
        long size = ALTERNATING[alt];
        alt = (alt + 1) % ALTERNATING.length;
        VirtualMemoryBuffer b = allocate(size);
        long a = b.address();
        b.close();
        return a;
    }

    @Override
    public void close() {
        for (VirtualMemoryBuffer b : ring) if (b != null) b.close();
        for (VirtualMemoryBuffer b : outputs) if (b != null) b.close();
        if (pool != null) pool.close();
        resource.close();
    }
}
