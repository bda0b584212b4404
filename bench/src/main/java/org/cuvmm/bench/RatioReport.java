package org.cuvmm.bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.Result;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.openjdk.jmh.runner.options.VerboseMode;

/**
 * Runs every benchmark in JMH and its C++ baseline in one invocation and prints the
 * Java / C++ ratio of each (target: at most {@value #TARGET}x, brief section 9).
 *
 * <p>For each operation, in this order, so that the two sides are measured close in time
 * on a shared machine: the driver calls one Java op makes are counted (outside JMH, with
 * {@link DriverCounters}) and compared with the calls the baseline reports for one op; the
 * C++ baseline runs; JMH runs the Java benchmark (its own forked JVM); the C++ baseline
 * runs again. Both sides use the same schedule: {@code --warmup} rounds then
 * {@code --iterations} measured rounds of {@code --time-ms} each, a round's value being its
 * ns/op. The headline ratio is the median Java iteration over the median C++ round (both
 * C++ runs together); the ratio of the means is printed beside it. Medians, because on a
 * shared machine a burst of someone else's work inflates a few rounds of one side.
 *
 * <pre>
 * java -cp "bench/target/cuvmm-bench.jar:bench/target/lib/*" org.cuvmm.bench.RatioReport [options]
 *   --warmup N       warm-up rounds per side (default 3)
 *   --iterations N   measured rounds per side (default 5)
 *   --time-ms N      length of one round in ms (default 1000)
 *   --forks N        JMH forks (default 1)
 *   --only a,b       operations to run: alloc2, alloc64, grow, move (default all)
 *   --out FILE       also write the report (markdown) there (default bench/target/ratio-report.md)
 *   --quiet          no JMH progress output
 * </pre>
 *
 * <p>The driver follows the usual settings ({@code -Dcuvmm.driver} / {@code CUVMM_DRIVER},
 * default auto); the baseline gets the same settings through the environment, and the run
 * fails if the two sides end up on different drivers.
 */
public final class RatioReport {
    static final double TARGET = 1.15;

    /** One compared operation: its JMH benchmark and its name in the C++ baseline. */
    enum Operation {
        ALLOC_2MIB("alloc2", "allocate+close 2 MiB", "allocate_close_2MiB", AllocateCloseBenchmark.class,
                "allocateClose", "sizeMiB", "2"),
        ALLOC_64MIB("alloc64", "allocate+close 64 MiB", "allocate_close_64MiB", AllocateCloseBenchmark.class,
                "allocateClose", "sizeMiB", "64"),
        GROW_IN_PLACE("grow", "grow in place (+1 chunk, close)", "grow_in_place", GrowBenchmark.class,
                "growInPlace", null, null),
        MOVE("move", "grow by move (+1 chunk, close)", "move", GrowBenchmark.class, "move", null, null);

        final String key;
        final String label;
        final String baselineName;
        final Class<?> benchmarkClass;
        final String method;
        final String param;
        final String paramValue;

        Operation(String key, String label, String baselineName, Class<?> benchmarkClass, String method, String param,
                  String paramValue) {
            this.key = key;
            this.label = label;
            this.baselineName = baselineName;
            this.benchmarkClass = benchmarkClass;
            this.method = method;
            this.param = param;
            this.paramValue = paramValue;
        }

        /** A fixture for this operation, outside JMH (call counting). */
        AutoCloseable fixture() {
            switch (this) {
                case ALLOC_2MIB: return new AllocateCloseFixture(2L << 20);
                case ALLOC_64MIB: return new AllocateCloseFixture(64L << 20);
                case GROW_IN_PLACE: return GrowFixture.inPlace();
                default: return GrowFixture.moving();
            }
        }

        static long run(AutoCloseable fixture) {
            return fixture instanceof AllocateCloseFixture ? ((AllocateCloseFixture) fixture).run()
                    : ((GrowFixture) fixture).run();
        }
    }

    /** Settings of one invocation. */
    static final class Settings {
        int warmup = 3;
        int iterations = 5;
        long timeMs = 1000;
        int forks = 1;
        List<Operation> operations = new ArrayList<>(Arrays.asList(Operation.values()));
        Path out;
        boolean quiet;
    }

    /** What the baseline printed for one operation in one run. */
    static final class BaselineRun {
        String kind;
        String reason;
        double meanNs = Double.NaN;
        double sdNs = Double.NaN;
        String rounds = "";
        List<Double> roundNs = new ArrayList<>();
        Map<String, Long> calls = new LinkedHashMap<>();
    }

    /** One row of the report. */
    static final class Row {
        Operation op;
        Map<String, Long> javaCalls;
        Map<String, Long> cppCalls;
        double javaNs;                              // JMH score: mean of the measured iterations
        double javaErrorNs;                         // JMH 99.9% confidence half-width
        List<Double> javaIterations = new ArrayList<>();
        double cppNs1;                              // mean of run 1's measured rounds
        double cppNs2;                              // mean of run 2's measured rounds
        List<Double> cppRounds = new ArrayList<>(); // both runs' rounds

        double cppNs() { return (cppNs1 + cppNs2) / 2; }
        double ratio() { return javaNs / cppNs(); }
        double javaMedian() { return median(javaIterations); }
        double cppMedian() { return median(cppRounds); }
        /** The headline: medians resist the bursts of other work on a shared machine. */
        double medianRatio() { return javaMedian() / cppMedian(); }
    }

    private RatioReport() {}

    public static void main(String[] args) throws Exception {
        Settings s = parse(args);
        Driver driver = Driver.get();
        String kind = driver.kind().name().toLowerCase(Locale.ROOT);
        Path baseline = baselineBinary();
        String machine = machine();
        String started = ZonedDateTime.now(ZoneOffset.UTC).format(DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm 'UTC'"));
        String loadBefore = loadAverage();
        System.out.println("cuvmm ratio report, " + started);
        System.out.println("driver: " + kind + " (" + driver.reason() + ")");
        System.out.println("machine: " + machine);
        System.out.println("baseline: " + baseline);
        System.out.println("schedule per side: " + s.warmup + " warm-up + " + s.iterations + " measured rounds of "
                + s.timeMs + " ms" + ", JMH forks " + s.forks);

        List<Row> rows = new ArrayList<>();
        for (Operation op : s.operations) {
            System.out.println();
            System.out.println("=== " + op.label + " ===");
            Row row = new Row();
            row.op = op;
            row.javaCalls = javaCallsPerOp(op);
            BaselineRun first = runBaseline(baseline, op, s);
            checkSameDriver(kind, first);
            row.cppCalls = first.calls;
            row.cppNs1 = first.meanNs;
            System.out.printf(Locale.ROOT, "C++ run 1: %.1f ns/op (rounds %s)%n", first.meanNs, first.rounds);
            RunResult jmh = runJmh(op, s, kind);
            Result<?> primary = jmh.getPrimaryResult();
            row.javaNs = primary.getScore();
            row.javaErrorNs = primary.getScoreError();
            for (BenchmarkResult br : jmh.getBenchmarkResults()) {
                for (IterationResult ir : br.getIterationResults()) row.javaIterations.add(ir.getPrimaryResult().getScore());
            }
            row.cppRounds.addAll(first.roundNs);
            System.out.printf(Locale.ROOT, "Java (JMH): %.1f ± %.1f ns/op (iterations %s)%n", row.javaNs, row.javaErrorNs,
                    join(row.javaIterations));
            BaselineRun second = runBaseline(baseline, op, s);
            row.cppNs2 = second.meanNs;
            row.cppRounds.addAll(second.roundNs);
            System.out.printf(Locale.ROOT, "C++ run 2: %.1f ns/op (rounds %s)%n", second.meanNs, second.rounds);
            rows.add(row);
        }

        String report = report(rows, kind, driver, machine, started, loadBefore, loadAverage(), s);
        System.out.println();
        System.out.println(report);
        if (s.out != null) {
            Files.createDirectories(s.out.toAbsolutePath().getParent());
            Files.writeString(s.out, report, StandardCharsets.UTF_8);
            System.out.println("written to " + s.out);
        }
        boolean callsDiffer = rows.stream().anyMatch(r -> !r.javaCalls.equals(r.cppCalls));
        if (callsDiffer) {
            System.err.println("the Java and C++ sides do not make the same driver calls: the ratios above compare "
                    + "different work (see the calls columns)");
            System.exit(3);
        }
    }

    // ---- the Java side ----

    /** Calls per op of the Java path, steady state: two warm ops, then 4 counted ops. */
    static Map<String, Long> javaCallsPerOp(Operation op) throws Exception {
        final int counted = 4;
        DriverCounters counters = Driver.get().counters();
        Map<String, Long> perOp = new LinkedHashMap<>();
        try (AutoCloseable fixture = op.fixture()) {
            Operation.run(fixture);
            Operation.run(fixture);
            counters.resetCalls();
            for (int i = 0; i < counted; i++) Operation.run(fixture);
            for (Map.Entry<String, Long> e : counters.calls().entrySet()) {
                long n = e.getValue();
                if (n == 0) continue;
                if (n % counted != 0) {
                    throw new IllegalStateException(op.label + ": " + e.getKey() + " was called " + n + " times in "
                            + counted + " ops: not the same calls every op");
                }
                perOp.put(e.getKey(), n / counted);
            }
        }
        return perOp;
    }

    static RunResult runJmh(Operation op, Settings s, String kind) throws RunnerException {
        ChainedOptionsBuilder b = new OptionsBuilder()
                .include("^" + Pattern.quote(op.benchmarkClass.getName() + "." + op.method) + "$")
                .forks(s.forks)
                .warmupIterations(s.warmup)
                .warmupTime(TimeValue.milliseconds(s.timeMs))
                .measurementIterations(s.iterations)
                .measurementTime(TimeValue.milliseconds(s.timeMs))
                .mode(Mode.AverageTime)
                .timeUnit(TimeUnit.NANOSECONDS)
                .threads(1)
                .shouldFailOnError(true)
                // The fork inherits this JVM's arguments (JMH's default); this one makes it
                // check it runs the driver the baseline ran on.
                .jvmArgsAppend("-D" + BenchChecks.EXPECT_DRIVER_PROPERTY + "=" + kind)
                .verbosity(s.quiet ? VerboseMode.SILENT : VerboseMode.NORMAL);
        if (op.param != null) b.param(op.param, op.paramValue);
        Collection<RunResult> results = new Runner(b.build()).run();
        if (results.size() != 1) {
            throw new IllegalStateException(op.label + ": JMH returned " + results.size() + " results (expected 1)");
        }
        return results.iterator().next();
    }

    // ---- the C++ side ----

    static Path baselineBinary() throws Exception {
        String configured = System.getProperty("cuvmm.bench.baseline", System.getenv("CUVMM_BASELINE"));
        Path p;
        if (configured != null && !configured.isBlank()) {
            p = Path.of(configured);
        } else {
            // bench/target/cuvmm-bench.jar or bench/target/classes: the binary is in bench/target.
            Path code = Path.of(RatioReport.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            p = code.getParent().resolve("cuvmm-baseline");
        }
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException("baseline binary: " + p + " (expected: an executable; build it with "
                    + "`mvn -pl bench -am package` or bench/run, or point -Dcuvmm.bench.baseline at it)");
        }
        return p;
    }

    static BaselineRun runBaseline(Path binary, Operation op, Settings s) throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(binary.toString(), "--only", op.baselineName,
                "--warmup-rounds", Integer.toString(s.warmup), "--rounds", Integer.toString(s.iterations),
                "--round-ms", Long.toString(s.timeMs));
        // The same driver settings this JVM resolved (system property, else environment).
        passSetting(pb, "cuvmm.driver", "CUVMM_DRIVER");
        passSetting(pb, "cuvmm.host.devices", "CUVMM_HOST_DEVICES");
        passSetting(pb, "cuvmm.host.granularity", "CUVMM_HOST_GRANULARITY");
        passSetting(pb, "cuvmm.cuda.library", "CUVMM_CUDA_LIBRARY");
        pb.redirectErrorStream(true);
        Process process = pb.start();
        BaselineRun run = new BaselineRun();
        StringBuilder all = new StringBuilder();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                all.append(line).append('\n');
                parseBaselineLine(line, op, run);
            }
        }
        int rc = process.waitFor();
        if (rc != 0 || Double.isNaN(run.meanNs) || run.kind == null) {
            throw new IllegalStateException("C++ baseline for " + op.baselineName + " failed (exit " + rc + "):\n" + all);
        }
        return run;
    }

    private static void passSetting(ProcessBuilder pb, String property, String variable) {
        String v = System.getProperty(property);
        if (v != null && !v.isBlank()) pb.environment().put(variable, v.trim());
    }

    static void parseBaselineLine(String line, Operation op, BaselineRun run) {
        if (line.startsWith("driver ")) {
            Map<String, String> kv = keyValues(line.substring("driver ".length(), line.indexOf(" reason=")));
            run.kind = kv.get("kind");
            run.reason = line.substring(line.indexOf(" reason=") + " reason=".length());
        } else if (line.startsWith("result ")) {
            Map<String, String> kv = keyValues(line.substring("result ".length()));
            if (op.baselineName.equals(kv.get("name"))) {
                run.meanNs = Double.parseDouble(kv.get("mean_ns"));
                run.sdNs = Double.parseDouble(kv.get("sd_ns"));
                run.rounds = kv.getOrDefault("rounds_ns", "");
                for (String v : run.rounds.split(",")) {
                    if (!v.isEmpty()) run.roundNs.add(Double.parseDouble(v));
                }
            }
        } else if (line.startsWith("calls ")) {
            Map<String, String> kv = keyValues(line.substring("calls ".length()));
            if (op.baselineName.equals(kv.remove("name"))) {
                for (Map.Entry<String, String> e : kv.entrySet()) run.calls.put(e.getKey(), Long.parseLong(e.getValue()));
            }
        } else if (line.startsWith("live ")) {
            Map<String, String> kv = keyValues(line.substring("live ".length()));
            for (Map.Entry<String, String> e : kv.entrySet()) {
                if (!"0".equals(e.getValue())) {
                    throw new IllegalStateException("C++ baseline left host driver objects alive: " + line);
                }
            }
        }
    }

    private static Map<String, String> keyValues(String text) {
        Map<String, String> m = new LinkedHashMap<>();
        for (String token : text.trim().split("\\s+")) {
            int eq = token.indexOf('=');
            if (eq > 0) m.put(token.substring(0, eq), token.substring(eq + 1));
        }
        return m;
    }

    private static void checkSameDriver(String javaKind, BaselineRun run) {
        if (!javaKind.equals(run.kind)) {
            throw new IllegalStateException("the C++ baseline runs the " + run.kind + " driver (" + run.reason
                    + ") but Java runs the " + javaKind + " driver; force one with -Dcuvmm.driver / CUVMM_DRIVER");
        }
    }

    // ---- report ----

    static String report(List<Row> rows, String kind, Driver driver, String machine, String started,
                         String loadBefore, String loadAfter, Settings s) {
        StringBuilder sb = new StringBuilder();
        sb.append("Driver: **").append(kind).append("** (").append(driver.reason()).append(")");
        if ("host".equals(kind)) sb.append(" -- the memfd/mmap host driver, not a GPU result");
        sb.append("\n\n");
        sb.append("Machine: ").append(machine).append("\n\n");
        sb.append("Date: ").append(started).append("; load average before ").append(loadBefore).append(", after ")
                .append(loadAfter).append("\n\n");
        sb.append("Schedule per side: ").append(s.warmup).append(" warm-up + ").append(s.iterations)
                .append(" measured rounds of ").append(s.timeMs).append(" ms; JMH ").append(s.forks)
                .append(" fork(s), mode avgt; C++ runs twice, before and after JMH. Ratio = median Java iteration / median C++ round"
                        + " (the mean ratio is given too; a burst of other work on the machine moves means, rarely medians)\n\n");
        sb.append("| operation | Java ns/op: median (mean ± 99.9% CI) | C++ ns/op: median (mean run 1 / run 2)"
                + " | overhead ns (medians) | ratio: median (mean) | target ≤ ").append(TARGET).append("x |\n");
        sb.append("|---|---:|---:|---:|---:|:---:|\n");
        for (Row r : rows) {
            sb.append(String.format(Locale.ROOT, "| %s | %.0f (%.0f ± %.0f) | %.0f (%.0f / %.0f) | %.0f | %.3fx (%.3fx) | %s |%n",
                    r.op.label, r.javaMedian(), r.javaNs, r.javaErrorNs, r.cppMedian(), r.cppNs1, r.cppNs2,
                    r.javaMedian() - r.cppMedian(), r.medianRatio(), r.ratio(),
                    r.medianRatio() <= TARGET ? "met" : "**missed**"));
        }
        sb.append("\nDriver calls per op, in driver-table order (Java counted with DriverCounters, C++ counted by the"
                + " baseline):\n\n");
        sb.append("| operation | calls per op | Java = C++ |\n|---|---|:---:|\n");
        for (Row r : rows) {
            sb.append("| ").append(r.op.label).append(" | ").append(describeCalls(r.javaCalls)).append(" | ")
                    .append(r.javaCalls.equals(r.cppCalls) ? "yes" : "**no**: C++ " + describeCalls(r.cppCalls))
                    .append(" |\n");
        }
        return sb.toString();
    }

    private static String join(List<Double> values) {
        StringBuilder sb = new StringBuilder();
        for (double v : values) sb.append(sb.length() > 0 ? "," : "").append(String.format(Locale.ROOT, "%.1f", v));
        return sb.toString();
    }

    static double median(List<Double> values) {
        if (values.isEmpty()) return Double.NaN;
        List<Double> sorted = new ArrayList<>(values);
        sorted.sort(null);
        int n = sorted.size();
        return n % 2 == 1 ? sorted.get(n / 2) : (sorted.get(n / 2 - 1) + sorted.get(n / 2)) / 2;
    }

    private static String describeCalls(Map<String, Long> calls) {
        StringBuilder sb = new StringBuilder();
        long total = 0;
        for (Map.Entry<String, Long> e : calls.entrySet()) {
            if (sb.length() > 0) sb.append(", ");
            sb.append(e.getKey());
            if (e.getValue() != 1) sb.append(" ×").append(e.getValue());
            total += e.getValue();
        }
        return total + ": " + sb;
    }

    static String machine() {
        String model = "unknown CPU";
        int processors = 0;
        try {
            for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"), StandardCharsets.UTF_8)) {
                if (line.startsWith("model name") && "unknown CPU".equals(model)) {
                    model = line.substring(line.indexOf(':') + 1).trim();
                } else if (line.startsWith("processor")) {
                    processors++;
                }
            }
        } catch (IOException | UncheckedIOException e) {
            // Not Linux, or /proc hidden: say so rather than guess.
            model = "unknown CPU (/proc/cpuinfo unreadable: " + e.getMessage() + ")";
        }
        return model + ", " + processors + " logical CPUs in /proc/cpuinfo (" + Runtime.getRuntime().availableProcessors()
                + " available to the JVM), " + System.getProperty("os.name") + " " + System.getProperty("os.version")
                + " " + System.getProperty("os.arch") + ", " + System.getProperty("java.vm.name") + " "
                + System.getProperty("java.runtime.version");
    }

    static String loadAverage() {
        try {
            String[] f = Files.readString(Path.of("/proc/loadavg"), StandardCharsets.US_ASCII).trim().split("\\s+");
            return f[0] + " " + f[1] + " " + f[2];
        } catch (IOException | RuntimeException e) {
            return "unknown";
        }
    }

    static Settings parse(String[] args) {
        Settings s = new Settings();
        s.out = defaultOut();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--warmup": s.warmup = (int) number(args, ++i, a, 0); break;
                case "--iterations": s.iterations = (int) number(args, ++i, a, 1); break;
                case "--time-ms": s.timeMs = number(args, ++i, a, 1); break;
                case "--forks": s.forks = (int) number(args, ++i, a, 1); break;
                case "--out": s.out = Path.of(value(args, ++i, a)); break;
                case "--quiet": s.quiet = true; break;
                case "--only": {
                    s.operations.clear();
                    for (String k : value(args, ++i, a).split(",")) {
                        Operation found = null;
                        for (Operation op : Operation.values()) if (op.key.equals(k.trim())) found = op;
                        if (found == null) {
                            throw new IllegalArgumentException("--only: " + k + " (expected: alloc2, alloc64, grow, move)");
                        }
                        s.operations.add(found);
                    }
                    break;
                }
                case "--help": case "-h":
                    System.out.println("usage: RatioReport [--warmup N] [--iterations N] [--time-ms N] [--forks N] "
                            + "[--only alloc2,alloc64,grow,move] [--out FILE] [--quiet]");
                    System.exit(0);
                    break;
                default:
                    throw new IllegalArgumentException("argument: " + a + " (expected: --warmup, --iterations, "
                            + "--time-ms, --forks, --only, --out, --quiet or --help)");
            }
        }
        return s;
    }

    private static Path defaultOut() {
        try {
            Path code = Path.of(RatioReport.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            return code.getParent().resolve("ratio-report.md");
        } catch (Exception e) {
            return null;
        }
    }

    private static String value(String[] args, int i, String name) {
        if (i >= args.length) throw new IllegalArgumentException(name + ": missing value");
        return args[i];
    }

    private static long number(String[] args, int i, String name, long min) {
        String v = value(args, i, name);
        long n;
        try {
            n = Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + ": " + v + " (expected: a whole number >= " + min + ")", e);
        }
        if (n < min) throw new IllegalArgumentException(name + ": " + v + " (expected: a whole number >= " + min + ")");
        return n;
    }
}
