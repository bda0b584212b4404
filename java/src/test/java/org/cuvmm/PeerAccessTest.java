package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.Test;

/**
 * Peer access between two devices. On the host driver the build runs with
 * cuvmm.host.devices=2 (java/pom.xml), and the driver checks per-device access on every copy.
 * A buffer-to-buffer copy runs in the destination's device context.
 */
class PeerAccessTest {
    @Test
    void peerWithReadAccessCanReadAndAStrangerCannot() {
        assumeTrue(Driver.get().deviceCount() >= 2,
                "needs two devices; this " + Driver.get().kind() + " driver has " + Driver.get().deviceCount());
        VirtualMemoryResourceOptions sharedWithOne = VirtualMemoryResourceOptions.builder()
                .peers(1).peerAccess(AccessMode.READ).build();
        try (VirtualMemoryResource onZero = VirtualMemoryResource.create(0, sharedWithOne);
             VirtualMemoryResource privateZero = VirtualMemoryResource.create(0);
             VirtualMemoryResource onOne = VirtualMemoryResource.create(1);
             VirtualMemoryBuffer shared = onZero.allocate(MiB);
             VirtualMemoryBuffer secret = privateZero.allocate(MiB);
             VirtualMemoryBuffer target = onOne.allocate(MiB)) {
            byte[] data = org.cuvmm.testing.TestData.pattern(4096, 5);
            shared.copyFrom(data);
            target.copyFrom(0, shared, 0, data.length); // device 1 reads device 0's peer-readable memory
            byte[] back = new byte[data.length];
            target.copyTo(0, back, 0, back.length);
            assertArrayEquals(data, back);

            // A copy by device 1 from memory it was granted no access to would be a device fault
            // on a GPU (sticky CUDA_ERROR_ILLEGAL_ADDRESS): cuvmm refuses it itself, before any
            // driver call (audit A4), so this runs on every driver.
            long copies = Driver.get().counters().calls("cuMemcpyDtoDAsync");
            CudaException denied = assertThrows(CudaException.class, () -> target.copyFrom(0, secret, 0, 16));
            assertEquals("cuMemcpyDtoDAsync", denied.call()); // synchronous copies run on cuvmm's own stream
            assertEquals("CUDA_ERROR_INVALID_VALUE", denied.resultName());
            assertEquals(copies, Driver.get().counters().calls("cuMemcpyDtoDAsync"), "refused before the driver");
        }
    }
}
