package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/** AllocationReleaseNotices' javadoc (and Driver.addAllocationReleaseListener's), read as a user would. */
class AllocationReleaseNoticesJavadocContractTest {
    private static List<Long> takeUntil(BlockingQueue<Long> q, long sentinel) throws InterruptedException {
        List<Long> seen = new ArrayList<>();
        for (;;) {
            Long id = q.poll(30, TimeUnit.SECONDS);
            assertNotNull(id, "no notice for " + sentinel + " in 30 s; heard " + seen);
            if (id == sentinel) return seen;
            seen.add(id);
        }
    }

    /**
     * "the allocation id of each allocation whose cuMemRelease ran": a buffer of several chunks
     * reports every one of its allocation ids, each once, in release order before a later release.
     */
    @Test
    void everyChunkOfAClosedBufferIsReportedOnce() throws Exception {
        BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer small = r.allocate(1);
            VirtualMemoryBuffer grown = r.modifyAllocation(small, 3 * r.granularity());
            long[] ids = grown.allocationIds();
            assertTrue(ids.length >= 2, "grown buffer has " + ids.length + " chunks");
            small.close();
            grown.close();
            VirtualMemoryBuffer later = r.allocate(1);
            long sentinel = later.allocationIds()[0];
            later.close();
            List<Long> seen = takeUntil(notices, sentinel);
            for (long id : ids) {
                assertEquals(1, seen.stream().filter(x -> x == id).count(), "id " + id + " heard " + seen);
            }
            assertEquals(ids.length, seen.size(), "heard " + seen + " for " + java.util.Arrays.toString(ids));
        }
    }

    /** Registration: close() "Idempotent"; isClosed() false while registered, true after. */
    @Test
    void registrationCloseIsIdempotent() {
        AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(id -> {});
        assertFalse(reg.isClosed());
        reg.close();
        assertTrue(reg.isClosed());
        reg.close();
        assertTrue(reg.isClosed());
    }

    /**
     * "Closing the registration stops it: no notice reaches it once Registration.close()
     * returned": a closed registration hears nothing of a release after, while one still
     * registered does (the sentinel proves delivery got past it).
     */
    @Test
    void aClosedRegistrationHearsNothingLater() throws Exception {
        BlockingQueue<Long> closedOne = new LinkedBlockingQueue<>();
        BlockingQueue<Long> open = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration keep = Driver.get().addAllocationReleaseListener(open::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(closedOne::add);
            reg.close();
            VirtualMemoryBuffer b = r.allocate(1);
            long id = b.allocationIds()[0];
            b.close();
            takeUntil(open, id);
            assertTrue(closedOne.isEmpty(), "a closed registration heard " + closedOne);
        }
    }

    /** "An allocation released while no listener was registered is never reported." */
    @Test
    void aReleaseWithNoListenerIsNeverReported() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer before = r.allocate(1);
            long beforeId = before.allocationIds()[0];
            before.close(); // cuMemRelease returned before the registration below began
            BlockingQueue<Long> notices = new LinkedBlockingQueue<>();
            try (AllocationReleaseNotices.Registration reg = Driver.get().addAllocationReleaseListener(notices::add)) {
                VirtualMemoryBuffer after = r.allocate(1);
                long afterId = after.allocationIds()[0];
                after.close();
                List<Long> seen = takeUntil(notices, afterId);
                assertFalse(seen.contains(beforeId), "heard a release from before it registered: " + seen);
            }
        }
    }

    /**
     * Failures: "A listener that throws (any RuntimeException or Error) is logged ... and the
     * delivery goes on" -- also when what it throws cannot be turned into text (its
     * getMessage(), so its toString(), throws): the other listener hears this release and the
     * next, and the throwing one keeps being called.
     */
    @Test
    void aListenerThrowingAnUndescribableFailureDoesNotStopDelivery() throws Exception {
        BlockingQueue<Long> heard = new LinkedBlockingQueue<>();
        BlockingQueue<Long> thrower = new LinkedBlockingQueue<>();
        try (AllocationReleaseNotices.Registration bad = Driver.get().addAllocationReleaseListener(id -> {
                 thrower.add(id);
                 throw new BufferLeaseJavadocContractTest.Undescribable();
             });
             AllocationReleaseNotices.Registration good = Driver.get().addAllocationReleaseListener(heard::add);
             VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            for (int round = 0; round < 2; round++) {
                VirtualMemoryBuffer b = r.allocate(1);
                long id = b.allocationIds()[0];
                b.close();
                takeUntil(heard, id);
                takeUntil(thrower, id);
            }
        }
    }
}
