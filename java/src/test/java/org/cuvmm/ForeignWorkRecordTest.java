package org.cuvmm;

import static org.cuvmm.StreamTestSupport.WAIT_SECONDS;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.internal.HostDriverHooks;
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
    private static final int CUDA_ERROR_OUT_OF_MEMORY = 2;

    /** What a call did with its failed record: what it threw, and whether the held work had run by then. */
    private record Outcome(Throwable thrown, boolean workRanBeforeTheThrow) {}

    /**
     * Runs {@code call} on a thread of its own with the next cuEventRecord on {@code s} failing;
     * {@code launch} (run by the call, on {@code s}) queues the held work. The gate opens once
     * the call has thrown (wrong: the work is unrecorded and still queued) or waits for the stream.
     */
    private static Outcome withAFailingRecord(Stream s, java.util.function.Consumer<Runnable> call) throws Exception {
        DriverCounters k = TestSupport.counters();
        CountDownLatch gate = new CountDownLatch(1);
        AtomicBoolean ran = new AtomicBoolean();
        Runnable launch = () -> s.launchHostFunction(() -> {
            StreamTestSupport.await(gate, "the gate of " + s);
            ran.set(true);
        });
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicBoolean ranAtThrow = new AtomicBoolean();
        CountDownLatch finished = new CountDownLatch(1);
        Thread op = new Thread(() -> {
            try {
                call.accept(launch);
            } catch (Throwable t) {
                ranAtThrow.set(ran.get());
                thrown.set(t);
            } finally {
                finished.countDown();
            }
        }, "a record that fails");
        HostDriverHooks.failNextEventRecord(s.handle(), CUDA_ERROR_OUT_OF_MEMORY);
        long syncs = k.calls("cuStreamSynchronize");
        op.start();
        try {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_SECONDS);
            while (!finished.await(1, TimeUnit.MILLISECONDS) && k.calls("cuStreamSynchronize") == syncs) {
                if (System.nanoTime() > deadline) fail("the call neither threw nor waited for " + s);
            }
        } finally {
            gate.countDown();
            HostDriverHooks.failNextEventRecord(s.handle(), 0);
        }
        StreamTestSupport.await(finished, "the call");
        s.synchronize(); // when the call did not: the buffer is closed next
        return new Outcome(thrown.get(), ranAtThrow.get());
    }

    @Test
    void aFailedRecordInRecordUseWaitsForTheStreamBeforeThrowing() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "the failure is injected by the host driver");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(MiB);
             Stream s = Stream.builder(0).nonBlocking(true).build()) {
            b.recordUse(s); // b's use of s has its event: the next recordUse makes one record
            s.synchronize();
            Outcome o = withAFailingRecord(s, launch -> {
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
            Outcome o = withAFailingRecord(s, launch -> b.withAddress(s, address -> launch.run()));
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
            Outcome o = withAFailingRecord(s, launch -> b.withAddress(s, address -> {
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
