package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.junit.jupiter.api.Test;

/**
 * The failure paths of an asynchronous op, whose op and stream-use records are one native call
 * ({@link AsyncCopies}): an op refused before queueing leaves no use that waits on another
 * stream's work, and a record failing after the op was queued makes the call wait for the
 * stream before it throws.
 */
class AsyncOpFailureTest {
    private static final int CUDA_ERROR_OUT_OF_MEMORY = 2;
    /** Bound on a close that must not wait for anything: far beyond its run time, below the gate's own bound. */
    private static final long CLOSE_SECONDS = 10;

    /**
     * A refused fill (READ-only memory) has installed its use of the stream already, with an
     * event from {@link EventCache} whose previous owner's record is still pending behind a
     * gate on another stream: the fill's call records the event on its own stream anyway, so
     * close() waits for nothing of the other stream's.
     */
    @Test
    void aRefusedOpLeavesNoUseWaitingOnAnotherStream() throws Exception {
        VirtualMemoryResourceOptions readOnly = VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.READ).build();
        List<Event> drained = new ArrayList<>();
        CountDownLatch gate = null;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, readOnly);
             Stream x = Stream.builder(0).nonBlocking(true).build();
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            try {
                // Empty the cache: the event it creates when empty is the one we give back.
                Event cached;
                while (true) {
                    int created = EventCache.created();
                    Event e = EventCache.take(0);
                    if (EventCache.created() != created) {
                        cached = e;
                        break;
                    }
                    drained.add(e);
                }
                gate = StreamTestSupport.gate(x);
                cached.record(x); // pending until x's gate opens
                EventCache.give(cached); // the cache's only idle event: the fill's use takes it

                int created = EventCache.created();
                CudaException refused = assertThrows(CudaException.class, () -> b.fillAsync(0, 16, (byte) 1, s));
                assertTrue(refused.getMessage().contains("READ access"), refused.getMessage());
                assertEquals(created, EventCache.created(), "the fill's use took the cached event (the scenario holds)");

                CompletableFuture<Void> closing = CompletableFuture.runAsync(b::close);
                try {
                    closing.get(CLOSE_SECONDS, TimeUnit.SECONDS);
                } catch (TimeoutException t) {
                    fail("close() of a buffer whose only op was refused waited for work on another stream "
                            + "(its use's cached event was left with the previous owner's record on " + x + ")");
                }
            } finally {
                if (gate != null) gate.countDown();
                b.close();
                x.synchronize();
            }
        } finally {
            for (Event e : drained) EventCache.give(e);
        }
    }

    /**
     * Native reads a null event handle as "no record", and JavaCPP passes a deallocated handle
     * as null: the handle of a closed event is refused before any native call.
     */
    @Test
    void anEmptyEventHandleIsRefusedBeforeTheNativeCall() {
        Driver.get();
        Event e = Event.internal(0);
        AsyncCopies.recordable(e); // an open event passes
        e.close();
        IllegalStateException x = assertThrows(IllegalStateException.class, () -> AsyncCopies.recordable(e));
        assertTrue(x.getMessage().contains("native handle is empty"), x.getMessage());
    }

    /**
     * The record made after a queued fill fails (host driver seam): the call waits for the
     * stream (the fill, held behind a gate, has run) before it throws, so no queued op is left
     * unrecorded.
     */
    @Test
    void aRecordFailingAfterTheOpWasQueuedWaitsForTheStreamBeforeThrowing() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "the failure is injected by the host driver");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            b.fillAsync(0, MiB, (byte) 1, s); // b's use of s gets its event: the next fill makes one record
            s.synchronize();

            StreamTestSupport.FailedRecordOutcome o = StreamTestSupport.withAFailingRecord(s, launch -> {
                launch.run(); // the gate
                b.fillAsync(0, MiB, (byte) 7, s); // queued behind the gate; its record fails
            });
            CudaException e = assertInstanceOf(CudaException.class, o.thrown(), "the failed record is thrown");
            assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            assertTrue(o.workRanBeforeTheThrow(), "the error was thrown while the queued fill was still held behind the "
                    + "gate: the call must wait for the stream first (its op is queued but unrecorded)");
            byte[] back = new byte[1];
            b.copyTo(MiB - 1, back, 0, 1);
            assertEquals((byte) 7, back[0], "the queued fill ran");
        }
    }
}
