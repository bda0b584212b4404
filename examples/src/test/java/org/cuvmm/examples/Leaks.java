package org.cuvmm.examples;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;

/**
 * What the example tests count to prove an example leaves nothing behind: this process's open
 * fds by kind, and the driver's live objects (host memfds included).
 */
final class Leaks {
    private Leaks() {}

    /**
     * Runs {@code warmUp} once, so that what the JVM opens on first use and keeps (the jars
     * of the class path, /dev/urandom for SecureRandom, native libraries) is in the baseline,
     * then returns the baseline.
     */
    static Snapshot baselineAfter(ThrowingRunnable warmUp) throws Exception {
        warmUp.run();
        return Snapshot.now();
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    /** Open fds by kind, and the driver's counters. */
    record Snapshot(Map<String, Integer> fds, Map<String, Long> driver) {
        static Snapshot now() { return new Snapshot(Leaks.fds(), Leaks.driver()); }

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
                        + diff(fds, now.fds) + " " + diff(driver, now.driver));
            }
        }

        private static <V> Map<String, String> diff(Map<String, V> a, Map<String, V> b) {
            Map<String, String> d = new TreeMap<>();
            Set<String> keys = new TreeSet<>(a.keySet());
            keys.addAll(b.keySet());
            for (String k : keys) {
                if (!java.util.Objects.equals(a.get(k), b.get(k))) d.put(k, a.get(k) + " -> " + b.get(k));
            }
            return d;
        }
    }

    /**
     * This process's open fds, by link target, counted. Sockets and pipes count by kind (the
     * test runner's own are in the baseline; an inode number says nothing over time), memfds
     * of the host driver ({@code /memfd:cuvmm-host:...}) as one kind. Not counted: /proc files
     * (listing /proc/self/fd opens one), /dev/random and /dev/urandom, cgroup files and jars,
     * which the JVM opens lazily and keeps.
     */
    static Map<String, Integer> fds() {
        Map<String, Integer> m = new TreeMap<>();
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) s::iterator) {
                String t;
                try {
                    t = Files.readSymbolicLink(p).toString();
                } catch (IOException gone) {
                    continue; // the listing's own fd, closed by now
                }
                if (t.startsWith("/proc/") || t.equals("/dev/random") || t.equals("/dev/urandom")
                        || t.startsWith("/sys/fs/cgroup") || t.endsWith(".jar")) {
                    continue;
                }
                if (t.startsWith("socket:")) t = "socket";
                else if (t.startsWith("pipe:")) t = "pipe";
                else if (t.startsWith("/memfd:cuvmm-host")) t = "memfd (cuvmm host driver)";
                m.merge(t, 1, Integer::sum);
            }
        } catch (IOException e) {
            throw new AssertionError(e);
        }
        return m;
    }

    /** The driver's live objects: allocations, reservations, mappings, and the host driver's memfds and maps. */
    static Map<String, Long> driver() {
        DriverCounters c = Driver.get().counters();
        Map<String, Long> m = new TreeMap<>();
        m.put("live allocations", c.liveAllocations());
        m.put("live reservations", c.liveReservations());
        m.put("live mappings", c.liveMappings());
        m.put("host allocations", c.hostAllocations());
        m.put("host mappings", c.hostMappings());
        m.put("host memfds", c.hostMemfds());
        return m;
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
