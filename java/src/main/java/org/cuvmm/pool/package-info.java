/**
 * Pooling of {@link org.cuvmm.VirtualMemoryBuffer}s: {@link org.cuvmm.pool.VirtualMemoryPool}
 * reuses the memory of closed buffers by size class ({@link org.cuvmm.pool.SizeClasses}),
 * with two lifetimes kept apart ({@link org.cuvmm.pool.PoolLifetime}: process-local and
 * exported), a retention cap with least-recently-freed eviction, {@code trim()}, accounting
 * ({@link org.cuvmm.pool.PoolStats}) and JMX ({@link org.cuvmm.pool.VirtualMemoryPoolMXBean}).
 */
package org.cuvmm.pool;
