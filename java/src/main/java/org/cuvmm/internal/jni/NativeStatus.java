package org.cuvmm.internal.jni;

import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.annotation.MemberGetter;
import org.bytedeco.javacpp.annotation.Name;
import org.bytedeco.javacpp.annotation.Properties;
import org.bytedeco.javacpp.annotation.StdString;

/** {@code cuvmm::jni::Status}: the outcome of one native call; code 0 is success. */
@Properties(inherit = NativeLibrary.class)
@Name("cuvmm::jni::Status")
public final class NativeStatus extends Pointer {
    static { NativeLibrary.load(); }

    public NativeStatus() { allocate(); }
    private native void allocate();

    public native @MemberGetter int code();
    public native @MemberGetter @StdString String name();
    public native @MemberGetter @StdString String call();
    public native @MemberGetter @StdString String step();
    public native @MemberGetter @StdString String message();
}
