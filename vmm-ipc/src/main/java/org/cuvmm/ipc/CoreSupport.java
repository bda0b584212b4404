package org.cuvmm.ipc;

import java.util.function.LongConsumer;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.Driver;
import org.cuvmm.VirtualMemoryBuffer;

/**
 * The core calls protocol version 2 and the import cache stand on, in one place (issue 11's
 * core support): allocation identity ({@link VirtualMemoryBuffer#allocationIds()}), the
 * release notice ({@link Driver#addAllocationReleaseListener}), partial export ({@link
 * VirtualMemoryBuffer#exportChunks(int...)}) and shared views ({@link
 * VirtualMemoryBuffer#share(Runnable)}). Package-private.
 */
final class CoreSupport {
    private CoreSupport() {}

    /** For each chunk of {@code b}, the process-unique id of its physical allocation (no driver call). */
    static long[] allocationIds(VirtualMemoryBuffer b) {
        return b.allocationIds();
    }

    /**
     * Exports only the chunks named (ascending indices): one export call and one fd per
     * chunk named, owned by the returned descriptor.
     */
    static BufferDescriptor exportChunks(VirtualMemoryBuffer b, int[] chunks) {
        return b.exportChunks(chunks);
    }

    /**
     * Registers {@code listener} for the ids of physical allocations really released (it runs
     * on the core's "cuvmm-release-notices" thread, after the release); close to unregister.
     */
    static AutoCloseable addReleaseListener(LongConsumer listener) {
        return Driver.get().addAllocationReleaseListener(listener);
    }

    /** True when {@link #share} works: the cache can hand out views of what it keeps mapped. */
    static boolean canShare() {
        return true;
    }

    /**
     * A view of {@code b} over the same mapping (no driver call); {@code whenGone} runs once
     * the view and everything derived from it are gone.
     */
    static VirtualMemoryBuffer share(VirtualMemoryBuffer b, Runnable whenGone) {
        return b.share(whenGone);
    }
}
