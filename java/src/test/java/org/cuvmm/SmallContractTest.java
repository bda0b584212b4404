package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** Probe: small promises of Stream.Builder, BufferDescriptor.takeFds inside useFds, zero-length async ops. */
class SmallContractTest {
    @Test
    void streamBuilderClampsAndBuildsTwice() {
        Stream.Builder b = Stream.builder(0).priority(Integer.MIN_VALUE);
        try (Stream s1 = b.build(); Stream s2 = b.build(); Stream s3 = Stream.builder(1).priority(Integer.MAX_VALUE).build()) {
            assertNotEquals(s1.handle(), s2.handle());
            assertEquals(Integer.MIN_VALUE, s1.priority(), "the priority as built, before clamping");
            s3.synchronize();
            int[] range = Stream.priorityRange(0);
            assertEquals(2, range.length);
            assertTrue(range[1] <= range[0]);
        }
    }

    @Test
    void takeFdsInsideUseFdsIsRefusedAndTheDescriptorStaysUsable() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             BufferDescriptor d = b.exportDescriptor()) {
            d.useFds(f -> assertNames(assertThrows(IllegalStateException.class, d::takeFds), "in use"));
            assertFalse(d.isClosed());
            try (VirtualMemoryBuffer imp = r.importBuffer(d)) {
                assertTrue(imp.isImported());
            }
            int[] taken = d.takeFds();
            assertEquals(1, taken.length);
            BufferDescriptor.adoptFds(taken, d.sizes(), HandleType.POSIX_FD, d.size()).close();
        }
    }

    @Test
    void zeroLengthAsyncOpsAreNoOpsButStillCheckClosed() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             PinnedHostBuffer p = PinnedHostBuffer.allocate(16); Stream s = Stream.create(0)) {
            b.fillAsync(MiB, 0, (byte) 1, s);
            b.copyFromAsync(MiB, new byte[0], 0, 0, s);
            b.copyFromAsync(MiB, p, 16, 0, s);
            b.copyToAsync(0, p, 16, 0, s);
            s.synchronize();
            Stream closed = Stream.create(0);
            closed.close();
            assertThrows(IllegalStateException.class, () -> b.copyFromAsync(0, new byte[0], 0, 0, closed));
            assertThrows(IllegalStateException.class, () -> b.fillAsync(0, 0, (byte) 0, closed));
        }
    }
}
