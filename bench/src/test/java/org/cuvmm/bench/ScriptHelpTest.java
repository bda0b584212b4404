package org.cuvmm.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * bench/run, bench/run-sharing-pool, bench/run-streams and bench/run-sharing-v2 answer {@code --help} / {@code -h} before their build
 * step: each script is copied into an empty tree (no jar, so it would build) with a fake
 * {@code mvn} first on the PATH that records being called. Help must print the usage, exit 0
 * and never call it; {@code --out --help} (a value, not help) goes on to the build.
 */
class ScriptHelpTest {
    private record Result(int status, String out) {}

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"run", "run-sharing-pool", "run-streams", "run-sharing-v2"})
    void helpComesBeforeTheBuild(String script) throws Exception {
        Path tmp = Files.createTempDirectory("cuvmm-script-help");
        try {
            Path bench = Files.createDirectories(tmp.resolve("bench"));
            Files.copy(Path.of(script), bench.resolve(script));
            Path bin = Files.createDirectories(tmp.resolve("bin"));
            Path called = tmp.resolve("mvn-called");
            Path mvn = bin.resolve("mvn");
            Files.writeString(mvn, "#!/bin/sh\necho \"$@\" >> '" + called + "'\nexit 3\n");
            Files.setPosixFilePermissions(mvn, PosixFilePermissions.fromString("rwxr-xr-x"));

            for (String help : new String[] {"--help", "-h"}) {
                for (List<String> args : List.of(List.of(help), List.of("--quiet", help), List.of("--only", "x", help))) {
                    Result r = run(bench.resolve(script), bin, args);
                    assertEquals(0, r.status(), script + " " + args + ":\n" + r.out());
                    assertTrue(r.out().contains("Options:"), script + " " + args + " prints the usage:\n" + r.out());
                    assertFalse(Files.exists(called), script + " " + args + " built before printing the usage:\n"
                            + r.out());
                }
            }
            Result asValue = run(bench.resolve(script), bin, List.of("--out", "--help"));
            assertTrue(Files.exists(called), script + " --out --help: a file name, so the script goes on to build:\n"
                    + asValue.out());
            assertEquals(3, asValue.status(), "the fake mvn's status: " + asValue.out());
        } finally {
            try (Stream<Path> s = Files.walk(tmp)) {
                s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            }
        }
    }

    private static Result run(Path script, Path bin, List<String> args) throws IOException, InterruptedException {
        List<String> cmd = new java.util.ArrayList<>(List.of("bash", script.toString()));
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().put("PATH", bin + ":" + System.getenv("PATH"));
        Process p = pb.start();
        byte[] out = p.getInputStream().readAllBytes();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), "the script ended");
        return new Result(p.exitValue(), new String(out, StandardCharsets.UTF_8));
    }
}
