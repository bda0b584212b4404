package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;

/** {@code cuvmm::jni::SpecHandle}: one reference to an immutable native ChunkSpec. */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::SpecHandle")
public final class NativeSpecHandle extends Pointer {
    static { NativeLibrary.load(); }

    public NativeSpecHandle() { allocate(); }
    private native void allocate();

    public native @Cast("long long") long granularity();
}
