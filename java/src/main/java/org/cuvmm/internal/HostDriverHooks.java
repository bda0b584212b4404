package org.cuvmm.internal;

import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * Settings of the host driver that tests change at run time. Not API (the package is not
 * exported): the system property {@code cuvmm.host.streamDelayMicros} is the supported way to
 * set the delay for a whole run.
 */
public final class HostDriverHooks {
    private HostDriverHooks() {}

    /**
     * Every op queued on a host-driver stream from now on sleeps {@code micros} before it runs
     * ({@code host_set_stream_delay_micros}; 0 turns it off), so that a missing synchronization
     * reads stale data instead of winning the race by chance. A delay above 0 also turns off the
     * host driver's inline path (a copy or fill of at most 4 MiB on an idle stream runs on the
     * calling thread before the call returns), which would otherwise hide most such bugs.
     *
     * @throws IllegalArgumentException when {@code micros} is negative
     * @throws org.cuvmm.CudaException ({@code CUDA_ERROR_NOT_SUPPORTED}) on the cuda driver
     */
    public static void setStreamDelayMicros(long micros) {
        Checks.nonNegative("micros", micros);
        org.cuvmm.Driver.get();
        NativeStatus st = NativeCalls.status();
        NativeApi.host_stream_delay(micros, st);
        NativeCalls.check(st);
    }

    /**
     * What {@code cuDeviceCanAccessPeer(device, peer)} ({@link org.cuvmm.Driver#canAccessPeer})
     * answers from now on for two distinct host devices ({@code host_set_peer_access}); every
     * pair answers true until set. Only the answer changes: the host driver's
     * {@code cuMemSetAccess} does not model the refusal.
     *
     * @throws org.cuvmm.CudaException ({@code CUDA_ERROR_NOT_SUPPORTED}) on the cuda driver;
     *     ({@code CUDA_ERROR_INVALID_VALUE}) when the two are not distinct devices
     */
    public static void setPeerAccess(int device, int peer, boolean can) {
        org.cuvmm.Driver.get();
        NativeStatus st = NativeCalls.status();
        NativeApi.host_peer_access(device, peer, can, st);
        NativeCalls.check(st);
    }

    /**
     * The next {@code cuEventRecord} on the stream whose raw handle is {@code stream}
     * ({@code Stream.handle()}, a created stream) fails with {@code code} (a {@code CUresult})
     * without recording, once; {@code code} 0 disarms. Lets a test take the path of a record
     * that fails after its op was queued. Unarmed, it costs the host driver's cuEventRecord one
     * relaxed atomic load.
     *
     * @throws org.cuvmm.CudaException ({@code CUDA_ERROR_NOT_SUPPORTED}) on the cuda driver
     */
    public static void failNextEventRecord(long stream, int code) {
        org.cuvmm.Driver.get();
        NativeStatus st = NativeCalls.status();
        NativeApi.host_fail_next_event_record(stream, code, st);
        NativeCalls.check(st);
    }
}
