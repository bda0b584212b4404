package org.cuvmm.testing;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A second JVM running a test's main class with this JVM's java and class path: the other
 * process of the cross-process tests.
 */
public final class ChildJvm {
    private ChildJvm() {}

    /** What {@link #run} returns. */
    public record Result(int exitCode, String output) {
        @Override
        public String toString() { return "exit " + exitCode + ":\n" + output; }
    }

    /**
     * Starts {@code main} with this process's environment (so it selects the same driver);
     * stdout and stderr go to {@code log}. {@code prefix} goes before the java command (e.g.
     * {@code prlimit --nofile=64:64 --}, {@code setpriv ...}).
     */
    public static Process start(Class<?> main, File log, List<String> prefix, List<String> jvmArgs, String... args)
            throws IOException {
        return launch(main, log, prefix, jvmArgs, null, args);
    }

    private static Process launch(Class<?> main, File log, List<String> prefix, List<String> jvmArgs,
                                  Map<String, String> env, String... args) throws IOException {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(jvmArgs);
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(main.getName());
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log);
        if (env != null) {
            pb.environment().remove("CUVMM_DRIVER");
            pb.environment().putAll(env);
        }
        return pb.start();
    }

    /**
     * Runs {@code main} to its end (at most 120 s, then it is killed and the test fails). The
     * child does not inherit {@code CUVMM_DRIVER} (tests of driver selection set it in
     * {@code env} when they want it); the rest of {@code env} is added to this environment.
     */
    public static Result run(Class<?> main, List<String> jvmArgs, Map<String, String> env, String... args)
            throws IOException, InterruptedException {
        File log = File.createTempFile("cuvmm-child", ".log");
        try {
            Process p = launch(main, log, List.of(), jvmArgs, env, args);
            if (!p.waitFor(120, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new AssertionError("child JVM " + main.getSimpleName() + " did not finish in 120 s:\n" + read(log));
            }
            return new Result(p.exitValue(), read(log));
        } finally {
            log.delete();
        }
    }

    /** A child's log, or why it cannot be read. */
    public static String read(File log) {
        try {
            return Files.readString(log.toPath(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(unreadable: " + e + ")";
        }
    }
}
