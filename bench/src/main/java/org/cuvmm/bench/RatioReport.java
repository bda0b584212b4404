package org.cuvmm.bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.BenchmarkResult;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.RunnerException;

/**
 * Runs every benchmark in JMH and its C++ baseline in one invocation and prints the
 * Java / C++ ratio of each (target: at most {@value #TARGET}x, brief section 9).
 *
 * <p>For each operation: the driver calls one Java op makes are counted (outside JMH, with
 * {@link DriverCounters}) and compared with the calls the baseline reports for one op; then
 * {@code --forks} + 1 runs of the C++ baseline alternate with {@code --forks} JMH runs of the
 * Java benchmark (one forked JVM each): C++, Java, C++, Java, ..., C++. Interleaving keeps
 * both sides close in time on a shared machine, and several processes per side average out
 * the address-space layout of one process (on the host driver it moves the cost of the
 * same mmap calls by up to about 10% from one process to the next). Every process uses the
 * same schedule: {@code --warmup} rounds then {@code --iterations} measured rounds of
 * {@code --time-ms} each, a round's value being its ns/op. The headline ratio is the median
 * of all Java iterations over the median of all C++ rounds; the ratio of the means is
 * printed beside it. Medians, because a burst of someone else's work inflates a few rounds.
 *
 * <pre>
 * java -cp "bench/target/cuvmm-bench.jar:bench/target/lib/*" org.cuvmm.bench.RatioReport [options]
 *   --warmup N       warm-up rounds per process (default 2)
 *   --iterations N   measured rounds per process (default 3)
 *   --time-ms N      length of one round in ms (default 1000)
 *   --forks N        JMH forks per operation, each between two baseline runs (default 3)
 *   --only a,b       operations to run: alloc2, alloc64, grow, move (default all)
 *   --out FILE       also write the report (markdown) there (default bench/target/ratio-report.md)
 *   --quiet          no JMH progress output
 *   --model          also time the C++ baseline's model_* ops (the same work through cuvmm's
 *                    C++ object model), one run per JMH fork, and show where the overhead goes
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
    static final class Settings extends ReportOptions {
        int forks = 3;
        List<Operation> operations = new ArrayList<>(Arrays.asList(Operation.values()));
        boolean quiet;
        boolean model;

        Settings() {
            super(2, 3, 1000, defaultOut());
        }

        @Override
        protected int option(String[] args, int i) {
            String a = args[i];
            switch (a) {
                case "--forks" -> forks = (int) CommandLine.number(args, ++i, a, 1);
                case "--quiet" -> quiet = true;
                case "--model" -> model = true;
                case "--only" -> {
                    List<String> known = new ArrayList<>();
                    for (Operation op : Operation.values()) known.add(op.key);
                    operations.clear();
                    for (String k : keys(args, ++i, a, known)) operations.add(Operation.values()[known.indexOf(k)]);
                }
                default -> i = -1;
            }
            return i;
        }

        @Override
        protected String expected() {
            return "--warmup, --iterations, --time-ms, --forks, --only, --out, --quiet, --model or --help";
        }
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

    /** One row of the report: every measured round of every process, per side. */
    static final class Row {
        Operation op;
        Map<String, Long> javaCalls;
        Map<String, Long> cppCalls;
        final List<List<Double>> java = new ArrayList<>();  // per JMH fork: its measured iterations (ns/op)
        final List<List<Double>> cpp = new ArrayList<>();   // per baseline run: its measured rounds (ns/op)
        final List<List<Double>> model = new ArrayList<>(); // --model: per object-model run

        /** The headline: medians resist the bursts of other work on a shared machine. */
        double ratio() { return median(flat(java)) / median(flat(cpp)); }
        double meanRatio() { return mean(flat(java)) / mean(flat(cpp)); }
    }

    private RatioReport() {}

    /** What {@code --help} prints (bench/run passes its arguments here). */
    static final String USAGE = "usage: bench/run [--warmup N] [--iterations N] [--time-ms N] [--forks N] "
            + "[--only alloc2,alloc64,grow,move] [--out FILE] [--quiet] [--model] [--help]";

    public static void main(String[] args) throws Exception {
        Settings s = CommandLine.parseOrExit(args, RatioReport::parse, USAGE);
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
        System.out.println("schedule: " + (s.forks + 1) + " C++ runs interleaved with " + s.forks + " JMH forks per"
                + " operation, each " + s.warmup + " warm-up + " + s.iterations + " measured rounds of " + s.timeMs + " ms");

        List<Row> rows = new ArrayList<>();
        for (Operation op : s.operations) {
            System.out.println();
            System.out.println("=== " + op.label + " ===");
            Row row = new Row();
            row.op = op;
            row.javaCalls = javaCallsPerOp(op);
            // C++, [model,] Java, C++, [model,] Java, ..., C++: every side samples several
            // processes (each has its own address-space layout, which moves the host driver's
            // mmap costs by up to ~10%), interleaved in time.
            for (int run = 0; run <= s.forks; run++) {
                BaselineRun cpp = runBaseline(baseline, op.baselineName, s);
                checkSameDriver(kind, cpp);
                if (row.cppCalls == null) row.cppCalls = cpp.calls;
                row.cpp.add(cpp.roundNs);
                System.out.printf(Locale.ROOT, "C++ run %d: %.1f ns/op (rounds %s)%n", run + 1, cpp.meanNs, cpp.rounds);
                if (run == s.forks) break;
                if (s.model) {
                    BaselineRun model = runBaseline(baseline, "model_" + op.baselineName, s);
                    if (!model.calls.equals(cpp.calls)) {
                        throw new IllegalStateException(op.label + ": the object-model op makes other calls than the raw"
                                + " one: " + model.calls + " vs " + cpp.calls);
                    }
                    row.model.add(model.roundNs);
                    System.out.printf(Locale.ROOT, "C++ via the object model, run %d: %.1f ns/op (rounds %s)%n", run + 1,
                            model.meanNs, model.rounds);
                }
                RunResult jmh = runJmh(op, s, kind);
                List<Double> iterations = new ArrayList<>();
                for (BenchmarkResult br : jmh.getBenchmarkResults()) {
                    for (IterationResult ir : br.getIterationResults()) iterations.add(ir.getPrimaryResult().getScore());
                }
                row.java.add(iterations);
                System.out.printf(Locale.ROOT, "Java (JMH) fork %d: %.1f ns/op (iterations %s)%n", run + 1,
                        jmh.getPrimaryResult().getScore(), join(iterations));
            }
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

    static RunResult runJmh(Operation op, Settings s, String kind) throws RunnerException, IOException, InterruptedException {
        return ReportSupport.runJmh(op.benchmarkClass, op.method, op.param, op.paramValue, Mode.AverageTime,
                TimeUnit.NANOSECONDS, s, s.quiet, kind);
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

    static BaselineRun runBaseline(Path binary, String name, Settings s) throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(binary.toString(), "--only", name,
                "--warmup-rounds", Integer.toString(s.warmup), "--rounds", Integer.toString(s.iterations),
                "--round-ms", Long.toString(s.timeMs));
        // The same driver settings this JVM resolved (system property, else environment).
        BaselineEnvironment.passDriverSettings(pb);
        pb.redirectErrorStream(true);
        // Hold JMH's machine-wide lock while the baseline runs, so that no other JMH run
        // (another benchmark on a shared machine) overlaps it. Released before JMH runs.
        try (BenchLock lock = new BenchLock()) {
            lock.acquire();
            return runBaselineProcess(pb, name);
        }
    }

    private static BaselineRun runBaselineProcess(ProcessBuilder pb, String name) throws IOException, InterruptedException {
        Process process = pb.start();
        BaselineRun run = new BaselineRun();
        StringBuilder all = new StringBuilder();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                all.append(line).append('\n');
                parseBaselineLine(line, name, run);
            }
        }
        int rc = process.waitFor();
        if (rc != 0 || Double.isNaN(run.meanNs) || run.kind == null) {
            throw new IllegalStateException("C++ baseline for " + name + " failed (exit " + rc + "):\n" + all);
        }
        return run;
    }

    static void parseBaselineLine(String line, String name, BaselineRun run) {
        if (line.startsWith("driver ")) {
            Map<String, String> kv = keyValues(line.substring("driver ".length(), line.indexOf(" reason=")));
            run.kind = kv.get("kind");
            run.reason = line.substring(line.indexOf(" reason=") + " reason=".length());
        } else if (line.startsWith("result ")) {
            Map<String, String> kv = keyValues(line.substring("result ".length()));
            if (name.equals(kv.get("name"))) {
                run.meanNs = Double.parseDouble(kv.get("mean_ns"));
                run.sdNs = Double.parseDouble(kv.get("sd_ns"));
                run.rounds = kv.getOrDefault("rounds_ns", "");
                for (String v : run.rounds.split(",")) {
                    if (!v.isEmpty()) run.roundNs.add(Double.parseDouble(v));
                }
            }
        } else if (line.startsWith("calls ")) {
            Map<String, String> kv = keyValues(line.substring("calls ".length()));
            if (name.equals(kv.remove("name"))) {
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

    /**
     * The lock file JMH uses to keep two JMH runs off one machine ({@code java.io.tmpdir}/jmh.lock).
     * Waits (polling once a second) while another process holds it; owns the channel and
     * the lock until {@link #close()}.
     */
    public static final class BenchLock implements AutoCloseable {
        private final FileChannel channel;
        private FileLock lock;

        public BenchLock() throws IOException {
            Path file = Path.of(System.getProperty("java.io.tmpdir"), "jmh.lock");
            channel = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
        }

        public void acquire() throws IOException, InterruptedException {
            boolean said = false;
            while ((lock = channel.tryLock()) == null) {
                if (!said) {
                    System.out.println("waiting for another benchmark to finish (it holds the JMH lock "
                            + System.getProperty("java.io.tmpdir") + "/jmh.lock)...");
                    said = true;
                }
                Thread.sleep(1000);
            }
        }

        /** Waits until no one holds the lock, then lets it go at once (JMH takes it itself). */
        public void waitUntilFree() throws IOException, InterruptedException {
            try {
                acquire();
            } finally {
                close();
            }
        }

        @Override
        public void close() throws IOException {
            if (lock != null) lock.release();
            lock = null;
            channel.close();
        }
    }

    // ---- report ----

    static String report(List<Row> rows, String kind, Driver driver, String machine, String started,
                         String loadBefore, String loadAfter, Settings s) {
        StringBuilder sb = new StringBuilder();
        sb.append("Driver: **").append(kind).append("** (").append(driver.reason()).append(")");
        if ("host".equals(kind)) sb.append(" -- the memfd/mmap host driver, not a GPU result");
        else if (driver.isHostLibrary()) sb.append(" -- cuda driver API over the host library (no GPU), not a GPU result");
        sb.append("\n\n");
        sb.append("Machine: ").append(machine).append("\n\n");
        sb.append("Date: ").append(started).append("; load average before ").append(loadBefore).append(", after ")
                .append(loadAfter).append("\n\n");
        sb.append("Schedule: per operation, ").append(s.forks + 1).append(" C++ baseline runs interleaved with ")
                .append(s.forks).append(" JMH forks").append(s.model ? " (and " + s.forks + " object-model runs)" : "")
                .append("; each process ").append(s.warmup).append(" warm-up + ").append(s.iterations)
                .append(" measured rounds of ").append(s.timeMs).append(" ms (JMH: mode avgt, 1 thread). ")
                .append("ns/op = median of all measured rounds of that side (mean in brackets); per-process means show the"
                        + " spread between processes. Ratio = Java median / C++ median (ratio of means in brackets).\n\n");
        sb.append("| operation | Java ns/op | C++ ns/op | Java per-process means | C++ per-process means"
                + " | overhead ns | ratio | target ≤ ").append(TARGET).append("x |\n");
        sb.append("|---|---:|---:|---|---|---:|---:|:---:|\n");
        for (Row r : rows) {
            double j = median(flat(r.java));
            double c = median(flat(r.cpp));
            sb.append(String.format(Locale.ROOT, "| %s | %.0f (%.0f) | %.0f (%.0f) | %s | %s | %.0f | %.3fx (%.3fx) | %s |%n",
                    r.op.label, j, mean(flat(r.java)), c, mean(flat(r.cpp)), processMeans(r.java), processMeans(r.cpp),
                    j - c, r.ratio(), r.meanRatio(), r.ratio() <= TARGET ? "met" : "**missed**"));
        }
        if (s.model) {
            sb.append("\nWhere the overhead goes (--model: the same op in C++ through cuvmm's object model, vmm.hpp;"
                    + " medians, ns/op):\n\n");
            sb.append("| operation | C++ raw table calls | C++ object model | Java | object model − raw | Java − object model |\n");
            sb.append("|---|---:|---:|---:|---:|---:|\n");
            for (Row r : rows) {
                double c = median(flat(r.cpp));
                double m = median(flat(r.model));
                double j = median(flat(r.java));
                sb.append(String.format(Locale.ROOT, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f |%n", r.op.label, c, m, j,
                        m - c, j - m));
            }
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

    static List<Double> flat(List<List<Double>> runs) {
        List<Double> all = new ArrayList<>();
        for (List<Double> r : runs) all.addAll(r);
        return all;
    }

    static double mean(List<Double> values) {
        double sum = 0;
        for (double v : values) sum += v;
        return values.isEmpty() ? Double.NaN : sum / values.size();
    }

    private static String processMeans(List<List<Double>> runs) {
        StringBuilder sb = new StringBuilder();
        for (List<Double> r : runs) sb.append(sb.length() > 0 ? ", " : "").append(String.format(Locale.ROOT, "%.0f", mean(r)));
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
        s.read(args);
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
}
