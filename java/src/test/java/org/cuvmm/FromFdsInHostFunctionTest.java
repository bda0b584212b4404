package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;

/**
 * Inside a host function cuvmm refuses its own CUDA calls (Stream.launchHostFunction's
 * javadoc), and only those. BufferDescriptor.fromFds makes none (it duplicates fds with dup(2))
 * but took its status object from the one place that refuses, so in a host function it threw
 * IllegalStateException "called from a host function (expected: no CUDA call ...)", an
 * exception its javadoc does not list, while adoptFds (no CUDA call either) worked there.
 */
class FromFdsInHostFunctionTest {
    @Test
    void fromFdsWorksInAHostFunctionAndLeavesNoFd() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity());
             BufferDescriptor d = b.exportDescriptor();
             Stream s = Stream.create(0)) {
            Map<String, String> before = TestSupport.fdTargets();
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            AtomicInteger chunks = new AtomicInteger(-1);
            d.useFds(fds -> thrown.set(HostFunctionCallsTest.inHostFunction(s, () -> {
                try (BufferDescriptor copy = BufferDescriptor.fromFds(fds, d.sizes(), d.handleType(), d.size())) {
                    chunks.set(copy.chunkCount());
                }
            })));
            assertNull(thrown.get(), "fromFds in a host function (no CUDA call) threw");
            assertEquals(1, chunks.get());
            TestSupport.assertNoNewFds(before, "after fromFds and close in a host function");
        }
    }
}
