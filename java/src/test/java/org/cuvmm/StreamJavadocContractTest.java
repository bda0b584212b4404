package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Stream's javadoc, read as a user would: the promises no other test checks. */
class StreamJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /** Default streams: one object per device, close() a no-op, never closed, isDefault. */
    @Test
    void defaultStreamsAreSharedAndNeverClose() {
        Stream legacy = Stream.legacy(0);
        Stream perThread = Stream.perThread(0);
        assertSame(legacy, Stream.legacy(0));
        assertSame(perThread, Stream.perThread(0));
        legacy.close();
        perThread.close();
        assertFalse(legacy.isClosed());
        assertFalse(perThread.isClosed());
        assertTrue(legacy.isDefault());
        assertTrue(perThread.isDefault());
        assertFalse(legacy.isNonBlocking());
        assertFalse(perThread.isNonBlocking());
        assertEquals(0, legacy.priority());
        assertEquals(1, legacy.handle());
        assertEquals(2, perThread.handle());
        legacy.synchronize();
        perThread.synchronize();
        assertTrue(legacy.isDone());
    }

    /** legacy/perThread/priorityRange/create/builder: IAE for a device that is not one. */
    @Test
    void aDeviceThatDoesNotExistIsRefusedNamingIt() {
        int n = Driver.get().deviceCount();
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.legacy(n)), "device", String.valueOf(n));
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.perThread(-1)), "device", "-1");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.priorityRange(n)), "device");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.create(n)), "device");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.builder(-1)), "device");
    }

    /** priority(): "the priority this stream was built with (before the driver's clamping)". */
    @Test
    void priorityIsTheBuiltValueBeforeClamping() {
        int[] range = Stream.priorityRange(0);
        assertEquals(2, range.length);
        assertTrue(range[0] >= range[1], "[least, greatest] with lower numbers higher: " + range[0] + ", " + range[1]);
        Stream.Builder b = Stream.builder(0).priority(range[1] - 100).nonBlocking(true);
        try (Stream s = b.build(); Stream t = b.build(); Stream d = Stream.create(0)) {
            assertEquals(range[1] - 100, s.priority());
            assertTrue(s.isNonBlocking());
            assertFalse(s.isDefault());
            assertNotEquals(s.handle(), t.handle(), "build() may be called more than once: two streams");
            assertEquals(0, d.priority());
            assertFalse(d.isNonBlocking());
            s.synchronize();
        }
    }

    /** recordEvent(): a new event without timing, of this stream's device, recorded now; ISE when closed. */
    @Test
    void recordEventMakesAnUntimedEventAndRefusesWhenClosed() {
        Stream s = Stream.create(0);
        try (Event e = s.recordEvent()) {
            assertFalse(e.hasTiming());
            assertEquals(s.device(), e.device());
            e.synchronize();
            assertTrue(e.isDone());
        } finally {
            s.close();
        }
        assertThrows(IllegalStateException.class, s::recordEvent);
    }

    /** After close: every use but close() throws IllegalStateException; close is idempotent. */
    @Test
    void usesAfterCloseThrow() {
        Stream s = Stream.create(0);
        s.close();
        s.close();
        assertTrue(s.isClosed());
        try (Event e = Event.create(0)) {
            assertThrows(IllegalStateException.class, s::handle);
            assertThrows(IllegalStateException.class, s::synchronize);
            assertThrows(IllegalStateException.class, s::isDone);
            assertThrows(IllegalStateException.class, () -> s.record(e));
            assertThrows(IllegalStateException.class, () -> s.waitFor(e));
            assertThrows(IllegalStateException.class, () -> s.launchHostFunction(() -> { }));
        }
        assertEquals(0, s.device());
    }

    /** Null arguments are named. */
    @Test
    void nullArgumentsAreNamed() {
        try (Stream s = Stream.create(0)) {
            assertNames(assertThrows(NullPointerException.class, () -> s.record(null)), "event");
            assertNames(assertThrows(NullPointerException.class, () -> s.waitFor(null)), "event");
            assertNames(assertThrows(NullPointerException.class, () -> s.launchHostFunction(null)), "action");
        }
    }

    /** waitFor: "an event never recorded adds no wait"; "the event may belong to another device". */
    @Test
    void waitForANeverRecordedOrOtherDevicesEvent() {
        try (Stream s = Stream.create(0); Event never = Event.create(0)) {
            s.waitFor(never);
            s.synchronize();
            assertTrue(s.isDone());
        }
        Assumptions.assumeTrue(Driver.get().deviceCount() >= 2, "needs two devices");
        try (Stream s0 = Stream.create(0); Stream s1 = Stream.create(1); Event e1 = s1.recordEvent()) {
            s0.waitFor(e1);
            s0.synchronize();
        }
    }

    /**
     * synchronize: HostFunctionException, "cause: its exception; later ones are suppressed";
     * reported once ("since the last synchronize").
     */
    @Test
    void hostFunctionFailuresAreReportedOnceFirstAsCause() {
        try (Stream s = Stream.create(0)) {
            RuntimeException first = new RuntimeException("first");
            RuntimeException second = new IllegalStateException("second");
            s.launchHostFunction(() -> { throw first; });
            s.launchHostFunction(() -> { throw second; });
            HostFunctionException e = assertThrows(HostFunctionException.class, s::synchronize);
            assertSame(first, e.getCause());
            assertEquals(1, e.getSuppressed().length);
            assertSame(second, e.getSuppressed()[0]);
            s.synchronize();
        }
    }

    /** isDone: "does not report host-function exceptions"; the next synchronize does. */
    @Test
    void isDoneDoesNotReportHostFunctionFailures() {
        try (Stream s = Stream.create(0)) {
            RuntimeException boom = new RuntimeException("boom");
            CountDownLatch ran = new CountDownLatch(1);
            s.launchHostFunction(() -> { ran.countDown(); throw boom; });
            Event e = s.recordEvent();
            e.synchronize();
            e.close();
            assertTrue(s.isDone());
            assertSame(boom, assertThrows(HostFunctionException.class, s::synchronize).getCause());
        }
    }

    /** close: "A host-function exception not yet reported by synchronize() is dropped": close does not throw. */
    @Test
    void closeDropsAnUnreportedHostFunctionFailure() throws Exception {
        Stream s = Stream.create(0);
        CountDownLatch ran = new CountDownLatch(1);
        s.launchHostFunction(() -> { ran.countDown(); throw new RuntimeException("dropped"); });
        assertTrue(ran.await(30, TimeUnit.SECONDS));
        try (Event after = s.recordEvent()) { // the failure is recorded by the time the work behind it is done
            after.synchronize();
        }
        s.close(); // does not throw it
        assertTrue(s.isClosed());
    }

    /** Host functions run in stream order. */
    @Test
    void hostFunctionsRunInQueueOrder() {
        List<Integer> order = new ArrayList<>();
        try (Stream s = Stream.create(0)) {
            for (int i = 0; i < 5; i++) {
                int k = i;
                s.launchHostFunction(() -> { synchronized (order) { order.add(k); } });
            }
            s.synchronize();
        }
        synchronized (order) { assertEquals(List.of(0, 1, 2, 3, 4), order); }
    }
}
