package org.cuvmm.pool;

import javax.management.ObjectName;

/**
 * {@link VirtualMemoryPoolMXBean} over one {@link LifetimePool}; reads live values, after taking
 * back the leaks the garbage collector found ({@link VirtualMemoryPool#drainLeaks}).
 */
final class PoolMXBeanImpl implements VirtualMemoryPoolMXBean {
    private final VirtualMemoryPool pool;
    private final LifetimePool lifetimePool;
    private final ObjectName objectName;

    PoolMXBeanImpl(VirtualMemoryPool pool, LifetimePool lifetimePool, ObjectName objectName) {
        this.pool = pool;
        this.lifetimePool = lifetimePool;
        this.objectName = objectName;
    }

    @Override public ObjectName getObjectName() { return objectName; }
    @Override public String getName() { return pool.name(); }
    @Override public long getCount() { pool.drainLeaks(); return lifetimePool.liveCount(); }
    @Override public long getTotalCapacity() { pool.drainLeaks(); return lifetimePool.liveRequestedBytes(); }
    @Override public long getMemoryUsed() { pool.drainLeaks(); return lifetimePool.liveBytes(); }
    @Override public String getLifetime() { return lifetimePool.lifetime().key(); }
    @Override public long getPeakMemoryUsed() { pool.drainLeaks(); return lifetimePool.peakLiveBytes(); }
    @Override public long getRetainedCount() { pool.drainLeaks(); return lifetimePool.retainedCount(); }
    @Override public long getRetainedBytes() { pool.drainLeaks(); return lifetimePool.retainedBytes(); }
    @Override public long getRetentionCap() { return lifetimePool.retentionCap(); }
    @Override public void setRetentionCap(long capBytes) { pool.setRetentionCap(lifetimePool.lifetime(), capBytes); }
    @Override public long getHits() { return lifetimePool.hits(); }
    @Override public long getLargerClassHits() { return lifetimePool.largerClassHits(); }
    @Override public long getMisses() { return lifetimePool.misses(); }
    @Override public long getEvictions() { return lifetimePool.evictions(); }
    @Override public long getEvictedBytes() { return lifetimePool.evictedBytes(); }
    @Override public long getTrimmedBytes() { return lifetimePool.trimmedBytes(); }
    @Override public long getLeaks() { pool.drainLeaks(); return lifetimePool.leaks(); }
    @Override public long getStreamWaits() { return lifetimePool.streamWaits(); }
    @Override public long getHostWaits() { return lifetimePool.hostWaits(); }
    @Override public long trim() { return pool.trim(lifetimePool.lifetime()); }
}
