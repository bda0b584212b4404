package org.cuvmm;

import static org.cuvmm.StreamTestSupport.gate;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * cuvmm's reaper thread ("cuvmm-stream-release") cannot be started ({@link Thread#start()}
 * throws {@code OutOfMemoryError}, as the JVM does when no native thread can be made): the
 * stream-ordered release still happens exactly once, never early, nothing is thrown to the
 * caller, and the next release starts the thread.
 *
 * <p>The reaper is one thread per JVM: an earlier test class has usually started it, and then
 * no start is attempted again. So the seam ({@link StreamOrderedRelease#threadFactoryForTest})
 * is used for every hand-over while it is set, even with a reaper running, and the start is
 * attempted before the task is queued: the failure path runs whatever ran before this class,
 * and a reaper already running never sees the caller's task.
 */
class StreamReleaseStartFailureTest {
    private StreamTestSupport.Fixture fixture;
    private VirtualMemoryResource resource;

    @BeforeEach
    void open() {
        fixture = StreamTestSupport.Fixture.open();
        resource = fixture.resource;
    }

    @AfterEach
    void close() {
        StreamOrderedRelease.threadFactoryForTest = null;
        fixture.close();
    }

    /** Makes threads whose start fails as the JVM's does without native threads left; counts the attempts. */
    private static final class FailingStarts implements Function<Runnable, Thread> {
        static final String MESSAGE = "unable to create native thread: possibly out of memory or process/resource "
                + "limits reached (test)";
        final AtomicInteger attempts = new AtomicInteger();
        final CountDownLatch attempted = new CountDownLatch(1);

        @Override
        public Thread apply(Runnable body) {
            attempts.incrementAndGet();
            attempted.countDown();
            return new Thread(body, "test: never started") {
                @Override
                public synchronized void start() {
                    throw new OutOfMemoryError(MESSAGE);
                }
            };
        }
    }

    /** A WARNING: its message and throwable. */
    private record Warning(String message, Throwable thrown) {}

    /**
     * The WARNINGs {@link StreamOrderedRelease} logs while installed (its log seam); also passed
     * on to its logger, or, when {@code throwing}, answered with an exception after being
     * recorded (a logging bridge or handler that fails).
     */
    private static final class Warnings implements System.Logger, AutoCloseable {
        final List<Warning> records = new CopyOnWriteArrayList<>();
        private final System.Logger original = StreamOrderedRelease.log;
        private final boolean throwing;

        Warnings() {
            this(false);
        }

        Warnings(boolean throwing) {
            this.throwing = throwing;
            StreamOrderedRelease.log = this;
        }

        @Override
        public String getName() { return original.getName(); }

        @Override
        public boolean isLoggable(Level level) { return true; }

        @Override
        public void log(Level level, java.util.ResourceBundle bundle, String msg, Throwable thrown) {
            if (level == Level.WARNING) records.add(new Warning(msg, thrown));
            if (throwing) throw new IllegalStateException("the logger failed (test)");
            original.log(level, bundle, msg, thrown);
        }

        @Override
        public void log(Level level, java.util.ResourceBundle bundle, String format, Object... params) {
            if (level == Level.WARNING) records.add(new Warning(format, null));
            if (throwing) throw new IllegalStateException("the logger failed (test)");
            original.log(level, bundle, format, params);
        }

        /** The one WARNING whose message contains {@code text}. */
        Warning one(String text) {
            List<Warning> found = records.stream().filter(r -> r.message() != null && r.message().contains(text)).toList();
            assertEquals(1, found.size(), "WARNINGs naming " + text + ": " + records.stream().map(Warning::message).toList());
            return found.get(0);
        }

        @Override
        public void close() {
            StreamOrderedRelease.log = original;
        }
    }

    /**
     * What {@code call} threw, or null: caught here, so that an {@code OutOfMemoryError} (which
     * JUnit would treat as fatal and end the run with) fails this test with a message instead.
     */
    private static Throwable thrownBy(Runnable call) {
        try {
            call.run();
            return null;
        } catch (RuntimeException | Error e) {
            return e;
        }
    }

    @Test
    void closeOnAStreamReleasesOnTheCallingThreadAfterTheStreamWorkWhenTheReaperCannotStart() throws Exception {
        DriverCounters k = TestSupport.counters();
        try (Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            String described = b.toString();
            long mappedWithB = k.liveMappings();
            long releases = k.calls("cuMemRelease");
            long failures = k.cleanupFailures();
            CountDownLatch hold = gate(s);
            b.fillAsync(0, MiB, (byte) 7, s); // behind the gate: an unmap before it ran would fault it
            FailingStarts starts = new FailingStarts();
            // close(s) now waits on this thread for the stream, so another thread opens the
            // gate, once the start has failed and after reading what is mapped: the release
            // cannot happen before the gate opens, so that reading shows any early release.
            AtomicLong mappedWhenStartFailed = new AtomicLong(-1);
            Thread opener = new Thread(() -> {
                StreamTestSupport.await(starts.attempted, "the reaper's start");
                mappedWhenStartFailed.set(k.liveMappings());
                hold.countDown();
            }, "test: gate opener");
            Throwable thrown;
            try (Warnings warnings = new Warnings()) {
                StreamOrderedRelease.threadFactoryForTest = starts;
                try {
                    opener.start();
                    thrown = thrownBy(() -> b.close(s)); // before the fix: the OutOfMemoryError, the task left queued
                } finally {
                    StreamOrderedRelease.threadFactoryForTest = null;
                    hold.countDown(); // a no-op when the opener ran: a failed test does not leave the stream held
                    opener.join(TimeUnit.SECONDS.toMillis(StreamTestSupport.WAIT_SECONDS));
                }
                assertNull(thrown, () -> "close(s) threw " + thrown);
                assertEquals(1, starts.attempts.get(), "close(s) tried to start the reaper once");
                assertEquals(mappedWithB, mappedWhenStartFailed.get(), "nothing was released before the stream work");
                // Without waiting for the reaper: the release ran inside close(s).
                assertEquals(mappedWithB - 1, k.liveMappings(), "close(s) released on the calling thread");
                assertEquals(releases + 1, k.calls("cuMemRelease"), "released once");
                assertEquals(0, StreamOrderedRelease.pending(), "no task is left pending");
                Warning w = warnings.one(described);
                assertTrue(w.message().contains("could not be started") && w.message().contains(FailingStarts.MESSAGE),
                        "the WARNING says why: " + w.message());
                assertTrue(w.thrown() instanceof OutOfMemoryError, "with the start's failure: " + w.thrown());
            }
            assertTrue(b.isClosed());
            s.synchronize(); // the fill ran on mapped memory: no fault
            assertEquals(failures, k.cleanupFailures(), "no teardown call failed");

            // Without the seam, the next close(s) goes through the reaper again (started now,
            // unless an earlier test class started it): it returns while the stream is held.
            VirtualMemoryBuffer next = resource.allocate(MiB);
            long mappedWithNext = k.liveMappings();
            CountDownLatch holdNext = gate(s);
            try {
                next.fillAsync(0, MiB, (byte) 8, s);
                next.close(s); // never blocks: on the calling thread it would wait for the held gate
                assertTrue(StreamOrderedRelease.pending() >= 1, "the release waits on the reaper");
                assertEquals(mappedWithNext, k.liveMappings(), "not released before the stream got there");
            } finally {
                holdNext.countDown();
            }
            s.synchronize();
            StreamTestSupport.reaperDrained();
            assertEquals(mappedWithNext - 1, k.liveMappings(), "the reaper released it");
            assertEquals(releases + 2, k.calls("cuMemRelease"), "each buffer released once");
            assertEquals(failures, k.cleanupFailures(), "no teardown call failed");
        }
    }

    /**
     * A logger that throws (a System.Logger may: a bridge to another framework, a failing
     * handler) must not break later()'s "never throws", nor lose the task: close(s) with the
     * start failing still releases the buffer once, on the calling thread, and leaves nothing
     * pending (before, the WARNING ahead of the wait threw out of close(s) with the task
     * neither queued nor run: the buffer stayed mapped and pending() stayed 1 for good).
     */
    @Test
    void aThrowingLoggerNeitherEscapesNorLosesTheRelease() throws Exception {
        DriverCounters k = TestSupport.counters();
        try (Warnings warnings = new Warnings(true); Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            long mappedWithB = k.liveMappings();
            long releases = k.calls("cuMemRelease");
            b.fillAsync(0, MiB, (byte) 5, s);
            Throwable thrown;
            StreamOrderedRelease.threadFactoryForTest = new FailingStarts();
            try {
                thrown = thrownBy(() -> b.close(s));
            } finally {
                StreamOrderedRelease.threadFactoryForTest = null;
                warnings.close(); // the logger back before the checks (close() again at the end: idempotent)
            }
            assertNull(thrown, () -> "close(s) threw " + thrown);
            assertFalse(warnings.records.isEmpty(), "the WARNING was attempted");
            assertEquals(0, StreamOrderedRelease.pending(), "no task is left pending");
            assertEquals(mappedWithB - 1, k.liveMappings(), "close(s) released on the calling thread");
            assertEquals(releases + 1, k.calls("cuMemRelease"), "released once");
        }
    }

    /**
     * From a host function no driver call may be made, so the release cannot move to the
     * calling thread: close() neither throws nor blocks there, the task stays queued, and it
     * runs once a later hand-over has started the reaper (at once, when an earlier test class
     * left one running).
     */
    @Test
    void aCloseInAHostFunctionStaysQueuedUntilTheReaperStarts() throws Exception {
        DriverCounters k = TestSupport.counters();
        long mappedBefore = k.liveMappings();
        long releases = k.calls("cuMemRelease");
        long failures = k.cleanupFailures();
        try (Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            String described = b.toString();
            b.fillAsync(0, MiB, (byte) 9, s);
            FailingStarts starts = new FailingStarts();
            try (Warnings warnings = new Warnings()) {
                StreamOrderedRelease.threadFactoryForTest = starts;
                try {
                    s.launchHostFunction(b::close);
                    s.synchronize(); // before the fix: HostFunctionException, close() threw the OutOfMemoryError
                } finally {
                    StreamOrderedRelease.threadFactoryForTest = null;
                }
                assertEquals(1, starts.attempts.get(), "close() in the host function tried to start the reaper once");
                assertTrue(b.isClosed());
                Warning w = warnings.one(described);
                assertTrue(w.message().contains("waits in the queue") && w.message().contains(FailingStarts.MESSAGE),
                        "the WARNING says why: " + w.message());
            }
            // The next hand-over starts the reaper (when none runs), which takes the queued task too.
            VirtualMemoryBuffer next = resource.allocate(MiB);
            next.close(s);
            StreamTestSupport.reaperDrained();
            assertEquals(0, StreamOrderedRelease.pending());
            assertEquals(mappedBefore, k.liveMappings(), "both buffers released");
            assertEquals(releases + 2, k.calls("cuMemRelease"), "each buffer released once");
            assertEquals(failures, k.cleanupFailures(), "no teardown call failed");
        }
    }
}
