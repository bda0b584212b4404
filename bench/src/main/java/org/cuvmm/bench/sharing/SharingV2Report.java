package org.cuvmm.bench.sharing;

import static org.cuvmm.bench.sharing.SharingPoolReport.f1;
import static org.cuvmm.bench.sharing.SharingPoolReport.f2;
import static org.cuvmm.bench.sharing.SharingPoolReport.fmtCalls;
import static org.cuvmm.bench.sharing.SharingPoolReport.mean;
import static org.cuvmm.bench.sharing.SharingPoolReport.median;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.bench.BenchChecks;
import org.cuvmm.bench.CommandLine;
import org.cuvmm.bench.ReportOptions;
import org.cuvmm.bench.ReportSupport;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.ImportCache;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.ipc.SharingServer;
import org.cuvmm.pool.VirtualMemoryPool;

/**
 * Steady-state sharing (issue 11 item 5): one consumer round (ATTACH, DESCRIPTOR, then
 * {@code Attachment.close()}: RELEASE, RELEASED) of a pooled one-chunk frame (one granularity,
 * 2 MiB on the host driver) and of a three-chunk buffer, protocol version 1 against version 2
 * with the client's import cache warm, against the bare Unix-socket ping-pong of the same
 * message sizes in C++ ({@code cuvmm-transport-baseline --pingpong}), all in one run.
 *
 * <p>The producer ({@link SharingServer}, the pool, the published buffers) lives in this
 * process; the consumer ({@link SharingClient}) is this process's main thread. A thread, not a
 * process, because the C++ ping-pong is two threads of one process too (the socket path is the
 * same to the kernel), and because cuvmm's driver-call counters are per process: counted here,
 * they are the calls of both sides of the socket together (a cached version-2 round must show
 * none at all). The fds are counted on each side: sent by the server ({@code SharingStats.fdsSent}),
 * received by the client ({@code ImportCache.Stats.fdsReceived}; version 1 has no cache, and what
 * it receives is what the server sent on its only connection).
 *
 * <p>Timing: no JMH (the round needs a server and a client with their threads; the C++ side
 * is timed the same way): {@code --warmup} then {@code --iterations} iterations, each one
 * segment of {@code --time-ms} of the C++ ping-pong ({@link PingPongProcess}, a child process
 * that waits between its segments), one of the Java socket ping-pong and one of Java rounds,
 * in that order and the reverse order in turn; ns per round = elapsed / rounds of its segment, read with System.nanoTime once per
 * round (a round is tens of microseconds). Interleaved so that a drift of the machine's
 * speed (on the 2-vCPU guest of bench/RESULTS-sharing-v2.md the ping-pong alone moves between
 * 23 and 34 µs within minutes) falls on both sides of each ratio: the headline ratio is the
 * paired one, the median over iterations of (Java segment / the C++ segment just before it).
 * The ratio of medians and of the best segments are shown beside it.
 *
 * <p>Between the two, a Java ping-pong of the same sizes over cuvmm's socket layer and no
 * protocol ({@link SocketPingPong}, a diagnostic): the round's gap to the C++ ping-pong then
 * splits into the part Java and the socket layer cost and the part the protocol costs.
 */
public final class SharingV2Report {
    private SharingV2Report() {}

    static final class Settings extends ReportOptions {
        int countRounds = 200;
        ThreadPlacement.Mode placement = ThreadPlacement.Mode.CROSS;

        Settings() {
            super(3, 30, 60, Path.of("bench/target/sharing-v2-report.md"));
        }

        @Override
        protected int option(String[] args, int i) {
            String a = args[i];
            switch (a) {
                case "--count-rounds" -> countRounds = (int) CommandLine.number(args, ++i, a, 1);
                case "--placement" -> placement = ThreadPlacement.Mode.parse(CommandLine.value(args, ++i, a));
                default -> i = -1;
            }
            return i;
        }

        @Override
        protected String expected() {
            return "--warmup N --iterations N --time-ms N --count-rounds N --placement MODE --out FILE";
        }
    }

    /** What {@code --help} prints (bench/run-sharing-v2 passes its arguments here). */
    static final String USAGE = "usage: bench/run-sharing-v2 [--warmup N (3)] [--iterations N (30)] [--time-ms N (60)] "
            + "[--count-rounds N (200)] [--placement cross|same|unpinned (cross)] [--out FILE (bench/target/sharing-v2-report.md)] [--help]";

    /** Untimed rounds before the counted ones: enough for C2 to compile the round (a few thousand were not: Run 24). */
    private static final int WARM_ROUNDS = 20_000;

    private static final StringBuilder REPORT = new StringBuilder();

    private static void out(String line) {
        System.out.println(line);
        REPORT.append(line).append('\n');
    }

    /** The bytes of each message of one round: ATTACH, DESCRIPTOR, RELEASE, RELEASED (header included). */
    static int[] messageSizes(String name, int version, int chunks) {
        int attach = 16 + 2 + name.getBytes(StandardCharsets.UTF_8).length;
        int descriptor = 16 + 24 + (version == 1 ? 8 : 20) * chunks;
        return new int[] {attach, descriptor, 16 + 8, 16 + 8};
    }

    private record Case(String label, String name, int chunks) {}

    private record Result(List<Double> javaNs, List<Double> pingNs, int[] sizes, Map<String, Long> calls, double callsPerRound,
                          double fdsSentPerRound, double fdsReceivedPerRound, String cache, double javaCpuNs, double pingCpuNs,
                          SideCpu.Split sides, double javaSwitches, double pingSwitches, List<Double> socketNs) {}

    public static void main(String[] args) throws Exception {
        Settings s = CommandLine.parseOrExit(args, SharingV2Report::parse, USAGE);
        Driver driver = BenchChecks.expectedDriver();
        Path binary = SharingPoolReport.binary("cuvmm-transport-baseline");
        out("# cuvmm steady-state sharing benchmark (protocol v1 vs v2 cached vs bare socket ping-pong)");
        out("");
        for (String line : ReportSupport.headerLines(driver)) out(line);
        out("- settings: per case, after " + WARM_ROUNDS + " untimed rounds and " + s.countRounds + " rounds that count "
                + "driver calls and fds, " + s.warmup + " warm-up and " + s.iterations + " measured iterations, each one "
                + s.timeMs + " ms segment of the C++ ping-pong, of the Java socket ping-pong and of Java rounds, in that order "
                + "and the reverse in turn (interleaved: paired ratio = median over iterations of Java segment / C++ segment)");
        out("- producer: SharingServer + pool in this JVM; consumer: SharingClient on this JVM's main thread "
                + "(C++ ping-pong: two threads of one process, socketpair)");
        int[] cpus = ThreadPlacement.cpus(s.placement);
        out("- placement: " + s.placement.label() + (cpus == null ? " (threads left to the scheduler)"
                : " (producer threads on CPU " + cpus[0] + ", consumer threads on CPU " + cpus[1]
                + "; the C++ ping-pong's two threads the same way)"));
        out("- JVM options: " + String.join(" ", ManagementFactory.getRuntimeMXBean().getInputArguments()));
        out("- reads: " + (Boolean.parseBoolean(System.getProperty("cuvmm.ipc.deferConsumption", "true").trim())
                ? "both ends of each connection defer consumption (MSG_PEEK reads, the bytes taken off the queue in one "
                + "more recvmsg per 16 reads; docs/VMM_DESIGN.md), unless the kernel refuses SO_PEEK_OFF or fails cuvmm's probe of it"
                : "plain consuming reads (-Dcuvmm.ipc.deferConsumption=false)")
                + "; the Java socket ping-pong always reads plainly");
        out("- CPU / round: process CPU time (user + system, every thread) over the measured iterations / rounds; "
                + "Java: this JVM (producer and consumer), C++: the ping-pong process; split by side: the producer's "
                + "threads (cuvmm-ipc-conn-*, cuvmm-ipc-accept) and the consumer's (the main thread, cuvmm-ipc-client-*), "
                + "each thread's CPU time; context switches / round: voluntary + involuntary, every thread of the process "
                + "(Java: /proc/self/task/*/status; C++: getrusage), over the same iterations");
        out("- Java socket ping-pong (a diagnostic): the same message sizes over cuvmm's FdSocket (jnr-ffi sendmsg/recvmsg, "
                + "its locks and fd guard, a byte[] per message) between this thread and an echo thread placed as the "
                + "producer's, with no protocol; run between the C++ ping-pong and the Java rounds. Its ratio to the C++ "
                + "ping-pong is what Java and the socket layer cost; the round's ratio to it is what the protocol costs");
        if (cpus != null) ThreadPlacement.pinCurrentThread(cpus[1]);
        out("");
        Path dir = Files.createTempDirectory("cuvmm-bench-v2");
        Path sock = dir.resolve("s");
        List<String[]> rows = new ArrayList<>();
        List<String> countRows = new ArrayList<>();
        Map<String, Result> results = new TreeMap<>();
        try (VirtualMemoryResource producer = VirtualMemoryResource.create(0);
             VirtualMemoryResource consumer = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(producer).name("bench-v2").build();
             SharingServer server = SharingServer.builder(sock).build()) {
            long g = producer.granularity();
            List<VirtualMemoryBuffer> parts = new ArrayList<>();
            VirtualMemoryBuffer frame = pool.allocateExported(g);
            VirtualMemoryBuffer three = producer.allocate(g);
            parts.add(three);
            for (int i = 2; i <= 3; i++) {
                three = producer.modifyAllocation(three, i * g);
                parts.add(three);
            }
            VirtualMemoryBuffer plain = producer.allocate(g);
            if (frame.chunkCount() != 1 || three.chunkCount() != 3 || plain.chunkCount() != 1) {
                throw new IllegalStateException("chunks: pooled " + frame.chunkCount() + ", three " + three.chunkCount());
            }
            server.publish("frame", frame);
            server.publish("three", three);
            server.publish("plain", plain);
            List<Case> cases = List.of(new Case("pooled " + (g >> 20) + " MiB, 1 chunk", "frame", 1),
                    new Case("3 chunks x " + (g >> 20) + " MiB", "three", 3),
                    new Case((g >> 20) + " MiB, 1 chunk, not pooled (diagnostic)", "plain", 1));
            for (Case c : cases) {
                for (int version : new int[] {1, 2}) {
                    Result r = run(s, cpus, binary, server, consumer, sock, c, version);
                    results.put(c.name + version, r);
                    double jm = median(r.javaNs), pm = median(r.pingNs);
                    List<Double> paired = pairedRatios(r.javaNs, r.pingNs);
                    rows.add(new String[] {c.label, "v" + version + (version == 2 ? " cached" : ""),
                            "**" + f2(median(paired)) + "**", f2(quantile(paired, 0.25)) + " - " + f2(quantile(paired, 0.75)),
                            f1(jm / 1000), f1(mean(r.javaNs) / 1000), f1(pm / 1000), f1(mean(r.pingNs) / 1000), f2(jm / pm),
                            f2(mean(r.javaNs) / mean(r.pingNs)),
                            f1(min(r.javaNs) / 1000), f1(min(r.pingNs) / 1000), f2(min(r.javaNs) / min(r.pingNs)),
                            f1(r.javaCpuNs / 1000), f1(r.pingCpuNs / 1000), f2(r.javaCpuNs / r.pingCpuNs),
                            f1(r.sides.producerNs() / 1000) + " / " + f1(r.sides.consumerNs() / 1000),
                            f2(r.javaSwitches), f2(r.pingSwitches),
                            f1(median(r.socketNs) / 1000), f2(median(r.socketNs) / pm), f2(jm / median(r.socketNs)),
                            fmtNum(r.callsPerRound), fmtNum(r.fdsSentPerRound), fmtNum(r.fdsReceivedPerRound)});
                    countRows.add("| " + c.label + " | v" + version + " | " + sizes(r.sizes) + " | " + fmtCalls(r.calls)
                            + " | " + r.cache + " |");
                    System.out.println(c.label + " v" + version + ": java rounds us " + us(r.javaNs) + " ; ping-pong us "
                            + us(r.pingNs));
                }
            }
            server.unpublish("frame");
            server.unpublish("three");
            server.unpublish("plain");
            frame.close();
            plain.close();
            for (int i = parts.size() - 1; i >= 0; i--) parts.get(i).close();
        } finally {
            try (Stream<Path> w = Files.walk(dir)) {
                w.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
        BenchChecks.nothingLeft();
        out("## Consumer round trip (ATTACH, DESCRIPTOR, RELEASE, RELEASED) vs the bare ping-pong of the same bytes "
                + "(target: v2 cached <= 1.3x, 0 driver calls, 0 fds)");
        out("");
        out("| buffer | protocol | ratio (paired: median of Java / C++ segment pairs) | paired ratio, quartiles "
                + "| Java median µs | Java mean µs | ping-pong median µs | ping-pong mean µs "
                + "| ratio (medians) | ratio (means) | Java best µs | ping-pong best µs | ratio (bests) "
                + "| Java CPU µs / round | ping-pong CPU µs / round | CPU ratio "
                + "| Java CPU µs / round: producer / consumer threads "
                + "| context switches / round: Java | context switches / round: ping-pong "
                + "| Java socket ping-pong median µs | socket ping-pong / C++ ping-pong | Java round / socket ping-pong "
                + "| driver calls / round (both sides) | fds sent / round (server) | fds received / round (client) |");
        out("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (String[] r : rows) out("| " + String.join(" | ", r) + " |");
        out("");
        for (Case c : List.of(new Case("pooled frame", "frame", 1), new Case("3-chunk buffer", "three", 3),
                new Case("1 chunk, not pooled", "plain", 1))) {
            Result v1 = results.get(c.name + 1), v2 = results.get(c.name + 2);
            out("- " + c.label + ": v1 / v2 cached = **" + f2(median(v1.javaNs) / median(v2.javaNs)) + "x** (medians)");
        }
        out("");
        out("Per round, counted outside the timed loops:");
        out("");
        out("| buffer | protocol | message bytes (ATTACH, DESCRIPTOR, RELEASE, RELEASED) | driver calls / round, by entry "
                + "(cuMemExportToShareableHandle: the producer; the others: the consumer) | client cache after the run |");
        out("|---|---|---|---|---|");
        countRows.forEach(SharingV2Report::out);
        out("");
        out("- load average at end: " + ReportSupport.loadAverage());
        ReportSupport.write(s.out, REPORT);
    }

    /**
     * One case and version, interleaved: each iteration times one segment of the C++
     * ping-pong of its message sizes, one of the Java socket ping-pong and one of the Java
     * rounds, in that order or the reverse in turn (after untimed warm-up rounds and the
     * counted rounds), all with their threads on
     * {@code cpus} (producer's CPU, consumer's CPU; null: unpinned). Computed once, in main:
     * once the main thread is pinned the JVM sees one CPU.
     */
    private static Result run(Settings s, int[] cpus, Path binary, SharingServer server, VirtualMemoryResource consumer, Path sock,
                              Case c, int version) throws Exception {
        int[] sizes = messageSizes(c.name, version, c.chunks);
        DriverCounters counters = Driver.get().counters();
        try (PingPongProcess ping = PingPongProcess.start(binary, sizes, s.timeMs, cpus);
             SocketPingPong socket = SocketPingPong.open(sizes, cpus == null ? -1 : cpus[0]);
             SharingClient client = SharingClient.builder(sock).clientName("bench v" + version).protocolVersion(version)
                     .build()) {
            if (client.protocolVersion() != version) {
                throw new IllegalStateException("the client speaks version " + client.protocolVersion() + ", not " + version);
            }
            if (cpus != null) {
                // The client's threads exist now, and so does the server's connection thread for it.
                ThreadPlacement.pinThreadsNamed("cuvmm-ipc-conn-", cpus[0]);
                ThreadPlacement.pinThreadsNamed("cuvmm-ipc-accep", cpus[0]);
                ThreadPlacement.pinThreadsNamed("cuvmm-ipc-clien", cpus[1]);
            }
            // Untimed warm-up: the first round fills a version-2 cache; the rest let the JIT compile the path.
            for (int i = 0; i < WARM_ROUNDS; i++) round(client, c.name, consumer);
            ImportCache.Stats cs0 = client.importCache().stats();
            long sent0 = server.stats().fdsSent();
            counters.resetCalls();
            for (int i = 0; i < s.countRounds; i++) round(client, c.name, consumer);
            Map<String, Long> raw = counters.calls();
            long sent = server.stats().fdsSent() - sent0;
            ImportCache.Stats cs = client.importCache().stats();
            long received = version == 1 ? sent : cs.fdsReceived() - cs0.fdsReceived();
            Map<String, Long> calls = new TreeMap<>();
            long total = 0;
            for (Map.Entry<String, Long> e : raw.entrySet()) {
                if (e.getValue() == 0) continue;
                total += e.getValue();
                calls.put(e.getKey(), e.getValue() % s.countRounds == 0 ? e.getValue() / s.countRounds : -e.getValue());
            }
            List<Double> java = new ArrayList<>(), pingNs = new ArrayList<>(), socketNs = new ArrayList<>();
            com.sun.management.OperatingSystemMXBean os =
                    (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
            long javaCpu = 0, javaSwitches = 0, javaRounds = 0, pingCpu = 0, pingSwitches = 0, pingRounds = 0;
            SideCpu sideCpu = new SideCpu();
            for (int it = 0; it < s.warmup + s.iterations; it++) {
                boolean measured = it >= s.warmup;
                // The order alternates (C++, socket, Java; then Java, socket, C++): a steady drift of
                // the machine's speed, and what one segment leaves in the caches for the next, fall
                // on both sides of the pair alike.
                boolean cppFirst = it % 2 == 0;
                PingPongProcess.Segment p = cppFirst ? ping.segment() : null;
                double socketSegment = cppFirst ? socket.segment(s.timeMs) : 0;
                // Counted around the Java segment only, the reads of the counters outside its clock.
                long switches0 = SideCpu.processContextSwitches();
                if (measured) sideCpu.resume();
                long cpu0 = os.getProcessCpuTime();
                long n = 0;
                long t0 = System.nanoTime(), t;
                do {
                    round(client, c.name, consumer);
                    n++;
                    t = System.nanoTime();
                } while (t - t0 < s.timeMs * 1_000_000L);
                long cpu = os.getProcessCpuTime() - cpu0;
                if (measured) {
                    sideCpu.pause();
                    javaSwitches += SideCpu.processContextSwitches() - switches0;
                }
                if (!cppFirst) {
                    socketSegment = socket.segment(s.timeMs);
                    p = ping.segment();
                }
                if (!measured) continue;
                javaCpu += cpu;
                javaRounds += n;
                java.add((double) (t - t0) / n);
                pingNs.add(p.nsPerRound());
                pingCpu += p.cpuNs();
                pingSwitches += p.switches();
                pingRounds += p.rounds();
                socketNs.add(socketSegment);
            }
            String cache = version == 1 ? "none (version 1)"
                    : "hits " + cs.hits() + ", misses " + cs.misses() + ", entries " + cs.entries() + ", ids held "
                    + cs.idsHeld() + ", fds kept " + cs.fdsKept();
            return new Result(java, pingNs, sizes, calls, (double) total / s.countRounds,
                    (double) sent / s.countRounds, (double) received / s.countRounds, cache, (double) javaCpu / javaRounds,
                    (double) pingCpu / pingRounds, sideCpu.perRound(javaRounds), (double) javaSwitches / javaRounds,
                    (double) pingSwitches / pingRounds, socketNs);
        }
    }

    /** One consumer round: attach (ATTACH, DESCRIPTOR, import or cached view) and close (RELEASE, RELEASED). */
    static void round(SharingClient client, String name, VirtualMemoryResource consumer) throws IOException {
        try (Attachment a = client.attach(name, consumer)) {
            if (a.buffer().size() <= 0) throw new IllegalStateException("empty attachment");
        }
    }

    private static String sizes(int[] v) {
        StringBuilder sb = new StringBuilder();
        for (int x : v) sb.append(sb.length() == 0 ? "" : ", ").append(x);
        return sb.toString();
    }

    private static String us(List<Double> v) {
        StringBuilder sb = new StringBuilder();
        for (double x : v) sb.append(sb.length() == 0 ? "" : ", ").append(f1(x / 1000));
        return sb.toString();
    }

    /** Java segment i / C++ segment i, for each measured iteration i (the two ran one after the other). */
    static List<Double> pairedRatios(List<Double> javaNs, List<Double> pingNs) {
        if (javaNs.size() != pingNs.size()) {
            throw new IllegalArgumentException("segments: " + javaNs.size() + " Java, " + pingNs.size() + " C++ (expected: pairs)");
        }
        List<Double> r = new ArrayList<>();
        for (int i = 0; i < javaNs.size(); i++) r.add(javaNs.get(i) / pingNs.get(i));
        return r;
    }

    /** The {@code q} quantile of {@code v} by nearest rank (the ceil(q n)-th smallest, 0 &lt; q &lt; 1). */
    static double quantile(List<Double> v, double q) {
        List<Double> sorted = new ArrayList<>(v);
        sorted.sort(null);
        return sorted.get(Math.max(0, (int) Math.ceil(q * sorted.size()) - 1));
    }

    private static double min(List<Double> v) {
        return v.stream().mapToDouble(Double::doubleValue).min().orElse(Double.NaN);
    }

    private static String fmtNum(double v) {
        return v == Math.rint(v) ? Long.toString((long) v) : String.format(Locale.ROOT, "%.3f", v);
    }

    static Settings parse(String[] args) {
        Settings s = new Settings();
        s.read(args);
        return s;
    }
}
