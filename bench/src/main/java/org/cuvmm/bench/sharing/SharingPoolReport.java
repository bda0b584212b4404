package org.cuvmm.bench.sharing;

import static org.cuvmm.bench.ReportSupport.iterations;
import static org.cuvmm.bench.ReportSupport.loadAverage;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.bench.BaselineEnvironment;
import org.cuvmm.bench.BenchChecks;
import org.cuvmm.bench.CommandLine;
import org.cuvmm.bench.ReportOptions;
import org.cuvmm.bench.ReportSupport;
import org.cuvmm.bench.pool.ArenaBenchmark;
import org.cuvmm.bench.pool.ArenaWorkloads;
import org.cuvmm.bench.pool.PoolBenchmark;
import org.cuvmm.bench.pool.PoolThreadsBenchmark;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.util.Statistics;

/**
 * Runs the descriptor-transport and pool benchmarks in one invocation and prints markdown
 * tables (also written to {@code --out}, default {@code bench/target/sharing-pool-report.md}):
 *
 * <ol>
 * <li>transport (1 and 3 chunks): Java driver calls per round counted here; the C++ baseline
 *     ({@code cuvmm-transport-baseline}); the JMH benchmark; the baseline again. Ratio = median
 *     JMH iteration / median baseline round (both baseline runs pooled);</li>
 * <li>pool vs direct allocate+close at 2 and 64 MiB (JMH), and steady-state driver calls and
 *     minor page faults per op (counted here, not timed);</li>
 * <li>pool allocate+close with 1 and 2 threads on one pool (JMH throughput);</li>
 * <li>the arena workloads (a)-(c), pooled and direct (JMH + counts), and (d) a large one-off
 *     then {@code trim()} (one-shot, timed with System.nanoTime, median of 5).</li>
 * </ol>
 *
 * <p>Options: {@code --warmup N} (3) {@code --iterations N} (5) {@code --time-ms N} (1000)
 * {@code --only transport,pool,threads,arena,trim} {@code --out FILE} {@code --quiet}.
 * Exit status 3 when the Java and C++ transport rounds made different driver calls.
 */
public final class SharingPoolReport {
    private SharingPoolReport() {}

    static final class Settings extends ReportOptions.WithParts {
        Settings() {
            super(3, 5, 1000, Path.of("bench/target/sharing-pool-report.md"),
                    List.of("transport", "pool", "threads", "arena", "trim"));
        }
    }

    private static final StringBuilder REPORT = new StringBuilder();
    private static boolean callsMismatch;

    private static void out(String line) {
        System.out.println(line);
        REPORT.append(line).append('\n');
    }

    /** What {@code --help} prints (bench/run-sharing-pool passes its arguments here). */
    static final String USAGE = "usage: bench/run-sharing-pool [--warmup N (3)] [--iterations N (5)] [--time-ms N (1000)] "
            + "[--only transport,pool,threads,arena,trim] [--out FILE (bench/target/sharing-pool-report.md)] [--quiet] "
            + "[--help]";

    public static void main(String[] args) throws Exception {
        Settings s = CommandLine.parseOrExit(args, SharingPoolReport::parse, USAGE);
        Driver driver = BenchChecks.expectedDriver();
        String kind = driver.kind().name().toLowerCase(Locale.ROOT);
        out("# cuvmm sharing + pool benchmark report");
        out("");
        for (String line : ReportSupport.headerLines(driver)) out(line);
        out("- JMH: 1 fork, " + s.warmup + " x " + s.timeMs + " ms warm-up, " + s.iterations + " x " + s.timeMs
                + " ms measurement");
        out("");
        if (s.only.contains("transport")) transport(s, kind);
        if (s.only.contains("pool")) pool(s, kind);
        if (s.only.contains("threads")) threads(s, kind);
        if (s.only.contains("arena")) arena(s, kind);
        if (s.only.contains("trim")) trim();
        out("- load average at end: " + loadAverage());
        ReportSupport.write(s.out, REPORT);
        if (callsMismatch) System.exit(3);
    }

    // ---------------------------------------------------------------- transport

    static void transport(Settings s, String kind) throws Exception {
        Path binary = binary("cuvmm-transport-baseline");
        List<String[]> rows = new ArrayList<>();
        List<String> callRows = new ArrayList<>();
        for (int chunks : new int[] {1, 3}) {
            Map<String, Long> javaCalls;
            try (TransportFixture f = new TransportFixture(chunks)) {
                javaCalls = countCalls(() -> {
                    try {
                        f.round();
                    } catch (IOException e) {
                        throw new IllegalStateException(e);
                    }
                }, 4, 16).calls;
            }
            BenchChecks.nothingLeft();
            Baseline c1 = runBaseline(binary, chunks, s);
            RunResult jmh = runJmh(TransportBenchmark.class, "roundTrip", "chunks", Integer.toString(chunks),
                    Mode.AverageTime, TimeUnit.NANOSECONDS, s, kind);
            Baseline c2 = runBaseline(binary, chunks, s);
            if (!c1.kind.equals(kind)) throw new IllegalStateException("baseline ran the " + c1.kind + " driver, Java " + kind);
            List<Double> java = iterations(jmh);
            List<Double> cpp = new ArrayList<>(c1.rounds);
            cpp.addAll(c2.rounds);
            boolean same = javaCalls.equals(c1.calls);
            if (!same) callsMismatch = true;
            rows.add(new String[] {chunks + " x 2 MiB", f1(median(java) / 1000), f1(mean(java) / 1000),
                    f1(median(cpp) / 1000), f1(mean(cpp) / 1000), f2(median(java) / median(cpp)),
                    f2(mean(java) / mean(cpp)), same ? "yes" : "**NO**"});
            callRows.add("| " + chunks + " | " + fmtCalls(javaCalls) + " | " + fmtCalls(c1.calls) + " |");
            System.out.println("java rounds us: " + join(java) + " ; c++ rounds us: " + join(cpp));
        }
        out("## Descriptor transport round trip (target: Java / C++ <= 1.5x)");
        out("");
        out("| buffer | Java median µs | Java mean µs | C++ median µs | C++ mean µs | ratio (medians) | ratio (means) | same driver calls |");
        out("|---|---:|---:|---:|---:|---:|---:|---|");
        for (String[] r : rows) out("| " + String.join(" | ", r) + " |");
        out("");
        out("Driver calls per round (both sides of the socket together):");
        out("");
        out("| chunks | Java (counted by cuvmm) | C++ baseline (counted by itself) |");
        out("|---|---|---|");
        callRows.forEach(SharingPoolReport::out);
        out("");
    }

    static final class Baseline {
        String kind = "?";
        Map<String, Long> calls = new TreeMap<>();
        List<Double> rounds = new ArrayList<>();
        String live = "";
    }

    static Baseline runBaseline(Path binary, int chunks, Settings s) throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(binary.toString(), "--chunks", Integer.toString(chunks),
                "--warmup-rounds", Integer.toString(s.warmup), "--rounds", Integer.toString(s.iterations),
                "--round-ms", Long.toString(s.timeMs));
        BaselineEnvironment.passDriverSettings(pb);
        pb.redirectErrorStream(true);
        Process p = pb.start();
        Baseline b = new Baseline();
        StringBuilder all = new StringBuilder();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                all.append(line).append('\n');
                if (line.startsWith("driver ")) {
                    b.kind = line.replaceAll("^driver kind=(\\S+).*", "$1");
                } else if (line.startsWith("calls ")) {
                    for (String kv : line.split(" ")) {
                        if (kv.startsWith("cu") && kv.contains("=")) {
                            b.calls.put(kv.substring(0, kv.indexOf('=')), Long.parseLong(kv.substring(kv.indexOf('=') + 1)));
                        }
                    }
                } else if (line.startsWith("result ")) {
                    String v = line.substring(line.indexOf("rounds_ns=") + "rounds_ns=".length());
                    for (String x : v.split(",")) b.rounds.add(Double.parseDouble(x));
                } else if (line.startsWith("live ")) {
                    b.live = line;
                }
            }
        }
        int rc = p.waitFor();
        if (rc != 0 || b.rounds.isEmpty()) throw new IllegalStateException("transport baseline failed (exit " + rc + "):\n" + all);
        if (!b.live.isEmpty() && !b.live.equals("live allocations=0 reservations=0 mappings=0 memfds=0")) {
            throw new IllegalStateException("transport baseline left objects alive: " + b.live);
        }
        return b;
    }

    static Path binary(String name) throws Exception {
        Path code = Path.of(SharingPoolReport.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        Path p = code.getParent().resolve(name);
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException(p + " is missing (build it: mvn -pl bench -am package, or bench/run-sharing-pool)");
        }
        return p;
    }

    // ---------------------------------------------------------------- pool

    static void pool(Settings s, String kind) throws Exception {
        List<String> rows = new ArrayList<>();
        List<String> countRows = new ArrayList<>();
        for (int mib : new int[] {2, 64}) {
            List<Double> pooled = iterations(runJmh(PoolBenchmark.class, "pool", "sizeMiB", Integer.toString(mib),
                    Mode.AverageTime, TimeUnit.NANOSECONDS, s, kind));
            List<Double> direct = iterations(runJmh(PoolBenchmark.class, "direct", "sizeMiB", Integer.toString(mib),
                    Mode.AverageTime, TimeUnit.NANOSECONDS, s, kind));
            rows.add("| " + mib + " MiB | " + f1(median(pooled)) + " | " + f1(median(direct)) + " | "
                    + f3(median(pooled) / median(direct)) + " | " + f1(median(direct) / median(pooled)) + "x |");
            long size = (long) mib << 20;
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).build()) {
                Count cp = countCalls(() -> p.allocate(size).close(), 200, 2000);
                Count cd = countCalls(() -> r.allocate(size).close(), 50, 200);
                countRows.add("| pool " + mib + " MiB | " + f3(cp.total) + " | " + f3(cp.minflt) + " | " + fmtCalls(cp.calls) + " |");
                countRows.add("| direct " + mib + " MiB | " + f3(cd.total) + " | " + f3(cd.minflt) + " | " + fmtCalls(cd.calls) + " |");
            }
            BenchChecks.nothingLeft();
        }
        out("## Pool allocate+close vs the resource's allocate+close");
        out("");
        out("| size | pool ns/op (median) | direct ns/op (median) | pool / direct | speed-up |");
        out("|---|---:|---:|---:|---:|");
        rows.forEach(SharingPoolReport::out);
        out("");
        // The brief's "median allocate+release under 1 µs" is about single operations: sample them.
        RunResult sampled = runJmh(PoolBenchmark.class, "pool", "sizeMiB", "2", Mode.SampleTime,
                TimeUnit.NANOSECONDS, s, kind);
        Statistics st = sampled.getPrimaryResult().getStatistics();
        out("Single pool allocate+close of 2 MiB, JMH sample mode (each sampled op timed with System.nanoTime, "
                + "whose own cost and granularity are included; " + st.getN() + " samples):");
        out("");
        out("| p50 ns | p90 ns | p99 ns | p99.9 ns | max ns |");
        out("|---:|---:|---:|---:|---:|");
        out("| " + f1(st.getPercentile(50)) + " | " + f1(st.getPercentile(90)) + " | " + f1(st.getPercentile(99))
                + " | " + f1(st.getPercentile(99.9)) + " | " + f1(st.getMax()) + " |");
        out("");
        out("Steady state, counted outside JMH (not timed): per op, after warm-up ops; page faults are this thread's "
                + "minflt from /proc/thread-self/stat.");
        out("");
        out("| op | driver calls / op | minor faults / op | calls (total over the counted ops / ops) |");
        out("|---|---:|---:|---|");
        countRows.forEach(SharingPoolReport::out);
        out("");
    }

    static void threads(Settings s, String kind) throws Exception {
        List<Double> one = iterations(runJmh(PoolThreadsBenchmark.class, "threads1", null, null, Mode.Throughput,
                TimeUnit.MICROSECONDS, s, kind));
        List<Double> two = iterations(runJmh(PoolThreadsBenchmark.class, "threads2", null, null, Mode.Throughput,
                TimeUnit.MICROSECONDS, s, kind));
        List<Double> own = iterations(runJmh(PoolThreadsBenchmark.class, "threads2OwnPools", null, null, Mode.Throughput,
                TimeUnit.MICROSECONDS, s, kind));
        out("## Pool allocate+close (2 MiB), one shared pool, 1 vs 2 threads (target: 2 threads >= 1.6x)");
        out("");
        out("| threads | ops/µs (median, all threads) | ops/µs (mean) | iterations |");
        out("|---|---:|---:|---|");
        out("| 1 | " + f2(median(one)) + " | " + f2(mean(one)) + " | " + join2(one) + " |");
        out("| 2 | " + f2(median(two)) + " | " + f2(mean(two)) + " | " + join2(two) + " |");
        out("| 2, one pool each (diagnostic) | " + f2(median(own)) + " | " + f2(mean(own)) + " | " + join2(own) + " |");
        out("");
        out("2-thread / 1-thread throughput: **" + f2(median(two) / median(one)) + "x** (medians), "
                + f2(mean(two) / mean(one)) + "x (means). Diagnostic, 2 threads with a pool each / 1 thread: "
                + f2(median(own) / median(one)) + "x (what the machine allows with no pool state shared).");
        out("");
    }

    static void arena(Settings s, String kind) throws Exception {
        String[][] workloads = {
            {"freedBeforeNextRound", "(a) 4 outputs (2+8+8+32 MiB) freed before the next round"},
            {"keptAlive", "(b) ring of 8 live buffers (4/8/16 MiB), replace the oldest"},
            {"alternatingSizes", "(c) alternating 2, 64, 6, 24 MiB allocate+close"},
        };
        List<String> rows = new ArrayList<>();
        List<String> countRows = new ArrayList<>();
        for (String[] w : workloads) {
            List<Double> pooled = iterations(runJmh(ArenaBenchmark.class, w[0], "source", "pool", Mode.AverageTime,
                    TimeUnit.NANOSECONDS, s, kind));
            List<Double> direct = iterations(runJmh(ArenaBenchmark.class, w[0], "source", "direct", Mode.AverageTime,
                    TimeUnit.NANOSECONDS, s, kind));
            rows.add("| " + w[1] + " | " + f1(median(pooled)) + " | " + f1(median(direct)) + " | "
                    + f1(median(direct) / median(pooled)) + "x |");
            for (boolean pooledSide : new boolean[] {true, false}) {
                try (ArenaWorkloads a = new ArenaWorkloads(pooledSide)) {
                    Runnable op = switch (w[0]) {
                        case "freedBeforeNextRound" -> a::freedBeforeNextRound;
                        case "keptAlive" -> a::keptAlive;
                        default -> a::alternatingSizes;
                    };
                    Count c = countCalls(op, 64, pooledSide ? 1000 : 200);
                    countRows.add("| " + w[0] + " | " + (pooledSide ? "pool" : "direct") + " | " + f3(c.total) + " | "
                            + f3(c.minflt) + " |");
                }
                BenchChecks.nothingLeft();
            }
        }
        out("## Arena workloads (ns per round)");
        out("");
        out("| workload | pool ns/round (median) | direct ns/round (median) | speed-up |");
        out("|---|---:|---:|---:|");
        rows.forEach(SharingPoolReport::out);
        out("");
        out("| workload | source | driver calls / round | minor faults / round |");
        out("|---|---|---:|---:|");
        countRows.forEach(SharingPoolReport::out);
        out("");
    }

    /** (d) a large one-off allocation on a warm 2 MiB pool, then trim(). One-shot: median of 5 repetitions. */
    static void trim() {
        final long large = 512L << 20;
        final long small = 2L << 20;
        final int reps = 5;
        long[] tLarge = new long[reps], tTrim = new long[reps], tNextSmall = new long[reps], tNextLarge = new long[reps],
                tWarmSmall = new long[reps];
        long released = 0, retainedBefore = 0, retainedAfter = 0;
        Count trimCalls = null, nextSmallCalls = null;
        DriverCounters dc = Driver.get().counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).build()) {
            for (int rep = 0; rep < reps; rep++) {
                for (int i = 0; i < 200; i++) p.allocate(small).close();
                long t0 = System.nanoTime();
                p.allocate(small).close();
                tWarmSmall[rep] = System.nanoTime() - t0;
                t0 = System.nanoTime();
                VirtualMemoryBuffer big = p.allocate(large);
                tLarge[rep] = System.nanoTime() - t0;
                big.close();
                retainedBefore = p.stats(PoolLifetime.LOCAL).retainedBytes();
                dc.resetCalls();
                long f0 = minflt();
                t0 = System.nanoTime();
                released = p.trim();
                tTrim[rep] = System.nanoTime() - t0;
                trimCalls = new Count(dc.calls(), 1, minflt() - f0);
                retainedAfter = p.stats(PoolLifetime.LOCAL).retainedBytes();
                dc.resetCalls();
                f0 = minflt();
                t0 = System.nanoTime();
                VirtualMemoryBuffer next = p.allocate(small);
                tNextSmall[rep] = System.nanoTime() - t0;
                nextSmallCalls = new Count(dc.calls(), 1, minflt() - f0);
                next.close();
                t0 = System.nanoTime();
                VirtualMemoryBuffer nextBig = p.allocate(large);
                tNextLarge[rep] = System.nanoTime() - t0;
                nextBig.close();
                p.trim();
            }
        }
        BenchChecks.nothingLeft();
        out("## (d) Large one-off (512 MiB) on a warm 2 MiB pool, then trim() (one-shot, median of " + reps + ")");
        out("");
        out("| step | µs (median) | notes |");
        out("|---|---:|---|");
        out("| warm 2 MiB allocate+close (hit) | " + f1(medianL(tWarmSmall) / 1000.0) + " | single op incl. timer; JMH figure above is the real one |");
        out("| 512 MiB allocate (miss) | " + f1(medianL(tLarge) / 1000.0) + " | new memory from the driver |");
        out("| trim() | " + f1(medianL(tTrim) / 1000.0) + " | released " + (released >> 20) + " MiB (retained "
                + (retainedBefore >> 20) + " MiB before, " + (retainedAfter >> 20) + " MiB after); "
                + fmt(trimCalls.total) + " driver calls: " + fmtCalls(trimCalls.calls) + " |");
        out("| next 2 MiB allocate | " + f1(medianL(tNextSmall) / 1000.0) + " | a miss after trim: "
                + fmt(nextSmallCalls.total) + " driver calls (" + fmtCalls(nextSmallCalls.calls) + "), "
                + fmt(nextSmallCalls.minflt) + " minor faults |");
        out("| next 512 MiB allocate | " + f1(medianL(tNextLarge) / 1000.0) + " | a miss again |");
        out("");
    }

    // ---------------------------------------------------------------- counting

    public static final class Count {
        final Map<String, Long> calls; // total calls / ops, only non-zero, for exact (integral) per-op counts
        final double total;
        final double minflt;

        Count(Map<String, Long> raw, int ops, long faults) {
            Map<String, Long> m = new TreeMap<>();
            long sum = 0;
            for (Map.Entry<String, Long> e : raw.entrySet()) {
                if (e.getValue() != 0) {
                    m.put(e.getKey(), e.getValue() % ops == 0 ? e.getValue() / ops : -e.getValue());
                    sum += e.getValue();
                }
            }
            this.calls = m;
            this.total = (double) sum / ops;
            this.minflt = (double) faults / ops;
        }
    }

    /** Runs {@code warm} ops, resets cuvmm's call counters, runs {@code n} counted ops. */
    static Count countCalls(Runnable op, int warm, int n) {
        for (int i = 0; i < warm; i++) op.run();
        DriverCounters c = Driver.get().counters();
        c.resetCalls();
        long f0 = minflt();
        for (int i = 0; i < n; i++) op.run();
        long f1 = minflt();
        return new Count(c.calls(), n, f1 - f0);
    }

    /** Minor page faults of the calling thread (/proc/thread-self/stat, field 10). */
    static long minflt() {
        try {
            String stat = Files.readString(Path.of("/proc/thread-self/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(f[7]);
        } catch (IOException e) {
            return -1;
        }
    }

    // ---------------------------------------------------------------- JMH

    static RunResult runJmh(Class<?> cls, String method, String param, String value, Mode mode, TimeUnit unit,
                            Settings s, String kind) throws Exception {
        return ReportSupport.runJmh(cls, method, param, value, mode, unit, s, s.quiet, kind);
    }

    // ---------------------------------------------------------------- formatting, machine

    static double median(List<Double> v) {
        double[] a = v.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return a.length % 2 == 1 ? a[a.length / 2] : (a[a.length / 2 - 1] + a[a.length / 2]) / 2;
    }

    static double medianL(long[] v) {
        List<Double> l = new ArrayList<>();
        for (long x : v) l.add((double) x);
        return median(l);
    }

    static double mean(List<Double> v) {
        return v.stream().mapToDouble(Double::doubleValue).average().orElse(Double.NaN);
    }

    static String f1(double v) { return String.format(Locale.ROOT, "%.1f", v); }
    static String f2(double v) { return String.format(Locale.ROOT, "%.2f", v); }
    static String f3(double v) { return String.format(Locale.ROOT, "%.3f", v); }
    static String fmt(double v) { return v == Math.rint(v) ? Long.toString((long) v) : f3(v); }

    static String join(List<Double> v) {
        StringBuilder sb = new StringBuilder();
        for (double x : v) sb.append(sb.length() == 0 ? "" : ", ").append(f1(x / 1000));
        return sb.toString();
    }

    static String join2(List<Double> v) {
        StringBuilder sb = new StringBuilder();
        for (double x : v) sb.append(sb.length() == 0 ? "" : ", ").append(f2(x));
        return sb.toString();
    }

    static String fmtCalls(Map<String, Long> calls) {
        if (calls.isEmpty()) return "none";
        StringBuilder sb = new StringBuilder();
        for (Map.Entry<String, Long> e : new TreeMap<>(calls).entrySet()) {
            if (e.getValue() == 0) continue;
            sb.append(sb.length() == 0 ? "" : ", ").append(e.getKey()).append(' ')
                    .append(e.getValue() < 0 ? "(not integral: " + -e.getValue() + " total)" : Long.toString(e.getValue()));
        }
        return sb.length() == 0 ? "none" : sb.toString();
    }

    static Settings parse(String[] args) {
        Settings s = new Settings();
        s.read(args);
        return s;
    }
}
