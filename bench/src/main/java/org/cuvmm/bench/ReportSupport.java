package org.cuvmm.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import org.cuvmm.Driver;

import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.Options;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.openjdk.jmh.runner.options.VerboseMode;

/**
 * What the streams and sharing/pool reports (and RatioReport) share: one JMH run of one
 * benchmark method, waiting for the JMH lock, the iteration scores of a result, the lines a report starts
 * with (date, driver, machine, load average), and writing the report. No state.
 */
public final class ReportSupport {
    private ReportSupport() {}

    /**
     * Runs JMH with {@code options}. JMH takes /tmp/jmh.lock itself and refuses to start while
     * another JMH holds it: this waits for it to be free rather than fail (another benchmark on a
     * shared machine), and tries again when another JMH took it first.
     */
    public static Collection<RunResult> runWaitingForLock(Options options)
            throws RunnerException, IOException, InterruptedException {
        while (true) {
            new RatioReport.BenchLock().waitUntilFree();
            try {
                return new Runner(options).run();
            } catch (RunnerException e) {
                if (String.valueOf(e.getMessage()).contains("Unable to acquire the JMH lock")) continue;
                throw e;
            }
        }
    }

    /**
     * Runs benchmark method {@code method} of {@code cls} alone (its exact name), in one fork,
     * with the warm-up and measured iterations of {@code s} ({@code s.timeMs} each), {@code
     * param} set to {@code value} when not null, and the threads its annotations ask for (1
     * by default). The fork inherits this JVM's arguments (JMH's default) plus one that makes
     * it check it runs on the driver {@code kind} the baseline ran on. Waits for the JMH lock
     * ({@link #runWaitingForLock}). Exactly one result, else IllegalStateException.
     */
    public static RunResult runJmh(Class<?> cls, String method, String param, String value, Mode mode, TimeUnit unit,
                                   ReportOptions s, boolean quiet, String kind)
            throws RunnerException, IOException, InterruptedException {
        ChainedOptionsBuilder b = new OptionsBuilder()
                .include("^" + Pattern.quote(cls.getName() + "." + method) + "$")
                .forks(1)
                .warmupIterations(s.warmup)
                .warmupTime(TimeValue.milliseconds(s.timeMs))
                .measurementIterations(s.iterations)
                .measurementTime(TimeValue.milliseconds(s.timeMs))
                .mode(mode)
                .timeUnit(unit)
                .shouldFailOnError(true)
                .jvmArgsAppend("-D" + BenchChecks.EXPECT_DRIVER_PROPERTY + "=" + kind)
                .verbosity(quiet ? VerboseMode.SILENT : VerboseMode.NORMAL);
        if (param != null) b.param(param, value);
        Collection<RunResult> results = runWaitingForLock(b.build());
        if (results.size() != 1) {
            throw new IllegalStateException(cls.getSimpleName() + "." + method + ": JMH returned " + results.size()
                    + " results (expected 1)");
        }
        return results.iterator().next();
    }

    /** The primary score of every measured iteration of {@code r}, in order. */
    public static List<Double> iterations(RunResult r) {
        List<Double> v = new ArrayList<>();
        for (BenchmarkResult br : r.getBenchmarkResults()) {
            for (IterationResult ir : br.getIterationResults()) v.add(ir.getPrimaryResult().getScore());
        }
        return v;
    }

    /** The first "model name" of /proc/cpuinfo; the architecture where it cannot be read. */
    public static String cpuModel() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                if (line.startsWith("model name")) return line.substring(line.indexOf(':') + 1).trim();
            }
        } catch (IOException ignored) {
            // fall through
        }
        return System.getProperty("os.arch");
    }

    /** The 1, 5 and 15 minute load averages of /proc/loadavg; "?" where it cannot be read. */
    public static String loadAverage() {
        try {
            String[] f = Files.readString(Path.of("/proc/loadavg")).trim().split(" ");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (IOException e) {
            return "?";
        }
    }

    /**
     * The lines the streams and sharing/pool reports start with, after their title: date,
     * driver (flagged when it is the host simulation), machine and load average at start.
     */
    public static List<String> headerLines(Driver driver) {
        String kind = driver.kind().name().toLowerCase(Locale.ROOT);
        return List.of(
                "- date: " + ZonedDateTime.now().format(DateTimeFormatter.ISO_OFFSET_DATE_TIME),
                "- driver: **" + kind + "** " + driver.versionString() + " (" + driver.reason() + ")"
                        + notAGpuResult(kind, driver.isHostLibrary()),
                "- machine: " + Runtime.getRuntime().availableProcessors() + " cores, " + cpuModel() + "; Java "
                        + System.getProperty("java.version"),
                "- load average at start: " + loadAverage());
    }

    /**
     * What a report's driver line adds when its numbers are no GPU result: the host driver, or
     * the cuda driver over cuvmm's host library ({@link Driver#isHostLibrary()}); "" on the
     * NVIDIA driver.
     */
    public static String notAGpuResult(String kind, boolean hostLibrary) {
        if (kind.equals("host")) return " — the memfd/mmap host simulation, NOT a GPU result";
        return hostLibrary ? " — cuda driver API over the host library (no GPU), NOT a GPU result" : "";
    }

    /** Writes {@code report} to {@code out} (creating its folder) and says so; nothing when {@code out} is null. */
    public static void write(Path out, CharSequence report) throws IOException {
        if (out == null) return;
        if (out.getParent() != null) Files.createDirectories(out.getParent());
        Files.writeString(out, report);
        System.out.println("(written to " + out + ")");
    }
}
