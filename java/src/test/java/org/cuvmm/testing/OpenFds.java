package org.cuvmm.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * This process's open file descriptors, read from /proc/self/fd, for tests that prove an
 * operation closed every fd it opened. Never counted: /proc files (listing /proc/self/fd
 * opens one, JavaCPP reads /proc/self/statm). {@link #byKind()} and
 * {@link #assertNoNewFds} also ignore what the JVM opens lazily and keeps for good
 * ({@link #keptByTheJvm}).
 */
public final class OpenFds {
    /** The kind under which {@link #byKind()} counts the host driver's memfds. */
    public static final String CUVMM_MEMFD = "/memfd:cuvmm-host";

    private OpenFds() {}

    /** fd number -> link target. */
    public static Map<String, String> byNumber() {
        Map<String, String> m = new TreeMap<>();
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) s::iterator) {
                String target;
                try {
                    target = Files.readSymbolicLink(p).toString();
                } catch (IOException gone) {
                    continue; // the listing's own fd, closed by now
                }
                if (!target.startsWith("/proc/")) m.put(p.getFileName().toString(), target);
            }
        } catch (IOException e) {
            throw new AssertionError("listing /proc/self/fd failed", e);
        }
        return m;
    }

    /**
     * Open fds counted by kind: sockets and pipes as "socket" and "pipe" (an inode number says
     * nothing over time, and the test runner has its own), host-driver memfds as
     * {@link #CUVMM_MEMFD}, anything else by its path. Fds the JVM keeps are left out.
     */
    public static Map<String, Integer> byKind() {
        Map<String, Integer> m = new TreeMap<>();
        for (String target : byNumber().values()) {
            if (keptByTheJvm(target)) continue;
            String kind = target;
            if (target.startsWith("socket:")) kind = "socket";
            else if (target.startsWith("pipe:")) kind = "pipe";
            else if (target.startsWith(CUVMM_MEMFD)) kind = CUVMM_MEMFD;
            m.merge(kind, 1, Integer::sum);
        }
        return m;
    }

    /** Open host-driver memfds. */
    public static int cuvmmMemfds() { return byKind().getOrDefault(CUVMM_MEMFD, 0); }

    /** Lines of /proc/self/maps naming a host-driver memfd: its mappings in this process. */
    public static long cuvmmMemfdMappings() throws IOException {
        return Files.readAllLines(Path.of("/proc/self/maps")).stream().filter(l -> l.contains("cuvmm-host")).count();
    }

    public static boolean isOpen(int fd) { return Files.exists(Path.of("/proc/self/fd/" + fd)); }

    /**
     * Fails, listing them, when fds are open now that were not (with the same target) in
     * {@code before} (from {@link #byNumber()}). Sockets and what the JVM keeps do not count.
     */
    public static void assertNoNewFds(Map<String, String> before, String when) {
        Map<String, String> added = new TreeMap<>();
        for (Map.Entry<String, String> e : byNumber().entrySet()) {
            String target = e.getValue();
            if (target.startsWith("socket:") || keptByTheJvm(target)) continue;
            if (!target.equals(before.get(e.getKey()))) added.put(e.getKey(), target);
        }
        if (!added.isEmpty()) throw new AssertionError("fds opened and not closed " + when + ": " + added);
    }

    /**
     * Waits up to 10 s (connection threads close their sockets after the call that ended them
     * returns) for {@link #byKind()} to equal {@code baseline}; fails naming each kind that differs.
     */
    public static void assertBack(Map<String, Integer> baseline, String when) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        Map<String, Integer> now = byKind();
        while (!now.equals(baseline) && System.nanoTime() < until) {
            Thread.sleep(20);
            now = byKind();
        }
        if (!now.equals(baseline)) {
            throw new AssertionError("open fds by kind " + when + " differ from the baseline: " + diff(baseline, now));
        }
    }

    /** Keys whose values differ, as "key -> before -> after". */
    public static <V> Map<String, String> diff(Map<String, V> before, Map<String, V> after) {
        Map<String, String> d = new TreeMap<>();
        Set<String> keys = new TreeSet<>(before.keySet());
        keys.addAll(after.keySet());
        for (String k : keys) {
            if (!java.util.Objects.equals(before.get(k), after.get(k))) d.put(k, before.get(k) + " -> " + after.get(k));
        }
        return d;
    }

    /**
     * Opened by the JVM on first use and kept: /dev/random and /dev/urandom (SecureRandom, temp
     * files), cgroup files (container limits), jars of the class path.
     */
    static boolean keptByTheJvm(String target) {
        return target.equals("/dev/random") || target.equals("/dev/urandom") || target.startsWith("/sys/fs/cgroup")
                || target.endsWith(".jar");
    }

    /**
     * Opens /dev/null until the process has no fd left (EMFILE) and returns what it opened:
     * the tests of the fd limit take every fd, then close what they test, then close these.
     */
    public static java.util.List<java.io.FileInputStream> takeAll() {
        java.util.List<java.io.FileInputStream> taken = new java.util.ArrayList<>();
        try {
            for (;;) taken.add(new java.io.FileInputStream("/dev/null"));
        } catch (java.io.IOException full) {
            return taken; // "Too many open files"
        }
    }
}
