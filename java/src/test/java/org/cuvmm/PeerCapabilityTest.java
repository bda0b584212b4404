package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.Test;

/** Driver.canAccessPeer (cuDeviceCanAccessPeer), which the gpu peer tests check first (audit A6). */
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
}
