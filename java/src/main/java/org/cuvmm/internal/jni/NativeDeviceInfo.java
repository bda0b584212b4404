package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.MemberGetter;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;
import org.bytedeco.javacpp.annotation.StdString;

/** {@code cuvmm::jni::DeviceInfo}: what {@code device_info} read from the driver. */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::DeviceInfo")
public final class NativeDeviceInfo extends Pointer {
    static { NativeLibrary.load(); }

    public NativeDeviceInfo() { allocate(); }
    private native void allocate();

    public native @MemberGetter int ordinal();
    public native @MemberGetter @StdString String name();
    public native @MemberGetter @Cast("long long") long total_memory();
    public native @MemberGetter int vmm();
    public native @MemberGetter int posix_fd();
    public native @MemberGetter int gpu_direct_rdma();
    public native @MemberGetter int fabric();
    public native @MemberGetter int host_vmm();
    public native @MemberGetter int host_numa_vmm();
    public native @MemberGetter int compute_major();
    public native @MemberGetter int compute_minor();
}
