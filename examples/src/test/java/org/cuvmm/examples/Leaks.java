package org.cuvmm.examples;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;

/**
 * What the example tests count to prove an example leaves nothing behind: this process's open
 * fds by kind ({@link OpenFds#byKind()}) and the driver's live objects ({@link LiveObjects}),
 * the same counts as the core's and vmm-ipc's tests.
 */
final class Leaks {
    private Leaks() {}

    /**
     * Runs {@code warmUp} once, so that what the JVM opens on first use and keeps (the jars
     * of the class path, /dev/urandom for SecureRandom, native libraries) is in the baseline,
     * then returns the baseline.
     */
    static Snapshot baselineAfter(ThrowingRunnable warmUp) throws Exception {
        Map<String, Long> driverBefore = LiveObjects.now();
        warmUp.run();
        // The warm-up's last releases may finish on other threads after it returns (a server's
        // connection thread ending a lease, a client's event thread closing a cached import):
        // counted too early, the baseline holds a buffer that goes during the test, which then
        // fails as "1 -> 0" (seen once in CI: SharedProducerConsumerTest). The warm-up keeps
        // no driver object, so wait (bounded) until its objects are gone, then count.
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!LiveObjects.now().equals(driverBefore) && System.nanoTime() < until) {
            Thread.sleep(10);
        }
        return Snapshot.now();
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    /** Open fds by kind, and the driver's counters. */
    record Snapshot(Map<String, Integer> fds, Map<String, Long> driver) {
        static Snapshot now() { return new Snapshot(OpenFds.byKind(), LiveObjects.now()); }

        /**
         * Waits up to 10 s (connection threads close their sockets after the call that ended
         * them returns) for the fds and counters to match this baseline; throws naming what differs.
         */
        void assertBack(String when) throws InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            Snapshot now = now();
            while (!now.equals(this) && System.nanoTime() < until) {
                Thread.sleep(20);
                now = now();
            }
            if (!now.equals(this)) {
                throw new AssertionError("open fds and driver objects " + when + " differ from the baseline: "
                        + OpenFds.diff(fds, now.fds) + " " + OpenFds.diff(driver, now.driver));
            }
        }
    }

    /** Output written from several threads, readable while it grows. */
    static final class Output {
        private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        final PrintStream stream = new PrintStream(bytes, true, StandardCharsets.UTF_8);

        String text() { return bytes.toString(StandardCharsets.UTF_8); }

        @Override
        public String toString() { return text(); }
    }
}
