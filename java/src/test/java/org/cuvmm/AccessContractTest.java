package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.util.Map;

import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Probe: access settings of imports and read-only resources; never a crash, a CudaException instead. */
class AccessContractTest {
    @Test
    void anImportIsMappedWithTheImportingResourcesAccess() throws Exception {
        Assumptions.assumeTrue(TestSupport.onHostDriver(), "refused writes are asserted on the host driver only");
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource rw = VirtualMemoryResource.create(0);
             VirtualMemoryResource ro = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                     .selfAccess(AccessMode.READ).build());
             VirtualMemoryBuffer b = rw.allocate(MiB); BufferDescriptor d = b.exportDescriptor();
             VirtualMemoryBuffer imp = ro.importBuffer(d); Stream s = Stream.create(0)) {
            b.fill((byte) 5);
            assertEquals(AccessMode.READ, imp.access(0));
            byte[] x = new byte[1];
            imp.copyTo(x);
            assertEquals(5, x[0]);
            assertThrows(CudaException.class, () -> imp.copyFrom(new byte[1]));
            assertThrows(CudaException.class, () -> imp.fill((byte) 1));
            assertThrows(CudaException.class, () -> imp.fillAsync(0, 1, (byte) 1, s));
            assertThrows(CudaException.class, () -> imp.copyFrom(0, b, 100, 1));
            imp.copyTo(x);
            assertEquals(5, x[0], "a refused write changed the memory");
            try (VirtualMemoryBuffer own = ro.allocate(1)) {
                assertEquals(AccessMode.READ, own.access(0));
                assertThrows(CudaException.class, () -> own.copyFrom(new byte[1]));
                b.copyFrom(0, own, 0, 1); // reading it is fine
            }
            s.synchronize();
        }
        LiveObjects.assertBack(before, "after read-only probes");
    }
}
