package org.cuvmm.cli;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code cuvmm bench [core|sharing-pool|sharing-v2|streams] [runner options]}: runs the
 * benchmark runners of {@code bench/} from the source tree ({@code bench/run}: allocate, grow
 * and move against the C++ baseline; {@code bench/run-sharing-pool}: descriptor transport,
 * pool, threads, arena workloads; {@code bench/run-sharing-v2}: cached version-2 rounds
 * against a C++ ping-pong; {@code bench/run-streams}: asynchronous copies). {@code --help} or
 * {@code -h} alone prints the suites; after a suite, the runner's own options. A runner's
 * usage error (exit 2) is passed on as exit 2. The tree is found through the {@code cuvmm.home} system property, which the
 * {@code ./cuvmm} launcher sets; the runners build what they need and print their report.
 */
final class BenchCommand implements Command {
    @Override
    public String name() { return "bench"; }

    @Override
    public String summary() {
        return "run the benchmarks from the source tree: bench [core|sharing-pool|sharing-v2|streams] [runner options]";
    }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        String home = System.getProperty("cuvmm.home");
        if (home == null || home.isBlank()) {
            err.println("cuvmm bench: the source tree is unknown (expected: run through the ./cuvmm launcher, which sets "
                    + "-Dcuvmm.home, or pass -Dcuvmm.home=<repository root>)");
            return USAGE;
        }
        if (args.size() == 1 && (args.get(0).equals("--help") || args.get(0).equals("-h"))) {
            out.println("cuvmm bench: " + summary());
            out.println("  'cuvmm bench <suite> --help' prints that runner's options");
            return OK;
        }
        String which = args.isEmpty() || args.get(0).startsWith("-") ? "core" : args.get(0);
        List<String> rest = args.isEmpty() || args.get(0).startsWith("-") ? args : args.subList(1, args.size());
        String script;
        switch (which) {
            case "core": script = "run"; break;
            case "sharing-pool": script = "run-sharing-pool"; break;
            case "sharing-v2": script = "run-sharing-v2"; break;
            case "streams": script = "run-streams"; break;
            default:
                err.println("cuvmm bench: unknown suite '" + which + "' (expected: core, sharing-pool, sharing-v2 or "
                        + "streams)");
                return USAGE;
        }
        Path runner = Path.of(home, "bench", script);
        if (!Files.isExecutable(runner)) {
            err.println("cuvmm bench: " + runner + " is missing or not executable (expected: a cuvmm source tree)");
            return USAGE;
        }
        List<String> cmd = new ArrayList<>();
        cmd.add(runner.toString());
        cmd.addAll(rest);
        try {
            Process p = new ProcessBuilder(cmd).directory(Path.of(home).toFile()).inheritIO().start();
            // The runners exit 2 on a usage error, as cuvmm does: passed on, not turned into a failure.
            int status = p.waitFor();
            return status == 0 ? OK : status == USAGE ? USAGE : FAILED;
        } catch (IOException e) {
            err.println("cuvmm bench: could not start " + runner + ": " + e.getMessage());
            return FAILED;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return FAILED;
        }
    }
}
