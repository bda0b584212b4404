package org.cuvmm;

import static org.cuvmm.StreamTestSupport.gate;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/** The reaper ("cuvmm-stream-release"): releases run when their events completed, in any order. */
class StreamOrderedReleaseTest {
    @Test
    void aReleaseBehindAHeldStreamDoesNotHoldUpALaterOne() throws Exception {
        try (Stream a = Stream.builder(0).nonBlocking(true).build();
             Stream b = Stream.builder(0).nonBlocking(true).build();
             Event onA = Event.builder(0).timing(false).build();
             Event onB = Event.builder(0).timing(false).build()) {
            CountDownLatch hold = gate(a);
            onA.record(a); // pending until the gate opens
            CountDownLatch heldRan = new CountDownLatch(1);
            CountDownLatch freeRan = new CountDownLatch(1);
            StreamOrderedRelease.later("held", List.of(onA), heldRan::countDown);
            onB.record(b);
            StreamOrderedRelease.later("free", List.of(onB), freeRan::countDown);
            // Before polling: the reaper sat in cuEventSynchronize(onA), and this timed out.
            boolean laterRanFirst = freeRan.await(StreamTestSupport.WAIT_SECONDS, TimeUnit.SECONDS);
            long heldBefore = heldRan.getCount();
            hold.countDown();
            StreamTestSupport.await(heldRan, "the held release, once its stream went on");
            assertTrue(laterRanFirst, "the release whose event completed ran while an earlier one was held");
            assertEquals(1, heldBefore, "the held release did not run early");
        }
    }
}
