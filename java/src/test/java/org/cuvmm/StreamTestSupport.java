package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.internal.HostDriverHooks;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;

/** Helpers of the stream tests: gates that hold a stream, the reaper's progress, byte checks. */
final class StreamTestSupport {
    /** Bound of every wait in these tests: far beyond any delay they set, never reached when they pass. */
    static final long WAIT_SECONDS = 30;

    private StreamTestSupport() {}

    /**
     * The per-test fixture of StreamTest and StreamLifetimeTest: a resource opened once the reaper
     * is drained and the live counters and open fds taken; {@link #close} resets the stream
     * delay, closes the resource, drains the reaper and asserts that counters and fds are back.
     */
    static final class Fixture {
        final Map<String, Long> live;
        final VirtualMemoryResource resource;
        private final Map<String, String> fds;

        private Fixture(Map<String, Long> live, Map<String, String> fds, VirtualMemoryResource resource) {
            this.live = live;
            this.fds = fds;
            this.resource = resource;
        }

        static Fixture open() {
            Driver.get();
            reaperDrained();
            Map<String, Long> live = LiveObjects.now();
            Map<String, String> fds = OpenFds.byNumber();
            return new Fixture(live, fds, VirtualMemoryResource.create(0));
        }

        void close() {
            delay(0);
            resource.close();
            reaperDrained();
            LiveObjects.assertBack(live, "after the test");
            OpenFds.assertNoNewFds(fds, "after the test");
        }
    }

    /** What a call did with its failed record: what it threw, and whether the held work had run by then. */
    record FailedRecordOutcome(Throwable thrown, boolean workRanBeforeTheThrow) {}

    /**
     * Runs {@code call} on a thread of its own with the next cuEventRecord on {@code s} failing
     * ({@code CUDA_ERROR_OUT_OF_MEMORY}, host driver only); {@code launch} (run by the call, on
     * {@code s}) queues the held work, a host function behind a gate. The gate opens once
     * the call has thrown (wrong: the work is unrecorded and still queued) or waits for the stream.
     */
    static FailedRecordOutcome withAFailingRecord(Stream s, java.util.function.Consumer<Runnable> call) throws Exception {
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
        HostDriverHooks.failNextEventRecord(s.handle(), 2); // CUDA_ERROR_OUT_OF_MEMORY
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
        return new FailedRecordOutcome(thrown.get(), ranAtThrow.get());
    }

    /**
     * Holds {@code stream} at this point until the returned latch is counted down: a host
     * function that waits for it (bounded). Deterministic: no timing involved.
     */
    static CountDownLatch gate(Stream stream) {
        CountDownLatch gate = new CountDownLatch(1);
        stream.launchHostFunction(() -> await(gate, "the gate of " + stream));
        return gate;
    }

    static void await(CountDownLatch latch, String what) {
        try {
            if (!latch.await(WAIT_SECONDS, TimeUnit.SECONDS)) throw new AssertionError(what + " did not open in " + WAIT_SECONDS + " s");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted waiting for " + what, e);
        }
    }

    /** Returns when every release handed to the reaper before this call has run (it runs tasks in order). */
    /** Waits (bounded) until the reaper has no pending task: every release handed in so far ran. */
    static void reaperDrained() {
        try {
            if (!StreamOrderedRelease.awaitIdle(TimeUnit.SECONDS.toMillis(WAIT_SECONDS))) {
                throw new AssertionError("the reaper still had " + StreamOrderedRelease.pending() + " tasks after "
                        + WAIT_SECONDS + " s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    static void delay(long micros) {
        if (TestSupport.onHostDriver()) HostDriverHooks.setStreamDelayMicros(micros);
    }

    static void assertAll(ByteBuffer view, int length, int value, String what) {
        for (int i = 0; i < length; i++) {
            if (view.get(i) != (byte) value) {
                assertEquals((byte) value, view.get(i), what + ": byte " + i);
            }
        }
    }

    static void assertAll(byte[] bytes, int value, String what) {
        for (int i = 0; i < bytes.length; i++) {
            if (bytes[i] != (byte) value) assertEquals((byte) value, bytes[i], what + ": byte " + i);
        }
    }
}
