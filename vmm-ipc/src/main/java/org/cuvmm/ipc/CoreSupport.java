package org.cuvmm.ipc;

import java.util.function.LongConsumer;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;

/**
 * The core calls protocol version 2 and the import cache stand on, in one place: allocation
 * identity, the release notice, partial export and shared views (issue 11's core support).
 * Package-private.
 *
 * <p>Until the core offers them this class stands in: no allocation ids (the server then
 * names every chunk it sends with a fresh id, always with its fd, which is correct on the
 * wire but never spares an fd), no release notice, a partial export made of a full one, and
 * no shared view (the client's cache then stays empty, as with a cap of 0).
 */
final class CoreSupport {
    private CoreSupport() {}

    /** For each chunk of {@code b}, the process-unique id of its physical allocation; null when unknown. */
    static long[] allocationIds(VirtualMemoryBuffer b) {
        return null;
    }

    /**
     * Exports only the chunks named (ascending indices): one fd per chunk named, owned by the
     * returned descriptor (the sizes are those chunks', the size their sum).
     */
    static BufferDescriptor exportChunks(VirtualMemoryBuffer b, int[] chunks) {
        try (BufferDescriptor all = b.exportDescriptor()) {
            int[] fds = all.takeFds();
            long[] sizes = all.sizes();
            int[] picked = new int[chunks.length];
            long[] pickedSizes = new long[chunks.length];
            long sum = 0;
            boolean[] keep = new boolean[fds.length];
            for (int i = 0; i < chunks.length; i++) {
                keep[chunks[i]] = true;
                picked[i] = fds[chunks[i]];
                pickedSizes[i] = sizes[chunks[i]];
                sum += sizes[chunks[i]];
            }
            for (int i = 0; i < fds.length; i++) if (!keep[i]) NativeIo.closeQuietly(fds[i]);
            try {
                return BufferDescriptor.adoptFds(picked, pickedSizes, all.handleType(), sum);
            } catch (RuntimeException e) {
                NativeIo.closeAll(picked);
                throw e;
            }
        }
    }

    /** Registers {@code listener} for the ids of physical allocations really released; close to unregister. */
    static AutoCloseable addReleaseListener(LongConsumer listener) {
        return () -> {};
    }

    /** True when {@link #share} works: the cache can hand out views of what it keeps mapped. */
    static boolean canShare() {
        return false;
    }

    /**
     * A view of {@code b} over the same mapping (no driver call); {@code whenGone} runs once
     * the view and everything derived from it are gone.
     */
    static VirtualMemoryBuffer share(VirtualMemoryBuffer b, Runnable whenGone) {
        throw new UnsupportedOperationException("shared views need the core's VirtualMemoryBuffer.share");
    }
}
