package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * Export, import and allocate at a lowered RLIMIT_NOFILE, in a child JVM: the parent lowers
 * the child's limit with prlimit once the child is ready, so the operation runs out of fds
 * and must say so (the limit's name and what to do), leaking nothing; a failure with
 * another cause near the limit must not blame it.
 */
class FdLimitTest {
    /** Child: builds an 8-chunk buffer, reports its fd count, waits, then exports. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                List<VirtualMemoryBuffer> chain = new ArrayList<>();
                VirtualMemoryBuffer b = r.allocate(2 * MiB);
                chain.add(b);
                for (int i = 2; i <= 8; i++) {
                    b = r.modifyAllocation(b, i * 2 * MiB);
                    chain.add(b);
                }
                System.out.println("READY " + TestSupport.openFds() + " " + b.chunkCount());
                System.out.flush();
                new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
                int before = TestSupport.openFds();
                try (BufferDescriptor d = b.exportDescriptor()) {
                    System.out.println("EXPORTED " + d.chunkCount());
                } catch (CudaException e) {
                    System.out.println("FAILED " + e.getMessage());
                }
                System.out.println("FDS " + before + " " + TestSupport.openFds());
                for (VirtualMemoryBuffer x : chain) x.close();
            }
        }
    }

    /**
     * Child for import / allocate (args[0]): prepares, runs the same kind of failure once so
     * every class the failure path needs is loaded (a class loaded from a directory needs
     * an fd), reports READY, and after "go" runs the operation with no fd to spare. After
     * the second "go" (the parent has restored the soft limit) it reports its fd count.
     */
    public static final class AtLimit {
        public static void main(String[] args) throws Exception {
            String mode = args[0];
            int spare = args.length > 1 ? Integer.parseInt(args[1]) : 0;
            BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer src = r.allocate(2 * MiB);
                 BufferDescriptor d = src.exportDescriptor();
                 BufferDescriptor tooBig = BufferDescriptor.fromFds(d.fds(), new long[] {4 * MiB}, HandleType.POSIX_FD,
                         4 * MiB);
                 // Not memory at all: a duplicate of stdin (a pipe, read-only), which the
                 // driver refuses with INVALID_VALUE.
                 BufferDescriptor forged = BufferDescriptor.fromFds(new int[] {0}, new long[] {2 * MiB},
                         HandleType.POSIX_FD, 2 * MiB)) {
                r.importBuffer(d).close();
                r.allocate(2 * MiB).close();
                try {
                    r.importBuffer(tooBig).close();
                    System.out.println("UNEXPECTED warm-up import succeeded");
                } catch (CudaException expected) {
                    expected.getMessage();  // the failure path, classes and all, has run once
                }
                int before = TestSupport.openFds();
                System.out.println("READY");
                System.out.flush();
                stdin.readLine();
                // Every slot that came free since the parent listed this process's fds (the JVM
                // may close one meanwhile: a CI run under load saw the import succeed) is taken,
                // then `spare` given back: no fd to spare but those, whatever happened meanwhile.
                java.util.List<java.io.FileInputStream> fillers = new java.util.ArrayList<>();
                try {
                    for (int i = 0; i < 4096; i++) fillers.add(new java.io.FileInputStream("/dev/null"));
                } catch (java.io.IOException full) {
                    // EMFILE: the limit reached
                }
                for (int i = 0; i < spare && !fillers.isEmpty(); i++) fillers.remove(fillers.size() - 1).close();
                String result;
                try {
                    if (mode.equals("import")) {
                        r.importBuffer(d).close();
                    } else if (mode.equals("forged")) {
                        r.importBuffer(forged).close();
                    } else {
                        r.allocate(2 * MiB).close();
                    }
                    result = "DONE";
                } catch (CudaException e) {
                    result = "FAILED " + e.resultName() + " " + e.call() + ": " + e.getMessage();
                }
                for (java.io.FileInputStream f : fillers) f.close();
                System.out.println(result);
                System.out.flush();
                stdin.readLine();
                System.out.println("FDS " + before + " " + TestSupport.openFds());
            }
        }
    }

    @Test
    void importAtTheFdLimitNamesTheLimit() throws Exception {
        String result = runAtLimit("import");
        assertTrue(result.contains("cuMemImportFromShareableHandle"), result);
        assertTrue(result.contains("file descriptor limit") && result.contains("RLIMIT_NOFILE"), result);
    }

    /**
     * A forged fd refused with INVALID_VALUE one fd short of the limit: the import had the fd it
     * needed, so the limit is not the cause and the message must not blame it (it did, when
     * the hint was added to every import failure near the limit).
     */
    @Test
    void aForgedFdNearTheLimitDoesNotBlameTheLimit() throws Exception {
        String result = runAtLimit("forged", 1);
        assertTrue(result.contains("CUDA_ERROR_INVALID_VALUE") && result.contains("cuMemImportFromShareableHandle"),
                result);
        assertTrue(result.contains("not open read-write") || result.contains("not a regular file"), result);
        assertFalse(result.contains("RLIMIT_NOFILE") || result.contains("file descriptor limit"), result);
    }

    @Test
    void allocateAtTheFdLimitNamesTheLimitOnTheHostDriver() throws Exception {
        String result = runAtLimit("allocate");
        assertTrue(result.contains("cuMemCreate"), result);
        assertTrue(result.contains("file descriptor limit") && result.contains("RLIMIT_NOFILE"), result);
        // No memory advice after it: the cause is fds (an independent probe saw "ask for less" appended).
        assertFalse(result.contains("ask for less"), result);
    }

    /**
     * Runs {@link AtLimit} in {@code mode} with the soft RLIMIT_NOFILE lowered to the child's
     * lowest free descriptor (read from /proc/PID/fd by this process, so no new fd fits),
     * restores it, checks that no fd leaked and returns the child's FAILED line.
     */
    private static String runAtLimit(String mode) throws Exception {
        return runAtLimit(mode, 0);
    }

    /** As {@link #runAtLimit(String)} with room for {@code spare} new descriptors. */
    private static String runAtLimit(String mode, int spare) throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/prlimit")), "prlimit (util-linux) is not installed");
        List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Dcuvmm.driver=host", "-cp", System.getProperty("java.class.path"), AtLimit.class.getName(), mode, Integer.toString(spare));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String result;
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
             Writer in = new java.io.OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8)) {
            readUntil(out, "READY");
            java.util.Set<Integer> open = new java.util.HashSet<>();
            try (java.util.stream.Stream<Path> s = Files.list(Path.of("/proc/" + p.pid() + "/fd"))) {
                s.forEach(f -> open.add(Integer.parseInt(f.getFileName().toString())));
            }
            int lowestFree = 0;
            while (open.contains(lowestFree)) lowestFree++;
            String oldSoft = prlimitSoft(p.pid());
            prlimit(p.pid(), (lowestFree + spare) + ":");
            in.write("go\n");
            in.flush();
            result = readUntil(out, "FAILED ", "DONE", "UNEXPECTED");
            prlimit(p.pid(), oldSoft + ":");
            in.write("go\n");
            in.flush();
            assertTrue(result.startsWith("FAILED "), mode + " should fail with no fd to spare: " + result);
            String fds = readUntil(out, "FDS ");
            String[] parts = fds.split(" ");
            // Not more after than before (a leak): fewer is a transient fd some JVM thread held
            // when `before` was counted (seen once under load: "FDS 20 19").
            assertTrue(Integer.parseInt(parts[2]) <= Integer.parseInt(parts[1]),
                    "fds after the failed " + mode + " no more than fds before: " + fds);
        } finally {
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child finished");
        }
        assertEquals(0, p.exitValue());
        return result;
    }

    private static String prlimitSoft(long pid) throws Exception {
        Process pl = new ProcessBuilder("prlimit", "--pid", String.valueOf(pid), "--nofile", "--raw", "--noheadings",
                "--output=SOFT").redirectErrorStream(true).start();
        String out = new String(pl.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        assertTrue(pl.waitFor(30, TimeUnit.SECONDS));
        assertEquals(0, pl.exitValue(), out);
        return out;
    }

    private static void prlimit(long pid, String nofile) throws Exception {
        Process pl = new ProcessBuilder("prlimit", "--pid", String.valueOf(pid), "--nofile=" + nofile)
                .redirectErrorStream(true).start();
        String out = new String(pl.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(pl.waitFor(30, TimeUnit.SECONDS));
        assertEquals(0, pl.exitValue(), out);
    }

    @Test
    void exportAtTheFdLimitFailsClearlyAndLeaksNothing() throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/prlimit")), "prlimit (util-linux) is not installed");
        List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Dcuvmm.driver=host", "-cp", System.getProperty("java.class.path"), Child.class.getName());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
             Writer in = new java.io.OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8)) {
            String ready = readUntil(out, "READY ");
            long open = Long.parseLong(ready.split(" ")[1]);
            // Room for 3 more fds: the export needs 8; /proc listing needs one too.
            long limit = open + 3;
            Process pl = new ProcessBuilder("prlimit", "--pid", String.valueOf(p.pid()), "--nofile=" + limit + ":" + limit)
                    .redirectErrorStream(true).start();
            assertTrue(pl.waitFor(30, TimeUnit.SECONDS));
            assertEquals(0, pl.exitValue(), new String(pl.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
            in.write("go\n");
            in.flush();
            String result = readUntil(out, "FAILED ", "EXPORTED ");
            assertTrue(result.startsWith("FAILED "), "export should fail at the lowered limit: " + result);
            assertTrue(result.contains("file descriptor limit"), result);
            assertTrue(result.contains("cuMemExportToShareableHandle"), result);
            String fds = readUntil(out, "FDS ");
            String[] parts = fds.split(" ");
            assertEquals(parts[1], parts[2], "fds after the failed export equal fds before: " + fds);
        } finally {
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child finished");
        }
        assertEquals(0, p.exitValue());
    }

    private static String readUntil(BufferedReader out, String... prefixes) throws Exception {
        StringBuilder seen = new StringBuilder();
        for (String line; (line = out.readLine()) != null; ) {
            for (String prefix : prefixes) {
                if (line.startsWith(prefix)) return line;
            }
            seen.append(line).append('\n');
        }
        throw new AssertionError("child ended before printing " + String.join(" or ", prefixes) + ":\n" + seen);
    }
}
