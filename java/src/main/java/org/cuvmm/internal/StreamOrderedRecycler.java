package org.cuvmm.internal;

import org.cuvmm.Stream;
import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * A {@link BufferRecycler} that also takes a range back in a stream's order: the pool's slots.
 * {@link org.cuvmm.VirtualMemoryBuffer#close(Stream)} of a buffer whose recycler is one calls
 * {@link #recycle(NativeRangeHandle, Stream)} instead of handing the release to the reaper
 * thread, so the memory is reusable at once (by work ordered after the free).
 */
public interface StreamOrderedRecycler extends BufferRecycler {
    /**
     * The buffer was closed with {@code close(stream)}, on the calling thread, which holds a use
     * of {@code stream}; {@code stream} already waits ({@code cuStreamWaitEvent}) for the work the
     * buffer recorded on other streams. The recycler owns {@code range} from now on and must not
     * hand it to work that is not ordered after the work queued on {@code stream} so far. Called
     * exactly once per buffer (instead of {@link #recycle(NativeRangeHandle, boolean)}); must not
     * throw and must not block on the stream.
     */
    void recycle(NativeRangeHandle range, Stream stream);
}
