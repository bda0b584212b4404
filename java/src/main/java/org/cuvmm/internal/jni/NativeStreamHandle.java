package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;

/**
 * {@code cuvmm::jni::StreamHandle}: one reference to a native Stream box. {@link #deallocate()}
 * drops it; the last reference of an owned stream calls {@code cuStreamDestroy} (queued work
 * still completes). The owning {@code org.cuvmm.Stream} brackets every use with its
 * acquire/release, so a handle is never deallocated while a call uses it.
 */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::StreamHandle")
public final class NativeStreamHandle extends Pointer {
    static { NativeLibrary.load(); }

    public NativeStreamHandle() { allocate(); }
    private native void allocate();

    public native @Cast("bool") boolean empty();
    /** The raw {@code CUstream}. */
    public native @Cast("long long") long handle();
    public native int device();
}
