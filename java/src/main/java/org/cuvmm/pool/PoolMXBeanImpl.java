package org.cuvmm.pool;

import javax.management.ObjectName;

/** {@link VirtualMemoryPoolMXBean} over one {@link LifetimePool}; reads live values. */
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
    @Override public long getCount() { return lifetimePool.liveCount(); }
    @Override public long getTotalCapacity() { return lifetimePool.liveRequestedBytes(); }
    @Override public long getMemoryUsed() { return lifetimePool.liveBytes(); }
    @Override public String getLifetime() { return lifetimePool.lifetime().key(); }
    @Override public long getPeakMemoryUsed() { return lifetimePool.peakLiveBytes(); }
    @Override public long getRetainedCount() { return lifetimePool.retainedCount(); }
    @Override public long getRetainedBytes() { return lifetimePool.retainedBytes(); }
    @Override public long getRetentionCap() { return lifetimePool.retentionCap(); }
    @Override public void setRetentionCap(long capBytes) { pool.setRetentionCap(lifetimePool.lifetime(), capBytes); }
    @Override public long getHits() { return lifetimePool.hits(); }
    @Override public long getLargerClassHits() { return lifetimePool.largerClassHits(); }
    @Override public long getMisses() { return lifetimePool.misses(); }
    @Override public long getEvictions() { return lifetimePool.evictions(); }
    @Override public long getEvictedBytes() { return lifetimePool.evictedBytes(); }
    @Override public long getTrimmedBytes() { return lifetimePool.trimmedBytes(); }
    @Override public long getLeaks() { return lifetimePool.leaks(); }
    @Override public long trim() { return lifetimePool.trim(); }
}
