package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Runs the cuvmm command in-process, as ./cuvmm would, and checks its status and output. */
class MainTest {

    /** Exit status, standard output and standard error of one run. */
    private record Result(int status, String out, String err) {
        List<String> lines() { return Arrays.asList(out.split("\n")); }

        /** The table row of a demo step, by the step's name. */
        String row(String step) {
            List<String> rows = lines().stream().filter(l -> l.startsWith(step + " ")).collect(Collectors.toList());
            assertEquals(1, rows.size(), "one row for step '" + step + "' in:\n" + out);
            return rows.get(0);
        }
    }

    private static Result cuvmm(String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int status;
        try (PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
             PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8)) {
            status = Main.run(args, o, e);
        }
        return new Result(status, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void infoSaysWhichDriverRunsAndWhyAndDescribesEveryDevice() {
        Result r = cuvmm("info");
        assertEquals(0, r.status(), r.out() + r.err());
        Driver driver = Driver.get();
        String kind = driver.kind().name().toLowerCase(java.util.Locale.ROOT);
        assertTrue(r.out().contains("driver                    " + kind + " ("), r.out());
        assertTrue(r.out().contains("why                       " + driver.reason()), r.out());
        assertTrue(r.out().contains("driver version            " + driver.versionString()), r.out());
        assertTrue(r.out().contains("JVM                       " + Runtime.version()), r.out());
        for (int d = 0; d < driver.deviceCount(); d++) {
            assertTrue(r.out().contains("device " + d + " "), r.out());
        }
        assertTrue(r.out().contains("    VMM                     yes"), r.out());
        assertTrue(r.out().matches("(?s).*recommended granularity \\d+ [KMG]?i?B \\(\\d+ bytes.*"), r.out());
        assertTrue(r.out().matches("(?s).*minimum granularity     \\d+ [KMG]?i?B \\(\\d+ bytes.*"), r.out());
        assertTrue(r.out().contains("handle types            NONE"), r.out());
        assertFalse(r.out().contains("granularity unavailable"), r.out());
        if (driver.kind() == DriverKind.HOST || driver.isHostLibrary()) {
            assertTrue(r.out().contains("not GPU results"), r.out());
        }
        assertEquals(driver.isHostLibrary(), r.out().contains("cuda driver API over the host library (no GPU)"), r.out());
    }

    /**
     * ./cuvmm info with the cuda driver forced at the host library (a child JVM, so it runs in
     * both passes): the devices of CUVMM_HOST_DEVICES, and it says what it is, never a GPU.
     */
    @Test
    void infoOverTheHostLibrarySaysItIsNoGpu() throws Exception {
        ChildJvm.Result r = overTheHostLibrary(Map.of("CUVMM_HOST_DEVICES", "2"), "info");
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("driver                    cuda (cuda driver API over the host library (no GPU): "),
                r.toString());
        assertTrue(r.output().contains("devices                   2\n"), r.toString());
        assertTrue(r.output().contains("device 1 "), r.toString());
        assertTrue(r.output().contains("not GPU results"), r.toString());
        assertFalse(r.output().contains("the NVIDIA driver, libcuda.so.1"), r.toString());
    }

    /** {@code cuvmm command} in a child JVM with the cuda driver forced at the host library (skipped when it is not built). */
    private static ChildJvm.Result overTheHostLibrary(Map<String, String> env, String command) throws Exception {
        String library = System.getProperty("cuvmm.test.hostLibrary");
        Assumptions.assumeTrue(library != null && Files.exists(Path.of(library)),
                () -> "the host library is not built: cuvmm.test.hostLibrary=" + library);
        return ChildJvm.run(Main.class, List.of("-Dcuvmm.driver=cuda", "-Dcuvmm.cuda.library=" + library), env, command);
    }

    /**
     * demo over the host library labels its times as no GPU result (it said only "cuda driver
     * 13.0" before: an independent probe).
     */
    @Test
    void demoOverTheHostLibrarySaysItIsNoGpu() throws Exception {
        ChildJvm.Result r = overTheHostLibrary(Map.of(), "demo");
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("over cuvmm's host library (no GPU), device 0"), r.toString());
        assertTrue(r.output().contains("note: these ran on the cuda driver API over cuvmm's host library (no GPU): the "
                + "times are not GPU results."), r.toString());
    }

    @Test
    void demoGrowsInPlaceThenMovesVerifiesEveryByteAndLeavesNothingAlive() {
        Result r = cuvmm("demo");
        assertEquals(0, r.status(), r.out() + r.err());
        assertTrue(r.row("allocate 3 MiB").contains("at the hint; 3 MiB written, verified"), r.out());
        assertTrue(r.row("grow to 7 MiB").matches(".*GROWN_IN_PLACE .* 7 MiB +8 MiB +2 .*old 3 MiB intact, new 4 MiB "
                + "written, verified"), r.out());
        assertTrue(r.row("place a decoy after it").contains("the next range is taken"), r.out());
        assertTrue(r.row("grow to 12 MiB").matches(".*MOVED .* 12 MiB +12 MiB +3 .*old 7 MiB intact, new 5 MiB "
                + "written, verified"), r.out());
        assertTrue(r.row("write moved, read old").contains("SAME MEMORY"), r.out());
        assertTrue(r.row("close all").contains("no allocation, reservation or mapping left alive"), r.out());
        assertFalse(r.out().contains("FAILED"), r.out());
        assertFalse(r.out().contains("wanted"), "every outcome as forced:\n" + r.out());
        assertTrue(r.out().contains("result: OK"), r.out());
        if (Driver.get().kind() == DriverKind.HOST) {
            assertTrue(r.out().contains("not on a GPU: the times are not GPU results"), r.out());
        }
    }

    @Test
    void demoTwiceInOneProcessStillLeavesNothingAlive() {
        assertEquals(0, cuvmm("demo").status());
        Result again = cuvmm("demo");
        assertEquals(0, again.status(), again.out() + again.err());
    }

    @Test
    void unknownCommandIsAUsageErrorNamingTheCommands() {
        Result r = cuvmm("frobnicate");
        assertEquals(2, r.status());
        assertTrue(r.err().contains("unknown command 'frobnicate'"), r.err());
        assertTrue(r.err().contains("info, demo"), r.err());
    }

    @Test
    void noCommandPrintsHelpAndIsAUsageError() {
        Result r = cuvmm();
        assertEquals(2, r.status());
        assertTrue(r.out().startsWith("usage: cuvmm <command>"), r.out());
    }

    @Test
    void helpListsEveryCommand() {
        for (String spelling : new String[] {"help", "--help", "-h"}) {
            Result r = cuvmm(spelling);
            assertEquals(0, r.status());
            for (String c : Main.commands().keySet()) assertTrue(r.out().contains("  " + c + " "), r.out());
            // Every driver setting org.cuvmm.Driver reads, with its environment variable.
            for (String setting : new String[] {"cuvmm.driver / CUVMM_DRIVER", "cuvmm.host.devices / CUVMM_HOST_DEVICES",
                    "cuvmm.host.granularity / CUVMM_HOST_GRANULARITY", "cuvmm.cuda.library / CUVMM_CUDA_LIBRARY",
                    "cuvmm.host.streamDelayMicros / CUVMM_HOST_STREAM_DELAY_MICROS"}) {
                assertTrue(r.out().contains(setting), () -> setting + " missing from:\n" + r.out());
            }
            // The real rules (an independent probe found them missing): the host granularity's
            // lower bound (native select_driver), and serve's status after a signal (ServeStopTest).
            assertTrue(r.out().contains("a power of two,\n") && r.out().contains("at least 4096"), r.out());
            assertTrue(r.out().contains("serve, attach or demo stopped by Ctrl-C or SIGTERM: 130 or 143"), r.out());
            // Which status an unreachable server gets (a probe found "2 ... not available" read as it).
            assertTrue(r.out().contains("1 a failure while running") && r.out().contains("where no server listens")
                    && r.out().contains("2 a usage error"), r.out());
        }
    }

    /** As help says: a path where no server listens, or a file that is no socket, is a failure (1), not usage (2). */
    @Test
    void attachToNoServerIsAFailureNotAUsageError() throws Exception {
        java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("cuvmm-cli-nosock");
        try {
            java.nio.file.Path plain = java.nio.file.Files.writeString(dir.resolve("plain"), "x");
            for (java.nio.file.Path target : new java.nio.file.Path[] {dir.resolve("none.sock"), plain}) {
                Result r = cuvmm("attach", "--socket", target.toString(), "--name", "x");
                assertEquals(1, r.status(), target + ":\n" + r.err());
                assertTrue(r.err().contains(target.toString()), r.err());
            }
        } finally {
            try (java.util.stream.Stream<java.nio.file.Path> files = java.nio.file.Files.walk(dir)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }

    @Test
    void benchNeedsTheSourceTreeAndAKnownSuite() {
        String previous = System.getProperty("cuvmm.home");
        try {
            System.clearProperty("cuvmm.home");
            Result none = cuvmm("bench");
            assertEquals(2, none.status());
            assertTrue(none.err().contains("run through the ./cuvmm launcher"), none.err());
            System.setProperty("cuvmm.home", System.getProperty("java.io.tmpdir"));
            Result unknown = cuvmm("bench", "frob");
            assertEquals(2, unknown.status());
            assertTrue(unknown.err().contains("unknown suite 'frob'"), unknown.err());
            Result missing = cuvmm("bench", "core");
            assertEquals(2, missing.status());
            assertTrue(missing.err().contains("missing or not executable"), missing.err());
        } finally {
            if (previous == null) System.clearProperty("cuvmm.home");
            else System.setProperty("cuvmm.home", previous);
        }
    }

    @Test
    void serveAndAttachCheckTheirArguments() {
        Result noSocket = cuvmm("serve", "--name", "x", "--size", "1M");
        assertEquals(2, noSocket.status());
        assertTrue(noSocket.err().contains("--socket is required"), noSocket.err());
        Result badSize = cuvmm("serve", "--socket", "/tmp/x.sock", "--name", "x", "--size", "-3");
        assertEquals(2, badSize.status());
        assertTrue(badSize.err().contains("--size: -3"), badSize.err());
        Result verifyWithoutSeed = cuvmm("attach", "--socket", "/tmp/x.sock", "--name", "x", "--verify");
        assertEquals(2, verifyWithoutSeed.status());
        assertTrue(verifyWithoutSeed.err().contains("--verify needs --seed"), verifyWithoutSeed.err());
        Result unknown = cuvmm("attach", "--socket", "/tmp/x.sock", "--name", "x", "--frob");
        assertEquals(2, unknown.status());
        assertTrue(unknown.err().contains("unknown option '--frob'"), unknown.err());
        // Usage errors found by an independent probe, each refused before any connection
        // (exit 2, naming the option): an option given twice (the last silently won), a seed
        // that is no number (checked only after attaching), --seed without --verify (ignored),
        // a name or socket path outside the protocol's and the kernel's limits (exit 1 before,
        // the message named "name", not "--name").
        String[][] bad = {
            {"attach", "--socket", "/tmp/x.sock", "--name", "x", "--verify", "--seed", "3", "--seed", "4"},
            {"serve", "--socket", "/tmp/x.sock", "--name", "x", "--name", "y", "--size", "1M"},
            {"attach", "--socket", "/tmp/x.sock", "--name", "x", "--verify", "--verify", "--seed", "3"},
            {"attach", "--socket", "/tmp/x.sock", "--name", "x", "--verify", "--seed", "abc"},
            {"attach", "--socket", "/tmp/x.sock", "--name", "x", "--write-seed", "x"},
            {"attach", "--socket", "/tmp/x.sock", "--name", "x", "--seed", "3"},
            {"attach", "--socket", "/tmp/x.sock", "--name", ""},
            {"serve", "--socket", "/tmp/x.sock", "--name", "n".repeat(256), "--size", "1M"},
            {"attach", "--socket", "/tmp/" + "p".repeat(120), "--name", "x"},
            {"serve", "--socket", "", "--name", "x", "--size", "1M"},
        };
        String[] names = {"--seed is given twice ('3', then '4')", "--name is given twice", "--verify is given twice",
            "--seed: abc", "--write-seed: x", "--seed only matters with --verify",
            "--name: \"\" is 0 bytes", "--name: ", "--socket: ", "--socket: \"\" is 0 bytes"};
        // A size beyond the device's memory (every byte gets the pattern): refused before any
        // driver call, naming --size (it printed only the driver's CUDA_ERROR_OUT_OF_MEMORY),
        // and a usage error like any other bad --size (it was exit 1: an independent probe).
        Result huge = cuvmm("serve", "--socket", "/tmp/cuvmm-maintest-huge.sock", "--name", "x", "--size",
                "9223372036854775807");
        assertEquals(2, huge.status(), huge.out() + huge.err());
        assertTrue(huge.err().contains("--size: 9223372036854775807 bytes (expected: at most the device's memory"),
                huge.err());
        for (int i = 0; i < bad.length; i++) {
            Result r = cuvmm(bad[i]);
            assertEquals(2, r.status(), String.join(" ", bad[i]) + ": " + r.out() + r.err());
            assertTrue(r.err().contains(names[i]) && !r.out().contains("attached"), String.join(" ", bad[i]) + ": "
                    + r.err());
        }
    }

    @Test
    void demoSharesWithASecondProcessThatVerifiesAndWritesBack() {
        Result r = cuvmm("demo");
        assertEquals(0, r.status(), r.out() + r.err());
        assertTrue(r.row("serve 6 MiB on a socket").contains("3 chunks filled with pattern seed 7"), r.out());
        assertTrue(r.row("second JVM attaches").contains("it verified every byte and wrote pattern seed 9"), r.out());
        assertTrue(r.row("verify the other's write").contains("SAME MEMORY"), r.out());
    }

    @Test
    void unexpectedArgumentsAreUsageErrors() {
        assertEquals(2, cuvmm("info", "--verbose").status());
        assertEquals(2, cuvmm("demo", "extra").status());
        Result extra = cuvmm("help", "frob");
        assertEquals(2, extra.status(), "help with an argument that is no command (it used to be ignored)");
        assertTrue(extra.err().contains("unexpected argument(s) [frob]"), extra.err());
    }

    /** Each command's options, asked either way (found missing by an independent probe: --help was a usage error). */
    @Test
    void eachCommandPrintsItsOptions() {
        for (String c : new String[] {"info", "demo", "serve", "attach"}) {
            for (String[] ask : new String[][] {{c, "--help"}, {c, "-h"}, {"help", c}}) {
                Result r = cuvmm(ask);
                assertEquals(0, r.status(), String.join(" ", ask) + ": " + r.err());
                assertTrue(r.out().contains("cuvmm " + c + ": " + Main.commands().get(c).summary()), r.out());
            }
        }
        assertTrue(cuvmm("help", "serve").out().contains("--socket-mode 0600"));
        assertTrue(cuvmm("serve", "--help").out().contains("exits 130 or 143"));
        String previous = System.getProperty("cuvmm.home");
        try {
            System.setProperty("cuvmm.home", System.getProperty("java.io.tmpdir"));
            for (String ask : new String[] {"--help", "-h"}) {
                Result bench = cuvmm("bench", ask);
                assertEquals(0, bench.status(), bench.err());
                assertTrue(bench.out().contains("core|sharing-pool|sharing-v2|streams"), bench.out());
            }
        } finally {
            if (previous == null) System.clearProperty("cuvmm.home");
            else System.setProperty("cuvmm.home", previous);
        }
    }

    /**
     * A runner's usage error (exit 2) stays a usage error through {@code cuvmm bench}; it was
     * reported as a failure (1). A stand-in runner in a temporary tree exits 2.
     */
    @Test
    void benchPassesOnARunnersUsageError() throws Exception {
        String previous = System.getProperty("cuvmm.home");
        Path home = Files.createTempDirectory("cvmm-home");
        try {
            Files.createDirectories(home.resolve("bench"));
            for (String[] runner : new String[][] {{"run-streams", "2"}, {"run-sharing-v2", "0"}, {"run", "1"}}) {
                Path script = home.resolve("bench").resolve(runner[0]);
                Files.writeString(script, "#!/bin/sh\nexit " + runner[1] + "\n");
                script.toFile().setExecutable(true);
            }
            System.setProperty("cuvmm.home", home.toString());
            assertEquals(2, cuvmm("bench", "streams", "--bogus").status(), "the runner's usage error");
            assertEquals(0, cuvmm("bench", "sharing-v2").status(), "sharing-v2 is a suite");
            assertEquals(1, cuvmm("bench", "core").status(), "any other failure");
        } finally {
            if (previous == null) System.clearProperty("cuvmm.home");
            else System.setProperty("cuvmm.home", previous);
            try (var files = Files.walk(home)) {
                files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
        }
    }
}
