package org.cuvmm.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.function.Function;

import org.junit.jupiter.api.Test;

/**
 * bench/run and bench/run-sharing-pool: {@code --help} prints the usage and exits 0; an
 * unknown option or a bad value prints what is wrong and the usage and exits 2; never a
 * stack trace (issue 8 tidy: {@code run-sharing-pool --help} threw).
 */
public class CommandLineTest {
    private record Run(Object settings, int status, String out, String err) {}

    private static Run run(Function<String[], ?> parser, String usage, String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int[] status = {-1};
        Object s = CommandLine.parse(args, parser::apply, usage, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), status);
        return new Run(s, status[0], out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    /** Checks help, bad options and a good command line against a report's parser and usage. */
    public static void checkMain(Function<String[], ?> parser, String usage, String goodOption) {
        for (String help : new String[] {"--help", "-h"}) {
            Run r = run(parser, usage, goodOption, "1", help);
            assertNull(r.settings(), help);
            assertEquals(0, r.status(), help);
            assertEquals(usage + System.lineSeparator(), r.out(), help);
            assertEquals("", r.err(), help);
        }
        // --help as an option's value is that value, not a request for help (getopt's rule).
        for (String help : new String[] {"--help", "-h"}) {
            Run r = run(parser, usage, goodOption, help);
            assertNull(r.settings(), goodOption + " " + help);
            assertEquals(CommandLine.USAGE_ERROR, r.status(), goodOption + " " + help + ": a bad number, not help");
            assertEquals("", r.out(), goodOption + " " + help);
            assertTrue(r.err().contains(goodOption + ": " + help + " (expected: "), r.err());
            Run out = run(parser, usage, "--out", help);
            assertNotNull(out.settings(), "--out " + help + ": a file named " + help);
            assertEquals(-1, out.status(), "--out " + help);
        }
        String[][] bad = {{"--bogus"}, {goodOption}, {goodOption, "many"}, {goodOption, "-3"}};
        for (String[] args : bad) {
            Run r = run(parser, usage, args);
            String what = String.join(" ", args);
            assertNull(r.settings(), what);
            assertEquals(CommandLine.USAGE_ERROR, r.status(), what);
            assertEquals("", r.out(), what);
            assertTrue(r.err().contains(args[0]), what + ": the message names the option: " + r.err());
            assertTrue(r.err().contains("(expected: "), what + ": " + r.err());
            assertTrue(r.err().endsWith(usage + System.lineSeparator()), what + ": " + r.err());
            assertFalse(r.err().contains("Exception") || r.err().contains("\tat "), what + ": no stack trace: " + r.err());
        }
        Run ok = run(parser, usage, goodOption, "2");
        assertNotNull(ok.settings());
        assertEquals(-1, ok.status(), "no exit for a good command line");
    }

    @Test
    void ratioReport() {
        checkMain(RatioReport::parse, RatioReport.USAGE, "--iterations");
        checkMain(RatioReport::parse, RatioReport.USAGE, "--forks");
    }

    @Test
    void ratioReportOnlyTakesTheKnownOperations() {
        assertEquals(List.of(RatioReport.Operation.GROW_IN_PLACE, RatioReport.Operation.ALLOC_2MIB),
                RatioReport.parse(new String[] {"--only", "grow,alloc2"}).operations);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RatioReport.parse(new String[] {"--only", "alloc2,shrink"}));
        assertTrue(e.getMessage().startsWith("--only: shrink (expected: a comma-separated list of alloc2, "),
                e.getMessage());
    }
}
