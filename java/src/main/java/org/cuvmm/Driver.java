package org.cuvmm;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;

import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.NativeFirstLoad;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeDeviceInfo;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * The driver this process runs on: the NVIDIA driver ({@link DriverKind#CUDA}) or cuvmm's
 * strict host driver ({@link DriverKind#HOST}). Chosen once per process, on first use.
 *
 * <table class="striped">
 * <caption>Configuration (system property, else environment variable)</caption>
 * <tr><th>property</th><th>variable</th><th>values</th></tr>
 * <tr><td>cuvmm.driver</td><td>CUVMM_DRIVER</td><td>auto (default): cuda when libcuda.so.1 loads and
 *     reports a device, else host; cuda: fail if it cannot load; host</td></tr>
 * <tr><td>cuvmm.host.devices</td><td>CUVMM_HOST_DEVICES</td><td>devices the host driver presents, 1 to 8
 *     (default 1)</td></tr>
 * <tr><td>cuvmm.host.granularity</td><td>CUVMM_HOST_GRANULARITY</td><td>host driver granularity in bytes,
 *     a power of two of at least 4096 (default 2097152, like a GPU)</td></tr>
 * <tr><td>cuvmm.host.streamDelayMicros</td><td>CUVMM_HOST_STREAM_DELAY_MICROS</td><td>microseconds the host
 *     driver sleeps before each queued stream operation (default 0), so that a missing synchronization
 *     reads stale data in tests; any delay also stops the host driver from running a small copy or
 *     fill (at most 4 MiB) on an idle stream at once on the calling thread, which it does without one</td></tr>
 * <tr><td>cuvmm.cuda.library</td><td>CUVMM_CUDA_LIBRARY</td><td>the library to dlopen (default
 *     libcuda.so.1)</td></tr>
 * </table>
 *
 * <p>Thread-safe. {@link #reason()} says why this driver runs (or why cuda did not load),
 * which {@code cuvmm info} prints.
 */
public final class Driver {
    private static volatile Driver instance;

    private final DriverKind kind;
    private final String reason;
    private final int version;
    private final List<Device> devices;
    private final boolean hostLibrary;

    private Driver(DriverKind kind, String reason, int version, List<Device> devices, boolean hostLibrary) {
        this.kind = kind;
        this.reason = reason;
        this.version = version;
        this.devices = devices;
        this.hostLibrary = hostLibrary;
    }

    /**
     * The driver of this process, selected from the configuration on first call.
     *
     * @throws CudaException when {@code cuvmm.driver=cuda} and the NVIDIA driver cannot be
     *     loaded (the message says why); {@code CUDA_ERROR_OUT_OF_MEMORY} when the first call
     *     finds the process at its file descriptor limit (cuvmm's native library is not loaded
     *     with fewer than 8 fds free, plus one per class-path jar not open yet; the message names
     *     RLIMIT_NOFILE; a later call tries again)
     */
    public static Driver get() {
        Driver d = instance;
        if (d != null) return d;
        return select(setting("cuvmm.driver", "CUVMM_DRIVER", "auto"));
    }

    /**
     * Selects the driver explicitly: {@code "auto"}, {@code "cuda"} or {@code "host"}. Must
     * come before anything else uses the driver; selecting the kind already running returns it.
     *
     * @throws IllegalArgumentException for an unknown mode or bad host settings
     * @throws CudaException when cuda is forced and cannot load, or another kind already runs;
     *     at the file descriptor limit as {@link #get()}
     */
    public static synchronized Driver select(String mode) {
        int modeCode;
        switch (String.valueOf(mode).trim().toLowerCase(Locale.ROOT)) {
            case "auto": modeCode = 0; break;
            case "cuda": modeCode = 1; break;
            case "host": modeCode = 2; break;
            default:
                throw new IllegalArgumentException("driver mode: " + mode + " (expected: auto, cuda or host; "
                        + "set with -Dcuvmm.driver or CUVMM_DRIVER)");
        }
        int hostDevices = intSetting("cuvmm.host.devices", "CUVMM_HOST_DEVICES", 1);
        long hostGranularity = longSetting("cuvmm.host.granularity", "CUVMM_HOST_GRANULARITY", 2L << 20);
        // Checked here, not only by the native selection: that one knows no property name, and
        // its refusal was a CudaException naming "host granularity" (an independent review).
        if (hostGranularity < 4096 || Long.bitCount(hostGranularity) != 1) {
            throw new IllegalArgumentException("cuvmm.host.granularity / CUVMM_HOST_GRANULARITY: " + hostGranularity
                    + " (expected: a power of two >= 4096 bytes, for example 2097152, the default)");
        }
        long hostStreamDelay = longSetting("cuvmm.host.streamDelayMicros", "CUVMM_HOST_STREAM_DELAY_MICROS", 0);
        if (hostStreamDelay < 0) {
            throw new IllegalArgumentException("cuvmm.host.streamDelayMicros / CUVMM_HOST_STREAM_DELAY_MICROS: "
                    + hostStreamDelay + " (expected: 0 or more microseconds)");
        }
        String library = setting("cuvmm.cuda.library", "CUVMM_CUDA_LIBRARY", "");
        // Before the first class that loads native code: none may initialize (and break for
        // good) at the fd limit.
        NativeFirstLoad.ensure();
        NativeStatus st = NativeCalls.status();
        int kindCode = NativeApi.select_driver(modeCode, hostDevices, hostGranularity, hostStreamDelay, library, st);
        NativeCalls.check(st);
        if (instance != null && instance.kind.ordinal() + 1 == kindCode) return instance;
        DriverKind kind = kindCode == 1 ? DriverKind.CUDA : DriverKind.HOST;
        int count = NativeApi.device_count(st);
        NativeCalls.check(st);
        List<Device> list = new ArrayList<>(count);
        NativeDeviceInfo info = new NativeDeviceInfo();
        try {
            for (int i = 0; i < count; i++) {
                NativeApi.device_info(i, info, st);
                NativeCalls.check(st);
                list.add(new Device(i, info.name(), info.total_memory(), info.vmm() != 0, info.posix_fd() != 0,
                        info.gpu_direct_rdma() != 0, info.fabric() != 0, info.host_vmm() != 0,
                        info.host_numa_vmm() != 0, info.compute_major(), info.compute_minor()));
            }
        } finally {
            info.close();
        }
        Driver d = new Driver(kind, NativeApi.driver_reason(), NativeApi.driver_version(),
                Collections.unmodifiableList(list), NativeApi.driver_is_host_library());
        // What closing and releasing need, loaded with the driver: a process at its open-file
        // limit must still be able to close (ReleasePathClasses; CloseAtFdLimitTest).
        ReleasePathClasses.load();
        instance = d;
        return d;
    }

    /**
     * The driver mode the configuration asks for and where that came from, for diagnostics:
     * "host (system property cuvmm.driver)", "auto (default: ...)".
     */
    public static String requestedMode() {
        String property = System.getProperty("cuvmm.driver");
        if (property != null && !property.isBlank()) return property.trim() + " (system property cuvmm.driver)";
        String variable = System.getenv("CUVMM_DRIVER");
        if (variable != null && !variable.isBlank()) return variable.trim() + " (environment variable CUVMM_DRIVER)";
        return "auto (default: cuda when libcuda.so.1 loads and reports a device, else host)";
    }

    public DriverKind kind() { return kind; }

    /** Why this driver runs, for example the dlopen error that made auto fall back to host. */
    public String reason() { return reason; }

    /**
     * Whether the cuda driver runs over cuvmm's host library ({@code libcuvmm-hostcuda.so}, the
     * CUDA driver API over the host driver, loaded as {@code libcuda.so.1} through
     * {@code cuvmm.cuda.library} or the library path) rather than the NVIDIA driver: the library
     * exports {@code cuvmmHostLibraryDescription}, which a real libcuda never has. When true,
     * nothing runs on a GPU: results prove the cuda code path (loader, ABI, call sequences,
     * error paths), never device behaviour or performance. Always false on the host driver.
     */
    public boolean isHostLibrary() { return hostLibrary; }

    /**
     * What runs, in one line for reports and {@code cuvmm info}: "NVIDIA driver (cuda)",
     * "cuda driver API over the host library (no GPU)" when {@link #isHostLibrary()}, or
     * "host driver (memfd/mmap simulation, no GPU)". Only the first is a GPU.
     */
    public String describe() {
        if (kind == DriverKind.HOST) return "host driver (memfd/mmap simulation, no GPU)";
        return hostLibrary ? "cuda driver API over the host library (no GPU)" : "NVIDIA driver (cuda)";
    }

    /** {@code cuDriverGetVersion}: 12040 for CUDA 12.4. */
    public int version() { return version; }

    /** {@link #version()} as "12.4". */
    public String versionString() { return version / 1000 + "." + (version % 1000) / 10; }

    public int deviceCount() { return devices.size(); }

    public List<Device> devices() { return devices; }

    /**
     * Whether {@code device} can directly access memory that lives on {@code peer}
     * ({@code cuDeviceCanAccessPeer}): only then may a resource on {@code peer} list
     * {@code device} among its peers. Always true between two distinct host-driver devices;
     * false for a device and itself.
     *
     * @throws IllegalArgumentException when either ordinal is not a device of this driver
     * @throws CudaException when the driver refuses the query
     */
    public boolean canAccessPeer(int device, int peer) {
        device(device);
        device(peer);
        NativeStatus st = NativeCalls.status();
        int can = NativeApi.can_access_peer(device, peer, st);
        NativeCalls.check(st);
        return can == 1;
    }

    /**
     * @throws IllegalArgumentException when {@code ordinal} is not a device of this driver
     */
    public Device device(int ordinal) {
        if (ordinal < 0 || ordinal >= devices.size()) {
            throw new IllegalArgumentException("device: " + ordinal + " (expected: 0 to " + (devices.size() - 1)
                    + " on the " + kind.name().toLowerCase(Locale.ROOT) + " driver"
                    + (kind == DriverKind.HOST ? "; CUVMM_HOST_DEVICES sets how many host devices exist" : "") + ")");
        }
        return devices.get(ordinal);
    }

    /** Call counters and live-object counters, for tests, benchmarks and diagnostics. */
    public DriverCounters counters() { return DriverCounters.INSTANCE; }

    /**
     * Registers {@code listener} to hear the id of every physical allocation of this process
     * that is really released from now on ({@code cuMemRelease} ran; see
     * {@link AllocationReleaseNotices} for what counts and where listeners run: on the thread
     * "cuvmm-release-notices", after the release, in release order, never on the releasing
     * thread). "From now on" is exact: the listener hears every release whose
     * {@code cuMemRelease} returned after this method returned and none that returned before
     * it was called, also when other listeners are still being told of earlier releases (a
     * release concurrent with the call may go either way). Ids are those of
     * {@link VirtualMemoryBuffer#allocationIds()}. Close the returned registration to stop;
     * with none registered, notices are off and a release costs one atomic load more.
     *
     * @param listener quick and non-blocking; what it throws is logged and ignored
     * @throws OutOfMemoryError (what {@link Thread#start()} throws) when no notice thread
     *     can be started; nothing was registered then
     */
    public AllocationReleaseNotices.Registration addAllocationReleaseListener(java.util.function.LongConsumer listener) {
        return AllocationReleaseNotices.add(org.cuvmm.internal.Checks.notNull("listener", listener));
    }

    @Override
    public String toString() {
        return "Driver[" + kind + (hostLibrary ? " over the host library" : "") + " " + versionString() + ", "
                + devices.size() + " device(s): " + reason + "]";
    }

    static String setting(String property, String variable, String fallback) {
        String v = System.getProperty(property);
        if (v == null || v.isBlank()) v = System.getenv(variable);
        return v == null || v.isBlank() ? fallback : v.trim();
    }

    private static int intSetting(String property, String variable, int fallback) {
        long v = longSetting(property, variable, fallback);
        if (v < 1 || v > 8) {
            throw new IllegalArgumentException(property + " / " + variable + ": " + v + " (expected: 1 to 8)");
        }
        return (int) v;
    }

    private static long longSetting(String property, String variable, long fallback) {
        String v = setting(property, variable, null);
        if (v == null) return fallback;
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(property + " / " + variable + ": " + v + " (expected: a whole number)", e);
        }
    }
}
