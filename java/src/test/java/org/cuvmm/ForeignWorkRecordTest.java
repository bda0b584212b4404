package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;

/**
 * Work queued on a stream by other means (a kernel launched through another binding) and then
 * recorded on a buffer with {@link VirtualMemoryBuffer#recordUse(Stream)} or inside
 * {@link VirtualMemoryBuffer#withAddress(Stream, java.util.function.LongConsumer)}, whose javadoc
 * says "launch the kernel on stream inside action, and close waits for it".
 *
 * <p>A record that fails (host driver seam) left that work unrecorded and threw at once: a
 * try-with-resources around the launch then closed the buffer without waiting, and the memory
 * was released under the queued work. The asynchronous operations wait for the stream before
 * they throw a failed record (AsyncOpFailureTest); these now do the same. Here the "kernel" is
 * a host function held behind a gate: the call must not throw while it is still held.
 */
class ForeignWorkRecordTest {

    @Test
    void aFailedRecordInRecordUseWaitsForTheStreamBeforeThrowing() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "the failure is injected by the host driver");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            b.recordUse(s); // b's use of s has its event: the next recordUse makes one record
            s.synchronize();
            StreamTestSupport.FailedRecordOutcome o = StreamTestSupport.withAFailingRecord(s, launch -> {
                launch.run(); // the "kernel"
                b.recordUse(s);
            });
            CudaException e = assertInstanceOf(CudaException.class, o.thrown(), "the failed record is thrown");
            assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            assertTrue(o.workRanBeforeTheThrow(), "recordUse threw while the work it was to record was still queued: "
                    + "a close() after it (try-with-resources) would release the memory under that work");
        }
    }

    @Test
    void aFailedRecordAfterWithAddressWaitsForTheStreamBeforeThrowing() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "the failure is injected by the host driver");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            b.recordUse(s);
            s.synchronize();
            StreamTestSupport.FailedRecordOutcome o = StreamTestSupport.withAFailingRecord(s,
                    launch -> b.withAddress(s, address -> launch.run()));
            CudaException e = assertInstanceOf(CudaException.class, o.thrown(), "the failed record is thrown");
            assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            assertTrue(o.workRanBeforeTheThrow(), "withAddress(stream, ...) threw while the kernel it launched was "
                    + "still queued and unrecorded: its javadoc says close waits for that kernel");
        }
    }

    /**
     * An action that launched and then threw: its exception is what the call throws (the
     * failed record is added to it as suppressed; it used to replace it), after the stream.
     */
    @Test
    void aThrowingActionKeepsItsExceptionWhenTheRecordAfterItFails() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "the failure is injected by the host driver");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            b.recordUse(s);
            s.synchronize();
            RuntimeException boom = new RuntimeException("the action's own failure");
            StreamTestSupport.FailedRecordOutcome o = StreamTestSupport.withAFailingRecord(s,
                    launch -> b.withAddress(s, address -> {
                launch.run();
                throw boom;
            }));
            assertEquals(boom, o.thrown(), "the action's exception is thrown, not the record's");
            assertEquals(1, boom.getSuppressed().length, "the failed record is suppressed in it");
            assertInstanceOf(CudaException.class, boom.getSuppressed()[0]);
            assertTrue(o.workRanBeforeTheThrow(), "thrown before the stream was waited for");
        }
    }

    /**
     * withAddress(stream, action) in a host function: refused before the action runs, as
     * recordUse is (the record after the action is a driver call). It ran the action first, and
     * then threw from the record, with the action's work left unrecorded.
     */
    @Test
    void withAddressOnAStreamIsRefusedInAHostFunctionBeforeTheActionRuns() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.create(0);
             Stream t = Stream.create(0)) {
            b.recordUse(t); // an event for t in b's record, and one back in the cache after the next close
            t.synchronize();
            AtomicBoolean ran = new AtomicBoolean();
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            CountDownLatch done = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                try {
                    b.withAddress(t, address -> ran.set(true));
                } catch (Throwable e) {
                    thrown.set(e);
                } finally {
                    done.countDown();
                }
            });
            StreamTestSupport.await(done, "the host function");
            s.synchronize();
            IllegalStateException e = assertInstanceOf(IllegalStateException.class, thrown.get(),
                    "withAddress(stream, ...) in a host function");
            assertTrue(e.getMessage().contains("withAddress") && e.getMessage().contains("host function"), e.getMessage());
            assertFalse(ran.get(), "the action ran although the call was refused");
        }
    }
}
