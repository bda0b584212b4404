package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/** Shared helpers of the core tests: counters, fd counts, patterns, child JVMs. */
final class TestSupport {
    static final long MiB = 1L << 20;

    private TestSupport() {}

    static Driver driver() { return Driver.get(); }

    static DriverCounters counters() { return Driver.get().counters(); }

    static boolean onHostDriver() { return Driver.get().kind() == DriverKind.HOST; }

    /** Snapshot of live objects: ours on either driver, plus the host driver's own. */
    static long[] live() {
        DriverCounters c = counters();
        return new long[] {c.liveAllocations(), c.liveReservations(), c.liveMappings(), c.liveRanges(),
                c.hostAllocations(), c.hostReservations(), c.hostMappings(), c.hostMemfds()};
    }

    static void assertLive(long[] expected, String when) {
        long[] now = live();
        assertEquals(java.util.Arrays.toString(expected), java.util.Arrays.toString(now),
                "live counters [ours: allocations, reservations, mappings, ranges; host: allocations, "
                        + "reservations, mappings, memfds] " + when);
    }

    /**
     * Open fds of this process, not counting /proc files and sockets: JavaCPP caches
     * /proc/self/statm, listing /proc/self/fd opens one, and the test runner opens a socket on
     * its own schedule. cuvmm's core opens neither (memfds are counted by {@link #memfdFds()}).
     */
    static int openFds() {
        return (int) fdTargets().values().stream()
                .filter(t -> !t.startsWith("/proc/") && !t.startsWith("socket:")).count();
    }

    /** fd number -> link target, for failure messages. */
    static java.util.Map<String, String> fdTargets() {
        java.util.Map<String, String> m = new java.util.TreeMap<>();
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) s::iterator) {
                try {
                    m.put(p.getFileName().toString(), Files.readSymbolicLink(p).toString());
                } catch (IOException gone) {
                    // the directory's own fd
                }
            }
        } catch (IOException e) {
            m.put("error", e.toString());
        }
        return m;
    }

    /** Fails listing the fds (other than /proc files and sockets) open now that were not in {@code before}. */
    static void assertNoNewFds(java.util.Map<String, String> before, String when) {
        java.util.Map<String, String> now = fdTargets();
        java.util.Map<String, String> added = new java.util.TreeMap<>();
        for (java.util.Map.Entry<String, String> e : now.entrySet()) {
            String t = e.getValue();
            // The JDK keeps /dev/random and /dev/urandom open once SecureRandom (temp files) is used.
            // The JVM reads cgroup limits through briefly opened /sys/fs/cgroup files.
            if (t.startsWith("/proc/") || t.startsWith("socket:") || t.startsWith("/dev/random")
                    || t.startsWith("/dev/urandom") || t.startsWith("/sys/fs/cgroup")) continue;
            if (!t.equals(before.get(e.getKey()))) added.put(e.getKey(), t);
        }
        if (!added.isEmpty()) throw new AssertionError("fds opened and not closed " + when + ": " + added);
    }

    /** Open fds that are cuvmm host-driver memfds. */
    static long memfdFds() throws IOException {
        long n = 0;
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) s::iterator) {
                try {
                    if (Files.readSymbolicLink(p).toString().startsWith("/memfd:cuvmm-host")) n++;
                } catch (IOException gone) {
                    // the directory's own fd, closed by now
                }
            }
        }
        return n;
    }

    /** Lines of /proc/self/maps naming a cuvmm host memfd. */
    static long memfdMappings() throws IOException {
        return Files.readAllLines(Path.of("/proc/self/maps")).stream().filter(l -> l.contains("cuvmm-host")).count();
    }

    static byte[] pattern(int length, int seed) {
        byte[] b = new byte[length];
        int x = seed * 0x9E3779B9 + 1;
        for (int i = 0; i < length; i++) {
            x ^= x << 13;
            x ^= x >>> 17;
            x ^= x << 5;
            b[i] = (byte) x;
        }
        return b;
    }

    /** Runs {@code mainClass} in a child JVM with this classpath; returns exit code and output. */
    static ChildResult runChild(Class<?> mainClass, List<String> jvmArgs, java.util.Map<String, String> env,
                                String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(jvmArgs);
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(mainClass.getName());
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().remove("CUVMM_DRIVER");
        pb.environment().putAll(env);
        File out = File.createTempFile("cuvmm-child", ".log");
        try {
            pb.redirectOutput(out);
            Process p = pb.start();
            if (!p.waitFor(120, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("child JVM " + mainClass.getSimpleName() + " did not finish in 120 s");
            }
            return new ChildResult(p.exitValue(), Files.readString(out.toPath(), StandardCharsets.UTF_8));
        } finally {
            out.delete();
        }
    }

    static final class ChildResult {
        final int exitCode;
        final String output;

        ChildResult(int exitCode, String output) {
            this.exitCode = exitCode;
            this.output = output;
        }

        @Override
        public String toString() { return "exit " + exitCode + ":\n" + output; }
    }
}
