package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** fds (/proc/self/fd), host memfd mappings (/proc/self/maps) and live counters return to baseline. */
class ResourceAccountingTest {
    @Test
    void fdsAndMappingsReturnToBaselineAfterManyBuffers() throws Exception {
        cycle(null); // warm-up: classes and lazily opened JVM files are in place before the baseline
        cycle(this::checkWhileHeld);
    }

    private long memfds;

    private void checkWhileHeld(Map<String, Long> before) throws Exception {
        if (TestSupport.onHostDriver()) {
            assertEquals(memfds + 40, TestSupport.memfdFds(), "one memfd per live host allocation");
            assertEquals(TestSupport.counters().hostMemfds() - before.get("host memfds"), TestSupport.memfdFds() - memfds);
        }
    }

    private interface Check {
        void run(Map<String, Long> before) throws Exception;
    }

    private void cycle(Check whileHeld) throws Exception {
        Map<String, Long> before = LiveObjects.now();
        java.util.Map<String, String> fds = TestSupport.fdTargets();
        long maps = TestSupport.memfdMappings();
        memfds = TestSupport.memfdFds();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            List<VirtualMemoryBuffer> held = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                VirtualMemoryBuffer b = r.allocate((i + 1) * MiB);
                held.add(b);
                held.add(r.modifyAllocation(b, (i + 5) * MiB));
            }
            try {
                if (whileHeld != null) whileHeld.run(before);
            } finally {
                for (VirtualMemoryBuffer b : held) b.close();
            }
        }
        LiveObjects.assertBack(before, "after closing every buffer");
        assertEquals(memfds, TestSupport.memfdFds(), "memfds back to baseline");
        TestSupport.assertNoNewFds(fds, "after closing every buffer");
        assertEquals(maps, TestSupport.memfdMappings(), "memfd mappings back to baseline");
    }
}
