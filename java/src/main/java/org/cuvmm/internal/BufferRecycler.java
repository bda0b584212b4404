package org.cuvmm.internal;

import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * Takes back the native range of a closed (or leaked) pooled buffer instead of letting it
 * be released. Called exactly once per buffer, on the closing thread or the cleaner thread;
 * must not throw.
 */
public interface BufferRecycler {
    /**
     * @param range the range, now owned by the recycler
     * @param leaked true when the buffer was found unreachable without being closed
     */
    void recycle(NativeRangeHandle range, boolean leaked);
}
