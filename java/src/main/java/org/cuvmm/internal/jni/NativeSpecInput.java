package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.MemberSetter;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;

/** {@code cuvmm::jni::SpecInput}: resource options as plain fields, read by {@code build_spec}. */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::SpecInput")
public final class NativeSpecInput extends Pointer {
    static { NativeLibrary.load(); }

    public NativeSpecInput() { allocate(); }
    private native void allocate();

    public native @MemberSetter NativeSpecInput allocation_type(int value);
    public native @MemberSetter NativeSpecInput location_type(int value);
    public native @MemberSetter NativeSpecInput location_id(int value);
    public native @MemberSetter NativeSpecInput handle_types(int value);
    public native @MemberSetter NativeSpecInput gpu_direct_rdma(int value);
    public native @MemberSetter NativeSpecInput granularity_option(int value);
    public native @MemberSetter NativeSpecInput device(int value);
    public native @MemberSetter NativeSpecInput address_hint(@Cast("long long") long value);
    public native @MemberSetter NativeSpecInput alignment(@Cast("long long") long value);
    public native @Cast("bool") boolean add_access(int locationType, int locationId, int flags);
}
