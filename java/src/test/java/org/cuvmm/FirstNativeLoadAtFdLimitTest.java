package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.cuvmm.internal.ClassPreload;
import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * A process's first cuvmm call made at its open-file limit (a child JVM that has made no
 * native call yet, whose limit bash lowers to 256 and which then opens {@code /dev/null} until
 * it gets no more fds). An independent fault probe found the first call there
 * failing inside class initializers ({@code Driver}: the JDK's logging could not read {@code
 * java.security}; {@code NativeStatus}: JavaCPP's load ran out of fds) and every later call of
 * that JVM failing with {@code NoClassDefFoundError} after the fds were freed. Now the first
 * calls, through the driver and through {@link BufferDescriptor#fromFds}, throw a {@link
 * CudaException} naming RLIMIT_NOFILE, and once fds are free the same JVM works.
 */
class FirstNativeLoadAtFdLimitTest {

    /** Child: two first calls with no fd free, then the driver with all of them free. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            // The classes come from directories here: load them while fds are free.
            ClassPreload.loadAll(Driver.class, "org/cuvmm/", "org/cuvmm/internal/", "org/cuvmm/internal/jni/");
            List<FileInputStream> hog = new ArrayList<>();
            try {
                while (true) hog.add(new FileInputStream("/dev/null"));
            } catch (IOException full) {
                System.out.println("HOGGED " + hog.size());
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
            System.out.flush();
        }
    }

    @Test
    void theFirstCallAtTheLimitIsARetryableCudaExceptionAndTheJvmRecovers() throws Exception {
        File log = File.createTempFile("cuvmm-first-load", ".log");
        try {
            Process p = ChildJvm.start(Child.class, log, List.of("bash", "-c", "ulimit -n 256 && exec \"$0\" \"$@\""),
                    List.of());
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child did not finish: " + ChildJvm.read(log));
            String out = ChildJvm.read(log);
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.contains("HOGGED "), out);
            for (String first : new String[] {"FROMFDS ", "FIRST "}) {
                assertTrue(out.contains(first + "org.cuvmm.CudaException: loading cuvmm's native library failed before "
                        + "the first driver call: CUDA_ERROR_OUT_OF_MEMORY (the process is at its file descriptor "
                        + "limit, RLIMIT_NOFILE"), first + " in " + out);
            }
            assertTrue(out.contains("ulimit -n") && out.contains("try again"), out);
            assertTrue(out.contains("SECOND READ 42"), out);
        } finally {
            log.delete();
        }
    }
}
