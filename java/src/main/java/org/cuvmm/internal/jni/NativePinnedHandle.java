package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.ByRef;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.Const;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;

/**
 * {@code cuvmm::jni::PinnedHandle}: one reference to pinned host memory. The last reference
 * frees it ({@code cuMemFreeHost}) or unregisters it ({@code cuMemHostUnregister}). A
 * {@code ByteBuffer} view holds a reference of its own ({@link #NativePinnedHandle(NativePinnedHandle)}).
 */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::PinnedHandle")
public final class NativePinnedHandle extends Pointer {
    static { NativeLibrary.load(); }

    public NativePinnedHandle() { allocate(); }
    private native void allocate();

    /** Another reference to the same memory. */
    public NativePinnedHandle(NativePinnedHandle other) { allocate(other); }
    private native void allocate(@Const @ByRef NativePinnedHandle other);

    public native @Cast("bool") boolean empty();
    public native @Cast("long long") long address();
    public native @Cast("long long") long size();
}
