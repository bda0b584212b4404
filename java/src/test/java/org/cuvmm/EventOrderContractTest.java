package org.cuvmm;

import org.junit.jupiter.api.BeforeEach;
import static org.junit.jupiter.api.Assumptions.assumeTrue;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.concurrent.CountDownLatch;

import org.cuvmm.internal.HostDriverHooks;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Probes: event waits and stream destruction with pending work, each bounded by a watchdog. */
class EventOrderContractTest {
    @BeforeEach
    void hostDriverOnly() { assumeTrue(TestSupport.onHostDriver(), "host driver only: the test paces its streams with the host driver's stream delay (HostDriverHooks)"); }

    @AfterEach
    void reset() { if (TestSupport.onHostDriver()) HostDriverHooks.setStreamDelayMicros(0); }

    /** Runs {@code body} on a daemon thread; true when it did not finish in {@code ms}. */
    private static boolean hangs(Runnable body, long ms) throws InterruptedException {
        Throwable[] err = new Throwable[1];
        Thread t = new Thread(() -> {
            try {
                body.run();
            } catch (Throwable e) {
                err[0] = e;
            }
        }, "probe-body");
        t.setDaemon(true);
        t.start();
        t.join(ms);
        if (err[0] != null) throw new AssertionError(err[0]);
        if (t.isAlive()) {
            System.err.println("probe: hung at " + java.util.Arrays.toString(t.getStackTrace()));
            return true;
        }
        return false;
    }

    /**
     * Stream.waitFor: "wait for event's last record as it is at this call". Re-recording the
     * event later (here on the waiting stream itself) must not change what the stream waits for.
     */
    @Test
    @Timeout(30)
    void waitForIsBoundToTheRecordAtTheCall() throws Exception {
        Stream s = Stream.create(0);
        Stream s2 = Stream.create(0);
        Event ev = Event.create(0);
        CountDownLatch gate = StreamTestSupport.gate(s);
        ev.record(s);
        s2.waitFor(ev);      // s2 waits for the gated record
        ev.record(s2);       // a later record, behind that wait on s2
        gate.countDown();
        boolean hung = hangs(() -> {
            s2.synchronize();
            ev.synchronize();
        }, 10_000);
        assertFalse(hung, "s2 never completed: its wait followed the event's later record on s2 itself");
        s.close();
        s2.close();
        ev.close();
    }

    /** cuStreamDestroy: "work already queued still completes": an event recorded behind it completes. */
    @Test
    @Timeout(30)
    void eventRecordedOnAClosedStreamStillCompletes() throws Exception {
        HostDriverHooks.setStreamDelayMicros(2000);
        Stream s = Stream.create(0);
        Event ev = Event.create(0);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(resource.granularity());
            b.fillAsync(0, b.size(), (byte) 1, s);
            ev.record(s);
            s.close();
            boolean hung = hangs(ev::synchronize, 10_000);
            assertFalse(hung, "the event recorded on a stream closed with pending work never completed");
            b.close();
        }
        ev.close();
    }

    /** Two streams waiting on one event alternately recorded on each (what concurrent users do). */
    @Test
    @Timeout(60)
    void alternatingRecordsAndWaitsNeverDeadlock() throws Exception {
        HostDriverHooks.setStreamDelayMicros(100);
        Stream s = Stream.create(0);
        Stream s2 = Stream.create(0);
        Event ev = Event.create(0);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(resource.granularity());
            boolean hung = hangs(() -> {
                for (int i = 0; i < 200; i++) {
                    Stream a = (i & 1) == 0 ? s : s2;
                    Stream o = (i & 1) == 0 ? s2 : s;
                    b.fillAsync(0, 4096, (byte) i, a);
                    ev.record(a);
                    o.waitFor(ev);
                }
                s.synchronize();
                s2.synchronize();
            }, 20_000);
            assertFalse(hung, "alternating record/wait deadlocked");
            b.close();
        }
        s.close();
        s2.close();
        ev.close();
    }

    /** A stream waiting for an event recorded on a stream closed with pending work still completes. */
    @Test
    @Timeout(30)
    void waitOnEventOfAClosedStreamCompletes() throws Exception {
        HostDriverHooks.setStreamDelayMicros(2000);
        Stream s = Stream.create(0);
        Stream s2 = Stream.create(0);
        Event ev = Event.create(0);
        Event ev2 = Event.create(0);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(resource.granularity());
            b.fillAsync(0, b.size(), (byte) 1, s2);
            ev2.record(s2);
            s.waitFor(ev2);
            s2.close();
            ev.record(s);
            boolean hung = hangs(() -> { ev.synchronize(); s.synchronize(); }, 10_000);
            assertFalse(hung, "a stream waiting for an event of a stream closed with pending work never completed");
            b.close();
        }
        s.close();
        ev.close();
        ev2.close();
    }

    /** Event.close: "a pending record completes first"; a stream waiting on it completes. */
    @Test
    @Timeout(30)
    void waitOnAClosedEventCompletes() throws Exception {
        HostDriverHooks.setStreamDelayMicros(2000);
        Stream s = Stream.create(0);
        Stream s2 = Stream.create(0);
        Event ev = Event.create(0);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(resource.granularity());
            b.fillAsync(0, b.size(), (byte) 1, s);
            ev.record(s);
            s2.waitFor(ev);
            ev.close();
            b.fillAsync(0, b.size(), (byte) 2, s2);
            boolean hung = hangs(s2::synchronize, 10_000);
            assertFalse(hung, "a stream waiting for a closed event never completed");
            b.close();
        }
        s.close();
        s2.close();
    }
}
