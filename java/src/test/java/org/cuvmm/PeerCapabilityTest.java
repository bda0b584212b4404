package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.cuvmm.internal.HostDriverHooks;
import org.junit.jupiter.api.Test;

/**
 * Driver.canAccessPeer (cuDeviceCanAccessPeer), which the gpu peer tests check first (audit A6),
 * and VirtualMemoryResource.create asks for each peer of device memory (row 25).
 */
class PeerCapabilityTest {
    @Test
    void hostDevicesArePeersOfEachOtherButNotOfThemselves() {
        Driver d = Driver.get();
        assumeTrue(d.kind() == DriverKind.HOST && d.deviceCount() >= 2,
                "needs the host driver with two devices; this is the " + d.kind() + " driver with " + d.deviceCount());
        long calls = d.counters().calls("cuDeviceCanAccessPeer");
        assertTrue(d.canAccessPeer(0, 1));
        assertTrue(d.canAccessPeer(1, 0));
        assertFalse(d.canAccessPeer(0, 0));
        assertTrue(d.counters().calls("cuDeviceCanAccessPeer") - calls == 3, "each query asks the driver");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> d.canAccessPeer(0, d.deviceCount()));
        assertTrue(e.getMessage().startsWith("device: " + d.deviceCount()), e.getMessage());
    }

    @Test
    void aPeerThatCannotReachTheDeviceIsRefusedWhenTheResourceIsCreated() {
        Driver d = Driver.get();
        assumeTrue(d.kind() == DriverKind.HOST && d.deviceCount() >= 2,
                "needs the host driver with two devices (its peer answer is set by a test hook); this is the "
                        + d.kind() + " driver with " + d.deviceCount());
        HostDriverHooks.setPeerAccess(1, 0, false); // device 1 cannot reach device 0's memory
        try {
            assertFalse(d.canAccessPeer(1, 0));
            assertTrue(d.canAccessPeer(0, 1), "the other way is untouched");
            long asked = d.counters().calls("cuDeviceCanAccessPeer");
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().peers(1).build()));
            assertTrue(e.getMessage().startsWith("peers: [1] (expected: devices that can access memory on device 0; "
                    + "cuDeviceCanAccessPeer says device 1 cannot"), e.getMessage());
            assertTrue(e.getMessage().contains("leave it out"), e.getMessage());
            assertTrue(d.counters().calls("cuDeviceCanAccessPeer") - asked == 1, "create asked the driver once");
            // Memory on device 1 that device 0 reaches, and device 0's memory without the peer: fine.
            // On a thread of its own: using device 1 makes its context current on the thread, and
            // later tests on this one count the driver calls that switch back.
            onAnotherThread(() -> {
                try (VirtualMemoryResource r = VirtualMemoryResource.create(1,
                        VirtualMemoryResourceOptions.builder().peers(0).build());
                     VirtualMemoryBuffer b = r.allocate(r.granularity())) {
                    b.fill((byte) 1);
                }
            });
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                assertTrue(r.granularity() > 0);
            }
            // Host-located memory needs no peer link: not asked, not refused.
            asked = d.counters().calls("cuDeviceCanAccessPeer");
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                    .locationType(LocationType.HOST).handleType(HandleType.NONE).peers(1).build());
                 VirtualMemoryBuffer b = r.allocate(r.granularity())) {
                b.fill((byte) 2);
            }
            assertTrue(d.counters().calls("cuDeviceCanAccessPeer") == asked, "host-located memory: not asked");
        } finally {
            HostDriverHooks.setPeerAccess(1, 0, true);
        }
        assertTrue(d.canAccessPeer(1, 0), "the hook set back");
    }

    @Test
    void thePeerHookRefusesWhatIsNotAPairOfDevices() {
        Driver d = Driver.get();
        assumeTrue(d.kind() == DriverKind.HOST && d.deviceCount() >= 2,
                "needs the host driver with two devices; this is the " + d.kind() + " driver with " + d.deviceCount());
        CudaException same = assertThrows(CudaException.class, () -> HostDriverHooks.setPeerAccess(0, 0, false));
        assertTrue(same.getMessage().contains("CUDA_ERROR_INVALID_VALUE"), same.getMessage());
        CudaException missing = assertThrows(CudaException.class,
                () -> HostDriverHooks.setPeerAccess(0, d.deviceCount(), false));
        assertTrue(missing.getMessage().contains("expected: two distinct devices"), missing.getMessage());
        assertFalse(d.canAccessPeer(0, 0));
    }

    private static void onAnotherThread(Runnable work) {
        java.util.concurrent.atomic.AtomicReference<Throwable> failed = new java.util.concurrent.atomic.AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                work.run();
            } catch (Throwable e) {
                failed.set(e);
            }
        }, "peer-test-device-1");
        t.start();
        try {
            t.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
        if (failed.get() != null) throw new AssertionError("on device 1: " + failed.get(), failed.get());
    }
}
