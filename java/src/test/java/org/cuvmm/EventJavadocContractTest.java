package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Event's javadoc, read as a user would: the promises no other test checks. */
class EventJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /** "An event never recorded counts as complete": isDone() true, synchronize() returns at once. */
    @Test
    void aNeverRecordedEventIsCompleteAndSynchronizeReturns() {
        try (Event e = Event.create(0)) {
            assertTrue(e.isDone());
            e.synchronize();
            assertEquals(0, e.device());
            assertTrue(e.hasTiming());
            assertFalse(e.isClosed());
        }
    }

    /** elapsedMillis: "CudaException when either was never recorded (CUDA_ERROR_INVALID_HANDLE)". */
    @Test
    void elapsedOfANeverRecordedEventIsInvalidHandle() {
        try (Event start = Event.create(0); Event end = Event.create(0); Stream s = Stream.create(0)) {
            CudaException both = assertThrows(CudaException.class, () -> end.elapsedMillis(start));
            assertEquals("CUDA_ERROR_INVALID_HANDLE", both.resultName(), both.getMessage());
            assertNames(both, "CUDA_ERROR_INVALID_HANDLE", both.call());
            start.record(s);
            s.synchronize();
            CudaException endOnly = assertThrows(CudaException.class, () -> end.elapsedMillis(start));
            assertEquals("CUDA_ERROR_INVALID_HANDLE", endOnly.resultName(), endOnly.getMessage());
            CudaException startOnly = assertThrows(CudaException.class, () -> start.elapsedSince(end));
            assertEquals("CUDA_ERROR_INVALID_HANDLE", startOnly.resultName(), startOnly.getMessage());
        }
    }

    /** Builder: timing(false) gives an event without timing; build() may run again. */
    @Test
    void builderTimingFalse() {
        Event.Builder b = Event.builder(0).timing(false);
        try (Event a = b.build(); Event c = b.build()) {
            assertFalse(a.hasTiming());
            assertFalse(c.hasTiming());
            assertNotEquals(a.handle(), c.handle());
        }
    }

    /** create/builder: "IllegalArgumentException when device is not a device of the driver". */
    @Test
    void aDeviceThatDoesNotExistIsRefusedNamingIt() {
        int n = Driver.get().deviceCount();
        assertNames(assertThrows(IllegalArgumentException.class, () -> Event.create(n)), "device", String.valueOf(n));
        assertNames(assertThrows(IllegalArgumentException.class, () -> Event.builder(-1)), "device", "-1");
    }

    /** close() idempotent; handle(), record, isDone, synchronize, elapsed after close throw ISE. */
    @Test
    void usesAfterCloseThrowIllegalState() {
        try (Stream s = Stream.create(0); Event other = Event.create(0)) {
            Event e = Event.create(0);
            e.close();
            e.close();
            assertTrue(e.isClosed());
            assertThrows(IllegalStateException.class, e::handle);
            assertThrows(IllegalStateException.class, () -> e.record(s));
            assertThrows(IllegalStateException.class, e::isDone);
            assertThrows(IllegalStateException.class, e::synchronize);
            assertThrows(IllegalStateException.class, () -> e.elapsedMillis(other));
            assertThrows(IllegalStateException.class, () -> other.elapsedMillis(e));
            assertThrows(IllegalStateException.class, () -> s.waitFor(e));
            assertThrows(IllegalStateException.class, () -> s.record(e));
            assertEquals(0, e.device());
        }
    }

    /** record: "IllegalStateException when this event or the stream is closed"; null named. */
    @Test
    void recordOnAClosedStreamOrNull() {
        try (Event e = Event.create(0)) {
            Stream s = Stream.create(0);
            s.close();
            assertThrows(IllegalStateException.class, () -> e.record(s));
            assertNames(assertThrows(NullPointerException.class, () -> e.record(null)), "stream");
            assertTrue(e.isDone(), "a refused record recorded nothing");
        }
    }

    /** record: "IllegalArgumentException when stream belongs to another device", naming the stream. */
    @Test
    void recordOnAnotherDevicesStreamIsRefused() {
        Assumptions.assumeTrue(Driver.get().deviceCount() >= 2, "needs two devices");
        try (Event e = Event.create(0); Stream s1 = Stream.create(1)) {
            assertNames(assertThrows(IllegalArgumentException.class, () -> e.record(s1)), "stream");
            assertNames(assertThrows(IllegalArgumentException.class, () -> s1.record(e)), "stream");
        }
    }

    /** Both timed, recorded and completed: elapsed is not negative and elapsedSince agrees. */
    @Test
    void elapsedOfTwoCompletedRecords() {
        try (Event start = Event.create(0); Event end = Event.create(0); Stream s = Stream.create(0)) {
            start.record(s);
            end.record(s);
            end.synchronize();
            assertTrue(end.isDone());
            float ms = end.elapsedMillis(start);
            assertTrue(ms >= 0, "elapsed " + ms);
            assertEquals(Math.round(ms * 1_000_000.0), end.elapsedSince(start).toNanos());
        }
    }
}
