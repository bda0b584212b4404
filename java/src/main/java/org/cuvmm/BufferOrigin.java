package org.cuvmm;

/** How a {@link VirtualMemoryBuffer} came to be. */
public enum BufferOrigin {
    /** {@link VirtualMemoryResource#allocate(long)}, or a grow of an empty buffer. */
    ALLOCATED,
    /** A modify that needed no new memory: same mappings, no driver call. */
    ALIAS,
    /** A grow that mapped a new chunk right after the old range: same address. */
    GROWN_IN_PLACE,
    /** A grow that re-mapped every chunk into a new range (no bytes copied): new address. */
    MOVED,
    /** Imported from another process. */
    IMPORTED,
    /** Handed out by a {@code VirtualMemoryPool}: closing it returns its memory to the pool. */
    POOLED,
    /**
     * A view made by {@link VirtualMemoryBuffer#share(Runnable)}: the same mapped memory as
     * the buffer it was shared from, with its own lifecycle; made with no driver call.
     */
    SHARED_VIEW
}
