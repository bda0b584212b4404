package org.cuvmm.bench;

import java.io.PrintStream;
import java.util.function.Function;

/**
 * The command line of the report mains ({@link RatioReport}, {@code SharingPoolReport}), one
 * rule for both: {@code --help} or {@code -h} prints the usage on stdout and exits 0; an
 * unknown option or a bad value prints what is wrong and the usage on stderr and exits 2
 * (never a stack trace). A parser reports bad input by throwing
 * {@link IllegalArgumentException} ("name: value (expected: ...)").
 */
public final class CommandLine {
    /** Exit status for a bad command line (as getopt-based tools use). */
    public static final int USAGE_ERROR = 2;

    private CommandLine() {}

    /**
     * Parses {@code args}; returns the settings, or null after printing help ({@code out}) or
     * an error and the usage ({@code err}), with {@code exitStatus[0]} set to 0 or
     * {@link #USAGE_ERROR}.
     */
    public static <S> S parse(String[] args, Function<String[], S> parser, String usage, PrintStream out,
                              PrintStream err, int[] exitStatus) {
        for (String a : args) {
            if (a.equals("--help") || a.equals("-h")) {
                out.println(usage);
                exitStatus[0] = 0;
                return null;
            }
        }
        try {
            return parser.apply(args);
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
