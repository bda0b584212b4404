package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;

/**
 * {@code cuvmm::jni::EventHandle}: one reference to a native Event box; the last reference
 * calls {@code cuEventDestroy} (a pending record completes first). Used under the owner's
 * acquire/release like {@link NativeStreamHandle}.
 */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::EventHandle")
public final class NativeEventHandle extends Pointer {
    static { NativeLibrary.load(); }

    public NativeEventHandle() { allocate(); }
    private native void allocate();

    public native @Cast("bool") boolean empty();
    /** The raw {@code CUevent}. */
    public native @Cast("long long") long handle();
    public native int device();
}
