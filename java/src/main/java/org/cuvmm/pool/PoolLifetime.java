package org.cuvmm.pool;

/**
 * The two lifetimes a {@link VirtualMemoryPool} keeps apart. Each has its own free lists,
 * retention cap and accounting, so a burst of one can never evict, or be served from, the
 * memory of the other.
 */
public enum PoolLifetime {
    /**
     * Buffers used only inside this process ({@link VirtualMemoryPool#allocate(long)}):
     * reusable as soon as they are closed.
     */
    LOCAL("local"),
    /**
     * Buffers handed to other processes ({@link VirtualMemoryPool#allocateExported(long)}):
     * reusable only once the owner has closed them and every consumer lease is gone.
     */
    EXPORTED("exported");

    private final String key;

    PoolLifetime(String key) { this.key = key; }

    /** The lower-case name used in JMX object names and messages: "local" or "exported". */
    public String key() { return key; }
}
