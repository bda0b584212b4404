package org.cuvmm.internal.jni;

import java.nio.ByteBuffer;

import org.bytedeco.javacpp.annotation.ByRef;
import org.bytedeco.javacpp.annotation.Cast;
import org.bytedeco.javacpp.annotation.Const;
import org.bytedeco.javacpp.annotation.Namespace;
import org.bytedeco.javacpp.annotation.Properties;
import org.bytedeco.javacpp.annotation.Raw;
import org.bytedeco.javacpp.annotation.StdString;

/**
 * The free functions of {@code cuvmm::jni} (native/cuvmm/jni_api.hpp). None throws a C++
 * exception; failures come back in the {@link NativeStatus} argument. {@code @ByRef}
 * handle arguments that were deallocated arrive as a JavaCPP NullPointerException before
 * any native code runs.
 */
@Properties(inherit = NativeLibrary.class)
@Namespace("cuvmm::jni")
public final class NativeApi {
    static { NativeLibrary.load(); }

    private NativeApi() {}

    public static native int select_driver(int mode, int hostDevices, @Cast("long long") long hostGranularity,
                                           @Cast("long long") long hostStreamDelayMicros,
                                           @StdString String cudaLibrary, @ByRef NativeStatus status);
    public static native @StdString String driver_kind_name();
    public static native @StdString String driver_reason();
    public static native int driver_version();
    /** True when the cuda driver runs and is cuvmm's host library (libcuvmm-hostcuda.so: no GPU). */
    public static native boolean driver_is_host_library();
    public static native int device_count(@ByRef NativeStatus status);
    public static native void device_info(int ordinal, @ByRef NativeDeviceInfo out, @ByRef NativeStatus status);
    public static native int can_access_peer(int device, int peer, @ByRef NativeStatus status);

    public static native void build_spec(@ByRef NativeSpecHandle out, @Const @ByRef NativeSpecInput in,
                                         @ByRef NativeStatus status);
    public static native void allocate(@ByRef NativeRangeHandle out, @Const @ByRef NativeSpecHandle spec,
                                       @Cast("long long") long size, @ByRef NativeStatus status);
    public static native int grow(@ByRef NativeRangeHandle out, @Const @ByRef NativeRangeHandle in,
                                  @Const @ByRef NativeSpecHandle spec, @Cast("long long") long newSize,
                                  @ByRef NativeStatus status);

    public static native int chunk_access(@Const @ByRef NativeRangeHandle range, int chunk, int device,
                                          @ByRef NativeStatus status);

    /** See jni_api.hpp: a heap RangeHandle (its address) referring to {@code in}'s range; 0 when {@code in} is empty or out of memory. */
    public static native @Cast("long long") long range_new_reference(@Const @ByRef NativeRangeHandle in);
    /** Deletes a handle made by {@link #range_new_reference}; 0 is ignored. */
    public static native void range_delete_reference(@Cast("long long") long handle);
    public static native int export_chunk_count(@Const @ByRef NativeRangeHandle range);
    public static native int export_fds(@Const @ByRef NativeRangeHandle range, int[] outFds,
                                        @Cast("long long*") long[] outSizes, int capacity, @ByRef NativeStatus status);
    public static native void import_fds(@ByRef NativeRangeHandle out, @Const @ByRef NativeSpecHandle spec,
                                         @Cast("const int*") int[] fds, @Cast("const long long*") long[] sizes, int count,
                                         @Cast("long long") long size, @ByRef NativeStatus status);
    public static native int fd_dup(int fd, @ByRef NativeStatus status);
    public static native @Cast("bool") boolean fd_valid(int fd);
    public static native @Cast("bool") boolean fd_owned_by_driver(int fd);
    public static native int fd_close(int fd);
    /**
     * See jni_file_mappings.hpp: 1 when {@code buffer} is a file mapping ({@code FileChannel.map},
     * or a slice or view of one), 0 for other memory, -1 when this JDK does not say.
     */
    public static native int file_mapping_state(@Raw(withEnv = true) ByteBuffer buffer);
    /** See jni_api.hpp: a checked copy out of a file mapping; the bytes copied, or -errno. */
    public static native @Cast("long long") long mapping_read(@Cast("long long") long dst, @Cast("long long") long mapping,
                                                             @Cast("long long") long bytes);
    /** See jni_api.hpp: a checked copy into a file mapping; the bytes copied, or -errno. */
    public static native @Cast("long long") long mapping_write(@Cast("long long") long mapping, @Cast("long long") long src,
                                                              @Cast("long long") long bytes);

    // No Java array crosses this boundary: array copies are staged in Java
    // (org.cuvmm.internal.ArrayCopies) and arrive here as the address of a direct buffer, so
    // no JNI critical region ever spans a driver call (docs/VMM_DESIGN.md section 10).
    public static native void write_address(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long offset,
                                            @Cast("long long") long address, @Cast("long long") long bytes,
                                            @ByRef NativeStatus status);
    public static native void read_address(@Const @ByRef NativeRangeHandle src, @Cast("long long") long offset,
                                           @Cast("long long") long address, @Cast("long long") long bytes,
                                           @ByRef NativeStatus status);
    public static native void copy_range(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long dstOffset,
                                         @Const @ByRef NativeRangeHandle src, @Cast("long long") long srcOffset,
                                         @Cast("long long") long bytes, @ByRef NativeStatus status);
    public static native void fill(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long offset,
                                   @Cast("long long") long bytes, int value, @ByRef NativeStatus status);

    // ---- streams, events, host functions, pinned memory (native/cuvmm/stream.hpp) ----
    public static native void stream_create(@ByRef NativeStreamHandle out, int device, int nonBlocking, int priority,
                                            @ByRef NativeStatus status);
    public static native void stream_default(@ByRef NativeStreamHandle out, int device, int which,
                                             @ByRef NativeStatus status);
    public static native void stream_priority_range(int device, int[] out, @ByRef NativeStatus status);
    public static native void stream_synchronize(@Const @ByRef NativeStreamHandle stream, @ByRef NativeStatus status);
    public static native int stream_query(@Const @ByRef NativeStreamHandle stream, @ByRef NativeStatus status);
    public static native void stream_wait_event(@Const @ByRef NativeStreamHandle stream,
                                                @Const @ByRef NativeEventHandle event, @ByRef NativeStatus status);
    public static native void event_create(@ByRef NativeEventHandle out, int device, int timing,
                                           @ByRef NativeStatus status);
    public static native void event_record(@Const @ByRef NativeEventHandle event,
                                           @Const @ByRef NativeStreamHandle stream, @ByRef NativeStatus status);
    public static native void event_synchronize(@Const @ByRef NativeEventHandle event, @ByRef NativeStatus status);
    public static native int event_query(@Const @ByRef NativeEventHandle event, @ByRef NativeStatus status);
    public static native float event_elapsed(@Const @ByRef NativeEventHandle start,
                                             @Const @ByRef NativeEventHandle end, @ByRef NativeStatus status);
    public static native void launch_host_function(@Const @ByRef NativeStreamHandle stream,
                                                   @Cast("long long") long token, @ByRef NativeStatus status);
    /** Blocks in native code up to {@code timeoutMillis}; 0 when no host function was posted. */
    public static native @Cast("long long") long next_host_function(@Cast("long long") long timeoutMillis);
    public static native void host_function_done(@Cast("long long") long token);
    public static native @Cast("long long") long host_functions_pending();
    public static native void pinned_allocate(@ByRef NativePinnedHandle out, @Cast("long long") long bytes,
                                              @ByRef NativeStatus status);
    public static native void pinned_register(@ByRef NativePinnedHandle out, @Cast("long long") long address,
                                              @Cast("long long") long bytes, @ByRef NativeStatus status);

    // ---- stream-ordered data: queued on the stream, returning when queued ----
    // record1 / record2 (null: none): events recorded on the stream right after the op, in the
    // same native call and context scope. A deallocated handle reaches native as null, i.e. "no
    // record": callers refuse one before the call (AsyncCopies.recordable). Returns 1 when the op was queued (also when a record
    // then failed: the caller waits for the stream before throwing), else 0.
    public static native int write_pinned_async(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long offset,
                                                @Const @ByRef NativePinnedHandle src, @Cast("long long") long srcOffset,
                                                @Cast("long long") long bytes, @Const @ByRef NativeStreamHandle stream,
                                                @Const NativeEventHandle record1, @Const NativeEventHandle record2,
                                                @ByRef NativeStatus status);
    public static native int read_pinned_async(@Const @ByRef NativeRangeHandle src, @Cast("long long") long offset,
                                               @Const @ByRef NativePinnedHandle dst, @Cast("long long") long dstOffset,
                                               @Cast("long long") long bytes, @Const @ByRef NativeStreamHandle stream,
                                               @Const NativeEventHandle record1, @Const NativeEventHandle record2,
                                               @ByRef NativeStatus status);
    public static native int copy_range_async(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long dstOffset,
                                              @Const @ByRef NativeRangeHandle src, @Cast("long long") long srcOffset,
                                              @Cast("long long") long bytes, @Const @ByRef NativeStreamHandle stream,
                                              @Const NativeEventHandle record1, @Const NativeEventHandle record2,
                                              @ByRef NativeStatus status);
    public static native int fill_async(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long offset,
                                        @Cast("long long") long bytes, int value,
                                        @Const @ByRef NativeStreamHandle stream, @Const NativeEventHandle record1,
                                        @Const NativeEventHandle record2, @ByRef NativeStatus status);

    // ---- the synchronous copies' path: queued on cuvmm's internal stream, then that stream only is waited for ----
    public static native void write_address_on(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long offset,
                                               @Cast("long long") long address, @Cast("long long") long bytes,
                                               @Const @ByRef NativeStreamHandle stream, @ByRef NativeStatus status);
    public static native void read_address_on(@Const @ByRef NativeRangeHandle src, @Cast("long long") long offset,
                                              @Cast("long long") long address, @Cast("long long") long bytes,
                                              @Const @ByRef NativeStreamHandle stream, @ByRef NativeStatus status);
    public static native void copy_range_on(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long dstOffset,
                                            @Const @ByRef NativeRangeHandle src, @Cast("long long") long srcOffset,
                                            @Cast("long long") long bytes, @Const @ByRef NativeStreamHandle stream,
                                            @ByRef NativeStatus status);
    public static native void fill_on(@Const @ByRef NativeRangeHandle dst, @Cast("long long") long offset,
                                      @Cast("long long") long bytes, int value,
                                      @Const @ByRef NativeStreamHandle stream, @ByRef NativeStatus status);
    /** Host driver only (tests): every queued op sleeps {@code micros} before it runs. */
    public static native void host_stream_delay(@Cast("long long") long micros, @ByRef NativeStatus status);
    /** Host driver only (tests): what cuDeviceCanAccessPeer(device, peer) answers for two distinct devices. */
    public static native void host_peer_access(int device, int peer, @Cast("bool") boolean can,
                                               @ByRef NativeStatus status);
    /** Host driver only (tests): the next cuEventRecord on raw stream {@code stream} returns {@code code}, once; 0 disarms. */
    public static native void host_fail_next_event_record(@Cast("long long") long stream, int code,
                                                          @ByRef NativeStatus status);

    public static native int entry_count();
    public static native @StdString String entry_name(int index);
    public static native @Cast("long long") long call_count(int index);
    public static native void reset_call_counts();
    public static native @Cast("long long") long host_live(int what);
    public static native @Cast("long long") long object_live(int what);
    public static native @Cast("long long") long cleanup_failures();

    // ---- steady-state sharing support (issue 11; jni_api.hpp) ----
    /** Ids of the range's chunks into {@code out}; returns the chunk count. No driver call. */
    public static native int allocation_ids(@Const @ByRef NativeRangeHandle range, @Cast("long long*") long[] out,
                                            int capacity);
    /** 1 when the two windows share memory (one allocation at overlapping offsets), else 0. No driver call. */
    public static native int windows_overlap(@Const @ByRef NativeRangeHandle a, @Cast("long long") long aOffset,
                                             @Const @ByRef NativeRangeHandle b, @Cast("long long") long bOffset,
                                             @Cast("long long") long bytes);
    public static native int export_chunk_fds(@Const @ByRef NativeRangeHandle range, @Cast("const int*") int[] chunks,
                                              int count, int[] outFds, @Cast("long long*") long[] outSizes,
                                              @ByRef NativeStatus status);
    public static native void release_notices(int on);
    /**
     * Blocks in native code up to {@code timeoutMillis}; {@code out} (ids) and {@code sequences}
     * (their release sequence numbers) are native memory, never pinned arrays.
     */
    public static native int take_released_allocations(@Cast("long long*") org.bytedeco.javacpp.LongPointer out,
                                                       @Cast("long long*") org.bytedeco.javacpp.LongPointer sequences,
                                                       int capacity, @Cast("long long") long timeoutMillis);
    /** The release sequence number of the last id queued (0: none yet). */
    public static native @Cast("long long") long release_notice_sequence();
}
