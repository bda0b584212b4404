package org.cuvmm;

import java.io.IOException;
import java.util.List;
import java.util.Map;

import org.cuvmm.testing.ChildJvm;
import org.cuvmm.testing.OpenFds;

/**
 * Helpers of the core tests. What every module's tests share (fds, live objects, child JVMs,
 * test data) is in {@link org.cuvmm.testing}; these are the core's short names for it.
 */
final class TestSupport {
    static final long MiB = 1L << 20;

    private TestSupport() {}

    static Driver driver() { return Driver.get(); }

    static DriverCounters counters() { return Driver.get().counters(); }

    static boolean onHostDriver() { return Driver.get().kind() == DriverKind.HOST; }

    /** Open fds of this process other than /proc files and sockets (printed by child JVMs). */
    static int openFds() {
        return (int) OpenFds.byNumber().values().stream().filter(t -> !t.startsWith("socket:")).count();
    }

    /** fd number -> link target. */
    static Map<String, String> fdTargets() { return OpenFds.byNumber(); }

    static void assertNoNewFds(Map<String, String> before, String when) { OpenFds.assertNoNewFds(before, when); }

    /** Open fds that are cuvmm host-driver memfds. */
    static long memfdFds() { return OpenFds.cuvmmMemfds(); }

    /** Lines of /proc/self/maps naming a cuvmm host memfd. */
    static long memfdMappings() throws IOException { return OpenFds.cuvmmMemfdMappings(); }

    /** Runs {@code mainClass} in a child JVM with this class path; returns exit code and output. */
    static ChildJvm.Result runChild(Class<?> mainClass, List<String> jvmArgs, Map<String, String> env, String... args)
            throws IOException, InterruptedException {
        return ChildJvm.run(mainClass, jvmArgs, env, args);
    }
}
