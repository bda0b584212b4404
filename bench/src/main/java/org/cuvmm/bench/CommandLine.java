package org.cuvmm.bench;

import java.io.PrintStream;
import java.util.function.Function;

/**
 * The command line of the report mains ({@link RatioReport}, {@code SharingPoolReport}), one
 * rule for both: {@code --help} or {@code -h} in option position prints the usage on stdout
 * and exits 0; an unknown option or a bad value prints what is wrong and the usage on stderr
 * and exits 2 (never a stack trace). A parser reports bad input by throwing
 * {@link IllegalArgumentException} ("name: value (expected: ...)"), and a request for help,
 * met where it expects an option, by throwing {@link #help()}. Only the parser knows which
 * options take a value, so only it can tell {@code --help} the option from {@code --help} the
 * value of one ({@code --out --help} writes to a file named {@code --help}, as with getopt).
 */
public final class CommandLine {
    /** Exit status for a bad command line (as getopt-based tools use). */
    public static final int USAGE_ERROR = 2;

    private CommandLine() {}

    /** Thrown by a parser that met {@code --help} or {@code -h} in option position. */
    public static final class HelpRequested extends RuntimeException {
        private static final long serialVersionUID = 1L;

        private HelpRequested() {
            super("--help", null, false, false); // control flow, not an error: no stack trace
        }
    }

    /** For a parser's {@code case "--help", "-h"}: {@code throw CommandLine.help();}. */
    public static HelpRequested help() { return new HelpRequested(); }

    /**
     * Parses {@code args}; returns the settings, or null after printing help ({@code out}) or
     * an error and the usage ({@code err}), with {@code exitStatus[0]} set to 0 or
     * {@link #USAGE_ERROR}.
     */
    public static <S> S parse(String[] args, Function<String[], S> parser, String usage, PrintStream out,
                              PrintStream err, int[] exitStatus) {
        try {
            return parser.apply(args);
        } catch (HelpRequested e) {
            out.println(usage);
            exitStatus[0] = 0;
            return null;
        } catch (IllegalArgumentException e) {
            err.println(e.getMessage());
            err.println(usage);
            exitStatus[0] = USAGE_ERROR;
            return null;
        }
    }

    /** For a main: the settings, or (after printing, as {@link #parse}) exits the JVM. */
    public static <S> S parseOrExit(String[] args, Function<String[], S> parser, String usage) {
        int[] status = new int[1];
        S s = parse(args, parser, usage, System.out, System.err, status);
        if (s == null) System.exit(status[0]);
        return s;
    }

    /** The value after option {@code name} at {@code args[i]}. */
    public static String value(String[] args, int i, String name) {
        if (i >= args.length) throw new IllegalArgumentException(name + ": missing value (expected: a value after it)");
        return args[i];
    }

    /** The whole number after option {@code name}, at least {@code min}. */
    public static long number(String[] args, int i, String name, long min) {
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
