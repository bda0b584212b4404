package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

/** One event per async copy, shared by the buffer's and the pinned buffer's use tables. */
class CopyRecordsTest {
    @Test
    void aPinnedCopyRecordsOneEventInSteadyState() {
        final int rounds = 20;
        DriverCounters k = TestSupport.counters();
        long failures = k.cleanupFailures();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            PinnedHostBuffer p = PinnedHostBuffer.allocate(MiB);
            PinnedHostBuffer q = PinnedHostBuffer.allocate(MiB);
            b.fill((byte) 3);
            b.copyToAsync(0, p, 0, MiB, s); // first use on s: the tables get their (shared) event
            long records = k.calls("cuEventRecord");
            long creates = k.calls("cuEventCreate");
            for (int i = 0; i < rounds; i++) {
                b.copyToAsync(0, p, 0, MiB, s);
                b.copyFromAsync(0, p, 0, MiB, s);
            }
            assertEquals(2L * rounds, k.calls("cuEventRecord") - records, "one record per copy, shared by b and p");
            assertEquals(0, k.calls("cuEventCreate") - creates);
            p.close(); // waits for the shared event; b keeps its reference
            b.copyToAsync(0, q, 0, MiB, s); // q adopts b's event
            s.synchronize();
            assertEquals(3, q.asByteBuffer().get(7));
            q.close();
            b.fill(0, 1, (byte) 5); // a synchronous op waits on b's (still open) event
            byte[] back = new byte[2];
            b.copyTo(0, back, 0, 2);
            assertEquals(5, back[0]);
            assertEquals(3, back[1]);
        }
        assertEquals(failures, k.cleanupFailures(), "no teardown call failed");
    }
}
