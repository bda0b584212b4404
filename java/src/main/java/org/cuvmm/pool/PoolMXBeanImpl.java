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
    // Every figure read takes back the leaks found first (the pool's javadoc: a leak is taken
    // back at a "bean read"), not only the live and retained ones: a leaked buffer whose class
    // is over the cap comes back as an eviction, and a monitor reading Evictions alone read
    // the figure without it, with the leak still untaken (an independent probe,
    // BeanReadsTakeBackLeaksTest).
    @Override public long getCount() { pool.drainLeaks(); return lifetimePool.liveCount(); }
    @Override public long getTotalCapacity() { pool.drainLeaks(); return lifetimePool.liveRequestedBytes(); }
    @Override public long getMemoryUsed() { pool.drainLeaks(); return lifetimePool.liveBytes(); }
    @Override public String getLifetime() { return lifetimePool.lifetime().key(); }
    @Override public long getPeakMemoryUsed() { pool.drainLeaks(); return lifetimePool.peakLiveBytes(); }
    @Override public long getRetainedCount() { pool.drainLeaks(); return lifetimePool.retainedCount(); }
    @Override public long getRetainedBytes() { pool.drainLeaks(); return lifetimePool.retainedBytes(); }
    @Override public long getRetentionCap() { pool.drainLeaks(); return lifetimePool.retentionCap(); }
    @Override public void setRetentionCap(long capBytes) { pool.setRetentionCap(lifetimePool.lifetime(), capBytes); }
    @Override public long getHits() { pool.drainLeaks(); return lifetimePool.hits(); }
    @Override public long getLargerClassHits() { pool.drainLeaks(); return lifetimePool.largerClassHits(); }
    @Override public long getMisses() { pool.drainLeaks(); return lifetimePool.misses(); }
    @Override public long getEvictions() { pool.drainLeaks(); return lifetimePool.evictions(); }
    @Override public long getEvictedBytes() { pool.drainLeaks(); return lifetimePool.evictedBytes(); }
    @Override public long getTrimmedBytes() { pool.drainLeaks(); return lifetimePool.trimmedBytes(); }
    @Override public long getLeaks() { pool.drainLeaks(); return lifetimePool.leaks(); }
    @Override public long getStreamWaits() { pool.drainLeaks(); return lifetimePool.streamWaits(); }
    @Override public long getHostWaits() { pool.drainLeaks(); return lifetimePool.hostWaits(); }
    @Override public long trim() { return pool.trim(lifetimePool.lifetime()); }
}
