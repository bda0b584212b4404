package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.ByRef;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.Const;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;

/**
 * {@code cuvmm::jni::RangeHandle}: one reference to a native Range. {@link #deallocate()}
 * drops the reference; the memory goes when the last reference (aliases, grows) goes.
 * Callers bracket every use with the owning buffer's acquire/release, so a handle is never
 * deallocated while a call is using it.
 */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::RangeHandle")
public final class NativeRangeHandle extends Pointer {
    static { NativeLibrary.load(); }

    public NativeRangeHandle() { allocate(); }
    private native void allocate();

    /** A new reference to the same range (an alias). */
    public NativeRangeHandle(NativeRangeHandle other) { allocate(other); }
    private native void allocate(@Const @ByRef NativeRangeHandle other);

    public native @Cast("bool") boolean empty();
    public native @Cast("long long") long address();
    public native @Cast("long long") long size();
    public native @Cast("long long") long mapped_size();
    public native int chunk_count();
    public native @Cast("long long") long chunk_size(int index);
    public native @Cast("long long") long chunk_address(int index);
    public native @Cast("bool") boolean any_imported();
    public native @Cast("bool") boolean chunk_imported(int index);
    public native int device();
    /** No alias, grow or view shares this range's memory (see jni_api.hpp). */
    public native @Cast("bool") boolean exclusive();
    public native @Cast("bool") boolean same_range(@Const @ByRef NativeRangeHandle other);
}
