package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarOutputStream;
import java.util.jar.Manifest;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.ZipEntry;

import org.cuvmm.internal.ClassPreload;
import org.cuvmm.internal.FirstUse;
import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * A process's first cuvmm call made at its open-file limit (a child JVM that has made no
 * native call yet, whose limit bash lowers to 256, and which then opens {@code /dev/null}
 * until it gets no more fds and frees a few). Independent fault probes found the first call
 * there failing inside class initializers ({@code Driver}: the JDK's logging could not read
 * {@code java.security}; {@code NativeStatus}: JavaCPP's load ran out of fds; a pool builder's
 * logger), and every later call of that JVM failing with {@code NoClassDefFoundError} after
 * the fds were freed; and, with a few more fds free than the check asked for, JavaCPP's load
 * opening the class path's jars not yet open until the time-zone database could not be read,
 * which broke the JDK's time zones and cuvmm for good. Now the first calls, through the driver
 * and through {@link BufferDescriptor#fromFds}, throw a {@link CudaException} naming
 * RLIMIT_NOFILE, and once fds are free the same JVM works, and so do the JDK's
 * {@code java.security}, time zones and logging.
 */
class FirstNativeLoadAtFdLimitTest {
    /** Jars at the end of the child's class path that nothing opens before the first load. */
    private static final int EXTRA_JARS = 16;

    /** Child: first calls with args[0] fds free ("spareAndTwo": 8 + 2), then all of them free. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            // The classes come from directories here: load them while fds are free.
            ClassPreload.loadAll(Driver.class, "org/cuvmm/", "org/cuvmm/internal/", "org/cuvmm/internal/jni/",
                    "org/cuvmm/pool/");
            int unopened = FirstUse.unopenedClassPathJars();
            int free = args[0].equals("spareAndTwo") ? FirstUse.SPARE_FDS + 2 : Integer.parseInt(args[0]);
            System.out.println("UNOPENED JARS " + unopened + ", FREE " + free);
            List<FileInputStream> hog = new ArrayList<>();
            try {
                while (true) hog.add(new FileInputStream("/dev/null"));
            } catch (IOException full) {
                System.out.println("HOGGED " + hog.size());
            }
            for (int i = 0; i < free; i++) hog.remove(hog.size() - 1).close();
            // Public classes whose initializers logged: the logger's first use at the limit broke
            // logging and java.security for the JVM. They must not touch either before the check.
            try {
                org.cuvmm.pool.VirtualMemoryPool.builder();
                System.out.println("BUILDER OK " + LeakDetection.reportedLeaks());
            } catch (Throwable t) {
                System.out.println("BUILDER " + t);
            }
            try (BufferDescriptor d = BufferDescriptor.fromFds(new int[] {0}, new long[] {4096}, HandleType.POSIX_FD,
                    4096)) {
                System.out.println("FROMFDS MADE " + d);
            } catch (Throwable t) {
                System.out.println("FROMFDS " + t.getClass().getName() + ": " + t.getMessage());
            }
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                System.out.println("FIRST MADE " + r);
            } catch (Throwable t) {
                System.out.println("FIRST " + t.getClass().getName() + ": " + t.getMessage());
            }
            for (FileInputStream f : hog) f.close();
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate(r.granularity())) {
                b.copyFrom(0, new byte[] {42}, 0, 1);
                byte[] back = new byte[1];
                b.copyTo(0, back, 0, 1);
                System.out.println("SECOND READ " + back[0]);
            } catch (Throwable t) {
                System.out.println("SECOND " + t.getClass().getName() + ": " + t.getMessage());
            }
            // A pool's MXBeans, the JVM's first platform MBean server: at the limit its native
            // library could not load and JMX stayed disabled for the JVM (an independent probe).
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                hog.clear();
                try {
                    while (true) hog.add(new FileInputStream("/dev/null"));
                } catch (IOException full) {
                    // every fd taken
                }
                try (org.cuvmm.pool.VirtualMemoryPool pool = org.cuvmm.pool.VirtualMemoryPool.builder().resource(r)
                        .registerMBeans(true).build()) {
                    System.out.println("JMX AT LIMIT BUILT " + pool);
                } catch (Throwable t) {
                    System.out.println("JMX AT LIMIT " + t.getClass().getName() + ": " + t.getMessage());
                }
                for (FileInputStream f : hog) f.close();
                try (org.cuvmm.pool.VirtualMemoryPool pool = org.cuvmm.pool.VirtualMemoryPool.builder().resource(r)
                        .registerMBeans(true).build()) {
                    System.out.println("JMX BELOW LIMIT " + java.lang.management.ManagementFactory
                            .getPlatformMBeanServer().isRegistered(pool.objectName(org.cuvmm.pool.PoolLifetime.LOCAL)));
                }
            } catch (Throwable t) {
                System.out.println("JMX " + t);
            }
            // What the JDK reads lazily and loses for good when that read fails.
            try {
                java.security.MessageDigest.getInstance("SHA-256");
                java.time.ZoneId.systemDefault().getRules();
                System.getLogger("org.cuvmm.test").log(System.Logger.Level.DEBUG, new java.util.Date().toString());
                System.out.println("JDK OK");
            } catch (Throwable t) {
                System.out.println("JDK " + t);
            }
            System.out.flush();
        }
    }

    /** No fd free at all. */
    @Test
    void theFirstCallAtTheLimitIsARetryableCudaExceptionAndTheJvmRecovers() throws Exception {
        checkChild("0");
    }

    /**
     * Ten fds free: more than the first use's 8 spare fds (all an earlier version counted),
     * fewer than it asks for with the {@value #EXTRA_JARS} jars at the end of the class path
     * counted, which nothing opens before the first load and JavaCPP's load opens.
     */
    @Test
    void freeFdsThatTheClassPathsUnopenedJarsWouldTakeAreTooFew() throws Exception {
        checkChild("spareAndTwo");
    }

    private static void checkChild(String free) throws Exception {
        Path dir = Files.createTempDirectory("cuvmm-first-load");
        File log = dir.resolve("child.log").toFile();
        try {
            StringBuilder classPath = new StringBuilder(System.getProperty("java.class.path"));
            for (int i = 0; i < EXTRA_JARS; i++) {
                File jar = dir.resolve("extra-" + i + ".jar").toFile();
                try (JarOutputStream out = new JarOutputStream(new FileOutputStream(jar), new Manifest())) {
                    out.putNextEntry(new ZipEntry("extra/" + i + ".txt"));
                    out.write(i);
                    out.closeEntry();
                }
                classPath.append(File.pathSeparator).append(jar);
            }
            List<String> cmd = new ArrayList<>(List.of("bash", "-c", "ulimit -n 256 && exec \"$0\" \"$@\"",
                    Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp", classPath.toString(),
                    Child.class.getName(), free));
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log).start();
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child did not finish: " + ChildJvm.read(log));
            String out = ChildJvm.read(log);
            assertEquals(0, p.exitValue(), out);
            Matcher unopened = Pattern.compile("UNOPENED JARS (\\d+)").matcher(out);
            assertTrue(unopened.find() && Integer.parseInt(unopened.group(1)) >= EXTRA_JARS,
                    "the extra jars are not open yet when the first call comes: " + out);
            assertTrue(out.contains("HOGGED ") && out.contains("BUILDER OK 0"), out);
            for (String first : new String[] {"FROMFDS ", "FIRST "}) {
                assertTrue(out.contains(first + "org.cuvmm.CudaException: loading cuvmm's native library failed before "
                        + "the first driver call: CUDA_ERROR_OUT_OF_MEMORY (the process is at its file descriptor "
                        + "limit, RLIMIT_NOFILE"), first + " in " + out);
            }
            assertTrue(out.contains("ulimit -n") && out.contains("try again"), out);
            assertTrue(out.contains("SECOND READ 42"), out);
            assertTrue(out.contains("JDK OK"), out);
            assertTrue(out.contains("JMX AT LIMIT java.lang.IllegalStateException: registerMBeans: true, and the process "
                    + "is at its open-file limit (RLIMIT_NOFILE)"), out);
            assertTrue(out.contains("JMX BELOW LIMIT true"), out);
        } finally {
            try (java.util.stream.Stream<Path> files = Files.walk(dir)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }
}
