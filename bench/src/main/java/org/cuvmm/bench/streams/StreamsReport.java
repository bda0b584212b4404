package org.cuvmm.bench.streams;

import static org.cuvmm.bench.ReportSupport.iterations;
import static org.cuvmm.bench.ReportSupport.loadAverage;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.bench.BaselineEnvironment;
import org.cuvmm.bench.BenchChecks;
import org.cuvmm.bench.CommandLine;
import org.cuvmm.bench.ReportOptions;
import org.cuvmm.bench.RatioReport;
import org.cuvmm.bench.ReportSupport;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.results.RunResult;

/**
 * The stream-copy report (issue 9 item 7, brief section 9), in one invocation:
 *
 * <ol>
 * <li>the C++ baseline ({@code cuvmm-streams-baseline}: plain {@code memcpy} loops and the
 *     driver-table loops {@code cuMemcpyHtoDAsync}/{@code DtoHAsync} + {@code cuStreamSynchronize});</li>
 * <li>the JMH benchmarks: {@link AsyncCopyBenchmark} (pinned, heap array, pageable; 64 KiB,
 *     2 MiB, 64 MiB; both directions) and {@link OverlapBenchmark} (one stream vs two);</li>
 * <li>the baseline again (its two runs pooled, so both sides see the machine before and after);</li>
 * <li>driver calls per Java op, counted here (not timed), and the GC check
 *     ({@link GcDuringCopy}, in child JVMs with Serial and G1).</li>
 * </ol>
 *
 * <p>Throughput is bytes / median ns per op (GB/s, 10^9 bytes). Ratios: Java / C++ memcpy
 * of the same bytes (brief target: at least 0.9 from pinned memory on the host driver),
 * Java / the same driver calls in C++, and the overlap: one stream's time / two streams' time
 * for the same two copies (2.0 = the two copies ran fully at once).
 *
 * <p>Options: {@code --warmup N} (1) {@code --iterations N} (3) {@code --time-ms N} (500)
 * {@code --only copy,overlap,gc} {@code --out FILE} {@code --quiet}.
 */
public final class StreamsReport {
    private StreamsReport() {}

    static final class Settings extends ReportOptions.WithParts {
        Settings() {
            super(1, 3, 500, Path.of("bench/target/streams-report.md"), List.of("copy", "overlap", "gc"));
        }
    }

    /** What {@code --help} prints (bench/run-streams passes its arguments here). */
    static final String USAGE = "usage: bench/run-streams [--warmup N (1)] [--iterations N (3)] [--time-ms N (500)] "
            + "[--only copy,overlap,gc] [--out FILE (bench/target/streams-report.md)] [--quiet] [--help]";

    static final long[] SIZES = {64L << 10, 2L << 20, 64L << 20};
    /** The batched op: {@code htodPinnedBatch32} at 2 MiB, i.e. 32 copies of 64 KiB and one synchronize. */
    static final String BATCH_OP = "htodPinnedBatch32/2097152";
    static final long BATCH_BYTES = 2L << 20;
    static final String[] COPY_OPS = {"htodPinned", "htodArray", "htodPageable", "dtohPinned", "dtohArray", "dtohPageable"};

    private static final StringBuilder REPORT = new StringBuilder();

    private static void out(String line) {
        System.out.println(line);
        REPORT.append(line).append('\n');
    }

    public static void main(String[] args) throws Exception {
        Settings s = CommandLine.parseOrExit(args, StreamsReport::parse, USAGE);
        Driver driver = BenchChecks.expectedDriver();
        String kind = driver.kind().name().toLowerCase(Locale.ROOT);
        out("# cuvmm stream-copy benchmark report");
        out("");
        for (String line : ReportSupport.headerLines(driver)) out(line);
        out("- schedule: C++ baseline, then each JMH benchmark (1 fork, " + s.warmup + " x " + s.timeMs
                + " ms warm-up, " + s.iterations + " x " + s.timeMs + " ms measured), then the C++ baseline again; "
                + "the baseline runs the same rounds");
        out("");
        boolean copy = s.only.contains("copy");
        boolean overlap = s.only.contains("overlap");
        Path binary = binary();
        Map<String, List<Double>> cpp = new TreeMap<>();
        if (copy || overlap) runBaseline(binary, s, kind, cpp);
        Map<String, List<Double>> java = new LinkedHashMap<>();
        if (copy) {
            for (String op : COPY_OPS) {
                for (long bytes : SIZES) {
                    java.put(op + "/" + bytes, iterations(runJmh(AsyncCopyBenchmark.class, op, bytes, s, kind)));
                }
            }
        }
        if (copy) java.put(BATCH_OP, iterations(runJmh(AsyncCopyBenchmark.class, "htodPinnedBatch32", BATCH_BYTES, s, kind)));
        if (overlap) {
            for (String op : new String[] {"oneStream", "twoStreams"}) {
                java.put(op, iterations(runJmh(OverlapBenchmark.class, op, 64L << 20, s, kind)));
            }
        }
        if (copy || overlap) runBaseline(binary, s, kind, cpp);
        if (copy) copyTables(java, cpp);
        if (overlap) overlapTable(java, cpp);
        if (copy || overlap) callCounts();
        if (s.only.contains("gc")) gc();
        out("- load average at end: " + loadAverage());
        ReportSupport.write(s.out, REPORT);
    }

    // ---------------------------------------------------------------- tables

    static String sizeLabel(long bytes) {
        return bytes >= (1L << 20) ? (bytes >> 20) + "MiB" : (bytes >> 10) + "KiB";
    }

    /** The C++ op a Java op is compared with, besides memcpy. */
    static String driverTwin(String op, long bytes) {
        String kind = switch (op) {
            case "htodPinned", "htodArray" -> "htod_pinned_"; // the array goes through pinned staging
            case "htodPageable" -> "htod_pageable_";
            case "dtohPinned" -> "dtoh_pinned_";
            default -> "dtoh_pageable_";                      // dtohArray (sync, staged), dtohPageable
        };
        return kind + sizeLabel(bytes);
    }

    static String describe(String op) {
        return switch (op) {
            case "htodPinned" -> "pinned → device, `copyFromAsync(PinnedHostBuffer)` + `synchronize()`";
            case "htodArray" -> "heap array → device, `copyFromAsync(byte[])` (pinned staging) + `synchronize()`";
            case "htodPageable" -> "pageable direct ByteBuffer → device, sync `copyFrom(long, ByteBuffer)`";
            case "dtohPinned" -> "device → pinned, `copyToAsync(PinnedHostBuffer)` + `synchronize()`";
            case "dtohArray" -> "device → heap array, sync `copyTo(long, byte[], ...)` (no async form)";
            default -> "device → pageable direct ByteBuffer, sync `copyTo(long, ByteBuffer)`";
        };
    }

    static void copyTables(Map<String, List<Double>> java, Map<String, List<Double>> cpp) {
        out("## Copy throughput, Java vs C++ (GB/s = 10^9 bytes/s, from median ns per op)");
        out("");
        out("C++ columns: `memcpy` of the same bytes between two pre-faulted host buffers (the physical limit on "
                + "the host driver), and the same driver calls in a loop (`cuMemcpy*Async` + `cuStreamSynchronize`, "
                + "pinned or pageable host memory as the Java side; the heap array's twin is the pinned loop, since "
                + "cuvmm stages it into pinned memory; the pageable loop for the array's device-to-host copy).");
        out("");
        out("The memcpy floor is the fastest of: one `memcpy` call between two malloc'd buffers, the same in 2 MiB "
                + "pieces (glibc's single large call uses non-temporal stores, slower here), and (host driver) a "
                + "`memcpy` from `cuMemHostAlloc` memory into a CPU mapping of the device allocation's own memfd: "
                + "the pages the driver's copy touches. All three are listed below the table.");
        out("");
        out("| op | size | Java GB/s | C++ memcpy GB/s | C++ driver loop GB/s | Java / memcpy | Java / driver loop | Java ns/op (iterations) |");
        out("|---|---|---:|---:|---:|---:|---:|---|");
        for (String op : COPY_OPS) {
            for (long bytes : SIZES) {
                List<Double> j = java.get(op + "/" + bytes);
                double mg = memcpyFloor(cpp, bytes);
                List<Double> d = cpp.get(driverTwin(op, bytes));
                double jg = bytes / median(j), dg = bytes / median(d);
                out("| " + describe(op) + " | " + sizeLabel(bytes) + " | " + f2(jg) + " | " + f2(mg) + " | " + f2(dg)
                        + " | " + f2(jg / mg) + "x | " + f2(jg / dg) + "x | " + joinNs(j) + " |");
            }
        }
        out("");
        out("Where Java's time goes, pinned memory (median ns per op): the C++ loop with only the copy and "
                + "`cuStreamSynchronize`; the C++ loop with every driver call the Java op makes (plus the one "
                + "`cuEventRecord` of cuvmm's stream-ordered lifetimes, the event the device buffer and the pinned "
                + "memory share, made in the copy's native call, and 2 `cuCtxGetCurrent`: the copy's and the "
                + "synchronize's); Java.");
        out("");
        out("| op | size | C++ copy + sync | C++ same calls as Java | Java | events' cost | Java − same calls |");
        out("|---|---|---:|---:|---:|---:|---:|");
        for (String op : new String[] {"htodPinned", "dtohPinned"}) {
            String twin = op.equals("htodPinned") ? "htod_pinned_" : "dtoh_pinned_";
            String recorded = op.equals("htodPinned") ? "htod_pinned_recorded_" : "dtoh_pinned_recorded_";
            for (long bytes : SIZES) {
                double plain = median(cpp.get(twin + sizeLabel(bytes)));
                double same = median(cpp.get(recorded + sizeLabel(bytes)));
                double j = median(java.get(op + "/" + bytes));
                out("| `" + op + "` | " + sizeLabel(bytes) + " | " + f0(plain) + " | " + f0(same) + " | " + f0(j) + " | "
                        + f0(same - plain) + " | " + f0(j - same) + " |");
            }
        }
        out("");
        batchTable(java, cpp);
        out("C++ rounds (ns/op, both baseline runs):");
        out("");
        out("| C++ op | GB/s (median) | rounds ns/op |");
        out("|---|---:|---|");
        for (Map.Entry<String, List<Double>> e : cpp.entrySet()) {
            if (e.getKey().startsWith("overlap") || e.getKey().endsWith("threads")) continue;
            long bytes = bytesOf(e.getKey());
            out("| `" + e.getKey() + "` | " + f2(bytes / median(e.getValue())) + " | " + joinNs(e.getValue()) + " |");
        }
        out("");
    }

    /**
     * Batched small copies: 32 copies of 64 KiB from pinned memory then one synchronize, 2 MiB
     * per op on every row (Java and C++ alike), so every ratio compares the same bytes: against
     * the 2 MiB memcpy floor, and against the C++ loop of the same calls on an idle stream
     * (each copy inline on the host driver) and on a busy one (behind a no-op host function:
     * all 32 on the stream's worker).
     */
    static void batchTable(Map<String, List<Double>> java, Map<String, List<Double>> cpp) {
        List<Double> j = java.get(BATCH_OP);
        if (j == null) return;
        double mg = memcpyFloor(cpp, BATCH_BYTES);
        double jg = BATCH_BYTES / median(j);
        List<Double> idle = cpp.get("htod_pinned_batch32x64KiB"), busy = cpp.get("htod_pinned_busy_batch32x64KiB");
        double ig = BATCH_BYTES / median(idle), bg = BATCH_BYTES / median(busy);
        out("Batched small copies, pinned → device: 32 x 64 KiB `copyFromAsync` then one `synchronize()` "
                + "(2 MiB per op on every row; memcpy floor of 2 MiB).");
        out("");
        out("| side | GB/s | / memcpy | Java / this | ns/op (iterations or rounds) |");
        out("|---|---:|---:|---:|---|");
        out("| Java `htodPinnedBatch32` | " + f2(jg) + " | " + f2(jg / mg) + "x | 1.00x | " + joinNs(j) + " |");
        out("| C++ `htod_pinned_batch32x64KiB` (idle stream) | " + f2(ig) + " | " + f2(ig / mg) + "x | " + f2(jg / ig)
                + "x | " + joinNs(idle) + " |");
        out("| C++ `htod_pinned_busy_batch32x64KiB` (busy stream: worker) | " + f2(bg) + " | " + f2(bg / mg) + "x | "
                + f2(jg / bg) + "x | " + joinNs(busy) + " |");
        out("| C++ memcpy floor, 2 MiB | " + f2(mg) + " | 1.00x | " + f2(jg / mg) + "x | |");
        out("");
    }

    /** GB/s of the fastest C++ memcpy variant of {@code bytes} (memcpy_, memcpy_pieces_, memcpy_memfd_). */
    static double memcpyFloor(Map<String, List<Double>> cpp, long bytes) {
        double best = Double.NaN;
        for (String v : new String[] {"memcpy_", "memcpy_pieces_", "memcpy_memfd_"}) {
            List<Double> r = cpp.get(v + sizeLabel(bytes));
            if (r != null && (Double.isNaN(best) || bytes / median(r) > best)) best = bytes / median(r);
        }
        return best;
    }

    static long bytesOf(String cppName) {
        if (cppName.contains("batch32x")) return 32 * (64L << 10); // 32 copies of 64 KiB per op
        if (cppName.endsWith("64KiB")) return 64L << 10;
        if (cppName.endsWith("_2MiB")) return 2L << 20;
        if (cppName.endsWith("64MiB")) return 64L << 20;
        return 128L << 20; // overlap ops: two copies of 64 MiB
    }

    static void overlapTable(Map<String, List<Double>> java, Map<String, List<Double>> cpp) {
        long both = 128L << 20;
        double j1 = median(java.get("oneStream")), j2 = median(java.get("twoStreams"));
        double c1 = median(cpp.get("overlap_one_stream")), c2 = median(cpp.get("overlap_two_streams"));
        // memcpy_two_threads copies 64 MiB per thread in 2 MiB pieces: its one-thread twin is memcpy_pieces_64MiB, twice.
        double mt = median(cpp.get("memcpy_two_threads")), m1 = 2 * median(cpp.get("memcpy_pieces_64MiB"));
        out("## Two streams at once vs one stream (two copies of 64 MiB from pinned memory, queued by one thread)");
        out("");
        out("| side | one stream: ns (GB/s) | two streams: ns (GB/s) | overlap = one / two |");
        out("|---|---:|---:|---:|");
        out("| Java (`copyFromAsync` x2 + synchronize) | " + f0(j1) + " (" + f2(both / j1) + ") | " + f0(j2) + " ("
                + f2(both / j2) + ") | **" + f2(j1 / j2) + "x** |");
        out("| C++ driver loop (`cuMemcpyHtoDAsync` x2 + `cuStreamSynchronize`) | " + f0(c1) + " (" + f2(both / c1)
                + ") | " + f0(c2) + " (" + f2(both / c2) + ") | " + f2(c1 / c2) + "x |");
        out("| C++ `memcpy`, 2 x 64 MiB in 2 MiB pieces, one thread vs two threads | " + f0(m1) + " (" + f2(both / m1) + ") | "
                + f0(mt) + " (" + f2(both / mt) + ") | " + f2(m1 / mt) + "x |");
        out("");
        out("Java two streams / C++ two streams (throughput): " + f2(c2 / j2) + "x; Java two streams / C++ memcpy on "
                + "two threads: " + f2(mt / j2) + "x. Iterations (ns): Java one " + joinNs(java.get("oneStream"))
                + "; Java two " + joinNs(java.get("twoStreams")) + "; C++ one " + joinNs(cpp.get("overlap_one_stream"))
                + "; C++ two " + joinNs(cpp.get("overlap_two_streams")) + "; memcpy two threads "
                + joinNs(cpp.get("memcpy_two_threads")) + ".");
        out("");
    }

    /** Driver calls per Java op (64 KiB), counted with cuvmm's counters after warm ops; not timed. */
    static void callCounts() {
        DriverCounters c = Driver.get().counters();
        out("## Driver calls per Java op (counted, not timed; C++ driver loop: the copy + `cuStreamSynchronize`)");
        out("");
        out("| op | calls per op |");
        out("|---|---|");
        try (CopyFixture f = new CopyFixture(64L << 10, true)) {
            // The counters are process-wide: the array copy's staging comes back on cuvmm's reaper
            // thread (cuEventSynchronize, cuEventDestroy, cuMemFreeHost) after its op, so it goes
            // last, where those calls count as its own.
            for (String op : new String[] {"htodPinned", "htodPinnedBatch32", "htodPageable", "dtohPinned", "dtohArray", "dtohPageable",
                    "oneStream", "twoStreams", "htodArray"}) {
                Runnable r = f.op(op);
                for (int i = 0; i < 4; i++) r.run();
                c.resetCalls();
                final int n = 8;
                for (int i = 0; i < n; i++) r.run();
                Map<String, Long> calls = new TreeMap<>(c.calls());
                StringBuilder sb = new StringBuilder();
                for (Map.Entry<String, Long> e : calls.entrySet()) {
                    if (e.getValue() == 0) continue;
                    sb.append(sb.length() == 0 ? "" : ", ").append(e.getKey()).append(' ')
                            .append(e.getValue() % n == 0 ? Long.toString(e.getValue() / n) : f2((double) e.getValue() / n));
                }
                out("| `" + op + "` | " + (sb.length() == 0 ? "none" : sb) + " |");
            }
        }
        BenchChecks.nothingLeft();
        out("");
    }

    // ---------------------------------------------------------------- GC

    static void gc() throws Exception {
        out("## Does a large async copy hold off the GC? (reported, not asserted)");
        out("");
        out("Child JVM, `-Xmx1g -Xmn8m`, a thread allocating 64 KiB arrays without pause; collections completed "
                + "during each of 5 copies of 256 MiB (`GcDuringCopy`). The array copy's call (which fills cuvmm's "
                + "pinned staging in 1 MiB pieces) and its `synchronize()` are counted apart; \"no copy\" is a "
                + "window as long as the average array copy with nothing copied.");
        out("");
        out("| collector | measurement | collections per copy | ms per copy | collections per second |");
        out("|---|---|---|---|---:|");
        for (String collector : new String[] {"-XX:+UseSerialGC", "-XX:+UseG1GC"}) {
            List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    collector, "-Xmx1g", "-Xmn8m"));
            for (String p : System.getProperties().stringPropertyNames()) {
                // The driver settings, and where JavaCPP extracts the native library (a private cache).
                if (p.startsWith("cuvmm.") || p.startsWith("org.bytedeco.javacpp.")) {
                    cmd.add("-D" + p + "=" + System.getProperty(p));
                }
            }
            cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), GcDuringCopy.class.getName(), "5"));
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0 || !output.contains("DONE")) {
                out("| " + collector + " | **failed** | see the console | |");
                System.out.println(output);
                continue;
            }
            for (String line : output.split("\n")) {
                if (!line.startsWith("RESULT ")) continue;
                String[] f = line.split(" ");
                String gcs = f[3].substring(4), ms = f[4].substring(3);
                long g = Arrays.stream(gcs.split(",")).mapToLong(Long::parseLong).sum();
                long m = Arrays.stream(ms.split(",")).mapToLong(Long::parseLong).sum();
                out("| " + collector + " | " + f[1] + " | " + gcs + " | " + ms + " | "
                        + (m == 0 ? "-" : f0(1000.0 * g / m)) + " |");
            }
        }
        out("");
    }

    // ---------------------------------------------------------------- the C++ side

    static Path binary() throws Exception {
        Path code = Path.of(StreamsReport.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        Path p = code.getParent().resolve("cuvmm-streams-baseline");
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException(p + " is missing (build it: mvn -pl bench -am package, or bench/run-streams)");
        }
        return p;
    }

    /** Runs the baseline once (holding the JMH lock, so no other benchmark overlaps it); appends its rounds. */
    static void runBaseline(Path binary, Settings s, String kind, Map<String, List<Double>> into) throws Exception {
        ProcessBuilder pb = new ProcessBuilder(binary.toString(), "--warmup-rounds", Integer.toString(s.warmup),
                "--rounds", Integer.toString(s.iterations), "--round-ms", Long.toString(s.timeMs));
        BaselineEnvironment.passDriverSettings(pb);
        pb.redirectErrorStream(true);
        StringBuilder all = new StringBuilder();
        String ranOn = "?";
        String live = "";
        int rc;
        try (RatioReport.BenchLock lock = new RatioReport.BenchLock()) {
            lock.acquire();
            Process p = pb.start();
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    all.append(line).append('\n');
                    if (!s.quiet) System.out.println("  c++: " + line);
                    if (line.startsWith("driver ")) {
                        ranOn = line.replaceAll("^driver kind=(\\S+).*", "$1");
                    } else if (line.startsWith("result ")) {
                        String name = line.replaceAll("^result name=(\\S+).*", "$1");
                        String v = line.substring(line.indexOf("rounds_ns=") + "rounds_ns=".length());
                        List<Double> rounds = into.computeIfAbsent(name, k -> new ArrayList<>());
                        for (String x : v.split(",")) rounds.add(Double.parseDouble(x));
                    } else if (line.startsWith("live ")) {
                        live = line;
                    }
                }
            }
            rc = p.waitFor();
        }
        if (rc != 0) throw new IllegalStateException("streams baseline failed (exit " + rc + "):\n" + all);
        if (!ranOn.equals(kind)) {
            throw new IllegalStateException("the C++ baseline ran the " + ranOn + " driver but Java runs " + kind
                    + "; force one with -Dcuvmm.driver / CUVMM_DRIVER");
        }
        if (!live.isEmpty() && !live.equals("live allocations=0 reservations=0 mappings=0 memfds=0")) {
            throw new IllegalStateException("streams baseline left objects alive: " + live);
        }
    }

    // ---------------------------------------------------------------- JMH

    static RunResult runJmh(Class<?> cls, String method, long bytes, Settings s, String kind) throws Exception {
        return ReportSupport.runJmh(cls, method, "bytes", Long.toString(bytes), Mode.AverageTime, TimeUnit.NANOSECONDS,
                s, s.quiet, kind);
    }

    // ---------------------------------------------------------------- formatting, machine

    static double median(List<Double> v) {
        if (v == null || v.isEmpty()) return Double.NaN;
        double[] a = v.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return a.length % 2 == 1 ? a[a.length / 2] : (a[a.length / 2 - 1] + a[a.length / 2]) / 2;
    }

    static String f0(double v) { return String.format(Locale.ROOT, "%.0f", v); }
    static String f2(double v) { return String.format(Locale.ROOT, "%.2f", v); }

    static String joinNs(List<Double> v) {
        if (v == null) return "-";
        StringBuilder sb = new StringBuilder();
        for (double x : v) sb.append(sb.length() == 0 ? "" : ", ").append(f0(x));
        return sb.toString();
    }

    static Settings parse(String[] args) {
        Settings s = new Settings();
        s.read(args);
        return s;
    }
}
