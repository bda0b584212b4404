package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * The host driver's memory follows the process's memory cgroup: a child JVM in a 1 GiB cgroup
 * sees 1 GiB of device memory and is refused a 1.5 GiB allocation with {@code
 * CUDA_ERROR_OUT_OF_MEMORY} (before: granted, and filling it got the JVM killed by the
 * kernel). Needs a writable cgroup v1 memory hierarchy (root, as on CI); skips with the reason
 * otherwise. The cgroup logic itself is also covered, without cgroups, by host_driver_test.
 */
class CgroupMemoryBudgetTest {
    private static final long LIMIT = 1L << 30;

    /** The child: reports the memory it sees, then asks for 1.5 times the limit (never filled). */
    public static final class Child {
        public static void main(String[] args) {
            System.out.println("total " + Driver.get().device(0).totalMemory());
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                try (VirtualMemoryBuffer small = r.allocate(64L << 20)) {
                    small.fill((byte) 7); // within the limit: real pages, no trouble
                }
                try (VirtualMemoryBuffer b = r.allocate(LIMIT + LIMIT / 2)) {
                    System.out.println("granted " + b.size());
                } catch (CudaException e) {
                    System.out.println("refused " + e.resultName());
                }
            }
        }
    }

    @Test
    void aChildInAOneGibCgroupSeesOneGibAndIsRefusedMore() throws Exception {
        assumeTrue(TestSupport.onHostDriver() || Driver.get().isHostLibrary(), "host-backed driver only");
        Path mount = Path.of("/sys/fs/cgroup/memory");
        Path own = ownMemoryCgroup(mount);
        assumeTrue(own != null && Files.isWritable(own) && Files.exists(own.resolve("memory.limit_in_bytes")),
                "no writable cgroup v1 memory hierarchy at " + mount + " for this process (needs root and cgroup v1)");
        // A child of this process's own group: the child JVM stays inside the job's accounting.
        Path group = own.resolve("cuvmm-test-" + ProcessHandle.current().pid());
        File log = File.createTempFile("cuvmm-cgroup", ".log");
        Process p = null;
        try {
            try {
                Files.createDirectory(group);
                Files.writeString(group.resolve("memory.limit_in_bytes"), Long.toString(LIMIT));
            } catch (IOException e) {
                org.junit.jupiter.api.Assumptions.abort("cannot make a memory cgroup at " + group + ": " + e);
            }
            // The shell joins the cgroup, then becomes the JVM (which stays in it).
            p = ChildJvm.start(Child.class, log, List.of("sh", "-c",
                    "echo $$ > " + group.resolve("cgroup.procs") + " && exec \"$@\"", "sh"), List.of("-Xmx64m"));
            assertTrue(p.waitFor(120, TimeUnit.SECONDS), "child finished: " + ChildJvm.read(log));
            String out = ChildJvm.read(log);
            assertTrue(p.exitValue() == 0, "child exit " + p.exitValue() + ":\n" + out);
            assertTrue(out.contains("total " + LIMIT + "\n"), "the device memory is the cgroup's limit:\n" + out);
            assertTrue(out.contains("refused CUDA_ERROR_OUT_OF_MEMORY"), "1.5 GiB refused:\n" + out);
        } finally {
            if (p != null && p.isAlive()) {
                p.destroyForcibly();
                p.waitFor(10, TimeUnit.SECONDS);
            }
            log.delete();
            // The child has ended: the cgroup is empty and can go (a retry covers a slow exit).
            for (int i = 0; i < 50 && Files.exists(group); i++) {
                try {
                    Files.delete(group);
                } catch (IOException e) {
                    Thread.sleep(100);
                }
            }
        }
    }

    /** This process's cgroup v1 memory group under {@code mount} ("N:memory:/path" in /proc/self/cgroup), or null. */
    private static Path ownMemoryCgroup(Path mount) throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/cgroup"))) {
            String[] f = line.split(":", 3);
            if (f.length == 3 && java.util.Arrays.asList(f[1].split(",")).contains("memory")) {
                return f[2].equals("/") ? mount : mount.resolve(f[2].substring(1));
            }
        }
        return null;
    }
}
