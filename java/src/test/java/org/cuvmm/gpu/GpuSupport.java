package org.cuvmm.gpu;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import java.util.Locale;
import java.util.Map;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.DriverKind;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Assumptions;

/**
 * Helpers of the gpu-tagged tests: they run only where the selected driver is the NVIDIA
 * driver, and skip with the driver's own reason everywhere else.
 */
final class GpuSupport {
    private GpuSupport() {}

    /**
     * The running driver when it is CUDA; otherwise aborts the calling test with the reason.
     * When cuda is forced and cannot load, {@link Driver#get()} throws: that is a failure,
     * not a skip (the run asked for the real driver and did not get it).
     */
    static Driver assumeCuda() {
        Driver d = Driver.get();
        Assumptions.assumeTrue(d.kind() == DriverKind.CUDA, () -> "needs the NVIDIA driver (cuda); this JVM runs the "
                + d.kind().name().toLowerCase(Locale.ROOT) + " driver: " + d.reason());
        return d;
    }

    /** Aborts the calling test unless the driver has at least {@code n} devices. */
    static void assumeDevices(Driver d, int n) {
        Assumptions.assumeTrue(d.deviceCount() >= n, () -> "needs " + n + " or more devices; the "
                + d.kind().name().toLowerCase(Locale.ROOT) + " driver reports " + d.deviceCount() + ": " + d.devices());
    }

    /**
     * Aborts the calling test unless devices {@code a} and {@code b} exist and each can
     * directly access the other's memory (cuDeviceCanAccessPeer both ways): granting a peer
     * access it cannot have fails cuMemSetAccess, which is not what a peer test tests (audit A6).
     */
    static void assumePeers(Driver d, int a, int b) {
        assumeDevices(d, Math.max(a, b) + 1);
        boolean ab = d.canAccessPeer(a, b), ba = d.canAccessPeer(b, a);
        Assumptions.assumeTrue(ab && ba, () -> "needs devices " + a + " and " + b + " to be peer-capable both ways; "
                + "cuDeviceCanAccessPeer(" + a + ", " + b + ") = " + ab + ", (" + b + ", " + a + ") = " + ba + ": "
                + d.devices());
    }

    /**
     * The end of a gpu test that opened {@code resource} after taking {@code liveBefore}:
     * closes it and checks that every live object is back and the host driver's counters stayed
     * 0. Nothing when {@code resource} is null (skipped before it was opened).
     */
    static void closeAndCheckNothingLeft(VirtualMemoryResource resource, Map<String, Long> liveBefore) {
        if (resource == null) return;
        resource.close();
        LiveObjects.assertBack(liveBefore, "after the test closed its buffers");
        assertHostCountersZero();
    }

    /** The host driver's own counters stay 0 while the cuda driver runs. */
    static void assertHostCountersZero() {
        DriverCounters c = Driver.get().counters();
        assertEquals("[0, 0, 0, 0]", Arrays.toString(new long[] {c.hostAllocations(), c.hostReservations(),
                c.hostMappings(), c.hostMemfds()}), "host-driver counters [allocations, reservations, mappings, memfds] "
                + "on the cuda driver");
    }

    static void assertContent(VirtualMemoryBuffer b, long offset, byte[] expected) {
        byte[] back = new byte[expected.length];
        b.copyTo(offset, back, 0, back.length);
        assertArrayEquals(expected, back, "content at offset " + offset + " of " + b);
    }

    /**
     * A granularity-aligned address with at least {@code bytes} free after it: a probe
     * allocation's address, released again. A resource with this address hint places its
     * first reservation there, so the range after it is free for an in-place grow.
     */
    static long freeRegion(long bytes) {
        try (VirtualMemoryResource probe = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = probe.allocate(bytes)) {
            return b.address();
        }
    }

    static VirtualMemoryResource resourceAt(long hint) {
        return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().addressHint(hint).build());
    }
}
