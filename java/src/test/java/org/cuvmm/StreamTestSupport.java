package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.internal.HostDriverHooks;

/** Helpers of the stream tests: gates that hold a stream, the reaper's progress, byte checks. */
final class StreamTestSupport {
    /** Bound of every wait in these tests: far beyond any delay they set, never reached when they pass. */
    static final long WAIT_SECONDS = 30;

    private StreamTestSupport() {}

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
