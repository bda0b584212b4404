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

    /**
     * True for a handle made by {@link #newReference}: JavaCPP keeps no deallocator for it,
     * and {@link #deallocate()} deletes it itself.
     */
    private boolean ownReference; // written once, in the constructor; read through the buffer's final field

    private NativeRangeHandle(long address) {
        this.address = address;
        this.ownReference = true;
    }

    /**
     * A new reference to {@code other}'s range, like {@link #NativeRangeHandle(NativeRangeHandle)},
     * made without JavaCPP's allocation machinery (no call back into Java, no entry in
     * JavaCPP's global deallocator list): the per-view path of {@code
     * VirtualMemoryBuffer.share} (issue 11, about 0.5 µs per view less). Its owner must call
     * {@link #deallocate()} exactly once, as for any handle; a handle that becomes
     * unreachable without it leaks its reference (the buffer's cleaner calls it for a leaked
     * buffer).
     *
     * @throws IllegalStateException when {@code other} is empty or native memory ran out
     */
    public static NativeRangeHandle newReference(NativeRangeHandle other) {
        long a = NativeApi.range_new_reference(other);
        if (a == 0) {
            throw new IllegalStateException(other.empty() ? "the range handle is empty (its buffer was released)"
                    : "out of native memory for a range reference");
        }
        try {
            return new NativeRangeHandle(a);
        } catch (Throwable t) { // OutOfMemoryError: nothing owns the copy yet
            NativeApi.range_delete_reference(a);
            throw t;
        }
    }

    /**
     * Drops this handle's reference: a handle from {@link #newReference} is deleted here
     * (once; its address is then 0, and native calls on it throw NullPointerException, as on
     * any deallocated JavaCPP pointer); any other goes through JavaCPP's deallocator.
     */
    @Override
    public void deallocate() {
        if (!ownReference) {
            super.deallocate();
            return;
        }
        long a;
        synchronized (this) { // deallocate is called once; the lock only makes a second call harmless
            a = address;
            address = 0;
        }
        if (a != 0) NativeApi.range_delete_reference(a);
    }

    /** As {@link #deallocate()} for a handle from {@link #newReference}; JavaCPP's close otherwise. */
    @Override
    public void close() {
        if (ownReference) deallocate();
        else super.close();
    }

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
    /**
     * {@link #exclusive()}, and with {@code keptInProcess} also never exported: whether the
     * pool may hand this memory to a new owner (see jni_api.hpp).
     */
    public native @Cast("bool") boolean reusable(@Cast("bool") boolean keptInProcess);
    public native @Cast("bool") boolean same_range(@Const @ByRef NativeRangeHandle other);
}
