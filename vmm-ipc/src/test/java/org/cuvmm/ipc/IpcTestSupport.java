package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.cuvmm.BufferOrigin;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;

/** Helpers of the vmm-ipc tests: fd snapshots, pipes, raw frames, a 3-chunk buffer, child JVMs. */
final class IpcTestSupport {
    static {
        // The JDK opens /dev/random and /dev/urandom on first use of SecureRandom and keeps them:
        // open them now, before any baseline.
        new java.security.SecureRandom().nextLong();
        NativeIo.posix();
    }

    private IpcTestSupport() {}

    /**
     * Open fds of this process by link target (target -> how many), not counting /proc files:
     * listing /proc/self/fd opens one, and JavaCPP reads /proc/self/statm. Sockets, pipes and
     * memfds ("/memfd:cuvmm-host:...") all count, so a leak of any of them shows.
     */
    static Map<String, Integer> fdSnapshot() {
        Map<String, Integer> m = new TreeMap<>();
        try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
            for (Path p : (Iterable<Path>) s::iterator) {
                String t;
                try {
                    t = Files.readSymbolicLink(p).toString();
                } catch (IOException gone) {
                    continue; // the directory's own fd, closed by now
                }
                if (t.startsWith("/proc/")) continue;
                // socket:[123] / pipe:[456]: group by kind, an inode number says nothing across time
                if (t.startsWith("socket:")) t = "socket";
                else if (t.startsWith("pipe:")) t = "pipe";
                else if (t.startsWith("/memfd:cuvmm-host")) t = "/memfd:cuvmm-host";
                m.merge(t, 1, Integer::sum);
            }
        } catch (IOException e) {
            throw new AssertionError(e);
        }
        return m;
    }

    /** True when this JVM runs cuvmm's host driver (exported fds are memfds any process can mmap). */
    static boolean onHostDriver() { return org.cuvmm.Driver.get().kind() == org.cuvmm.DriverKind.HOST; }

    static int memfdCount() { return fdSnapshot().getOrDefault("/memfd:cuvmm-host", 0); }

    /** Waits (up to 10 s: connection threads close their sockets asynchronously) for the fds to match {@code baseline}. */
    static void assertFdsBack(Map<String, Integer> baseline, String when) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        Map<String, Integer> now = fdSnapshot();
        while (!now.equals(baseline) && System.nanoTime() < until) {
            Thread.sleep(20);
            now = fdSnapshot();
        }
        if (!now.equals(baseline)) {
            Map<String, String> diff = new TreeMap<>();
            java.util.Set<String> keys = new java.util.TreeSet<>(baseline.keySet());
            keys.addAll(now.keySet());
            for (String k : keys) {
                int a = baseline.getOrDefault(k, 0), b = now.getOrDefault(k, 0);
                if (a != b) diff.put(k, a + " -> " + b);
            }
            throw new AssertionError("open fds by kind " + when + " differ from the baseline: " + diff);
        }
    }

    /** A pipe: [read end, write end], both owned by the caller. */
    static int[] pipe() {
        int[] p = new int[2];
        assertEquals(0, NativeIo.posix().pipe(p), "pipe()");
        return p;
    }

    /** True when {@code fd} is open in this process. */
    static boolean isOpen(int fd) { return Files.exists(Path.of("/proc/self/fd/" + fd)); }

    /** A fresh short socket path in its own temporary directory. */
    static Path socketPath() throws IOException {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm");
        dir.toFile().deleteOnExit();
        return dir.resolve("s.sock");
    }

    static void deleteTree(Path dir) {
        if (dir == null || !Files.exists(dir)) return;
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }

    /** A header with every field chosen by the test. */
    static byte[] header(int magic, int version, int type, int requestId, long length) {
        return ByteBuffer.allocate(16).putInt(magic).putShort((short) version).putShort((short) type)
                .putInt(requestId).putInt((int) length).array();
    }

    static byte[] frame(int type, int requestId, byte[] payload) {
        return concat(header(Protocol.MAGIC, Protocol.VERSION, type, requestId, payload.length), payload);
    }

    static byte[] concat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) n += p.length;
        ByteBuffer b = ByteBuffer.allocate(n);
        for (byte[] p : parts) b.put(p);
        return b.array();
    }

    /** A u16-length UTF-8 string. */
    static byte[] str(String s) {
        byte[] u = s.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(2 + u.length).putShort((short) u.length).put(u).array();
    }

    /** A DESCRIPTOR payload with every field chosen by the test. */
    static byte[] descriptorPayload(long lease, int handleType, long size, long... chunkSizes) {
        ByteBuffer b = ByteBuffer.allocate(24 + 8 * chunkSizes.length).putLong(lease).putInt(handleType).putLong(size)
                .putInt(chunkSizes.length);
        for (long c : chunkSizes) b.putLong(c);
        return b.array();
    }

    /** A resource and a 3-chunk buffer whose last chunk was placed by a forced move (as in GrowTest). */
    static final class ThreeChunks implements AutoCloseable {
        final VirtualMemoryResource resource;
        final VirtualMemoryBuffer buffer;

        ThreeChunks() {
            long g;
            long hint;
            try (VirtualMemoryResource probe = VirtualMemoryResource.create(0)) {
                g = probe.granularity();
                try (VirtualMemoryBuffer b = probe.allocate(32 * g)) {
                    hint = b.address();
                }
            }
            resource = resourceAt(hint);
            VirtualMemoryBuffer a = resource.allocate(g);
            VirtualMemoryBuffer b = resource.modifyAllocation(a, 2 * g);
            VirtualMemoryResource decoyResource = resourceAt(b.address() + 2 * g);
            VirtualMemoryBuffer decoy = decoyResource.allocate(g);
            VirtualMemoryBuffer c = resource.modifyAllocation(b, 3 * g - 4096 + 100);
            a.close();
            b.close();
            decoy.close();
            decoyResource.close();
            buffer = c;
            assertEquals(3, c.chunkCount(), "chunks of " + c);
            assertEquals(BufferOrigin.MOVED, c.origin(), "the last chunk was placed by a forced move");
        }

        private static VirtualMemoryResource resourceAt(long hint) {
            return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().addressHint(hint).build());
        }

        @Override
        public void close() {
            buffer.close();
            resource.close();
        }
    }

    /** Starts {@code main} in a child JVM with this JVM's class path; output goes to {@code log}. */
    static Process startChild(Class<?> main, File log, List<String> prefix, List<String> jvmArgs, String... args)
            throws IOException {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(jvmArgs);
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(main.getName());
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log);
        return pb.start();
    }

    static String read(File f) {
        try {
            return Files.readString(f.toPath(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(unreadable: " + e + ")";
        }
    }

    /** Waits up to {@code seconds} for {@code condition}. */
    static void await(String what, int seconds, java.util.function.BooleanSupplier condition) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < until, "timed out after " + seconds + " s waiting for: " + what);
            Thread.sleep(10);
        }
    }
}
