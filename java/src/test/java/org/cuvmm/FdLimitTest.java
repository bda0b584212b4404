package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
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
 * Export at a lowered RLIMIT_NOFILE, in a child JVM: the parent lowers the child's limit
 * with prlimit once the child is ready, so the export of an 8-chunk buffer runs out of fds.
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
