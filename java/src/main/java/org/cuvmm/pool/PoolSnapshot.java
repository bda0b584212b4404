package org.cuvmm.pool;

/** The immutable {@link PoolStats} that {@link VirtualMemoryPool#stats(PoolLifetime)} returns. */
record PoolSnapshot(String poolName, PoolLifetime lifetime, long liveCount, long liveBytes, long liveRequestedBytes,
                    long peakLiveBytes, long retainedCount, long retainedBytes, long retentionCapBytes, long hits,
                    long largerClassHits, long misses, long evictions, long evictedBytes, long trimmedBytes,
                    long leaks, long streamWaits, long hostWaits, long eventsCreated,
                    long deferredReleases) implements PoolStats {
}
