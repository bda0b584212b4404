package org.cuvmm.bench;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The command-line options every report main takes: {@code --warmup N} (at least 0),
 * {@code --iterations N}, {@code --time-ms N} (at least 1), {@code --out FILE} and
 * {@code --help}/{@code -h}; a report adds its own in {@link #option}. One loop reads them
 * all, so every report refuses an unknown option, a missing value and a bad number the same
 * way, with the message {@link CommandLine} prints above the usage.
 */
public abstract class ReportOptions {
    /** Warm-up iterations (or segments) before the measured ones. */
    public int warmup;
    /** Measured iterations (or segments). */
    public int iterations;
    /** The length of one iteration (or segment), in milliseconds. */
    public long timeMs;
    /** Where the report is written. */
    public Path out;

    protected ReportOptions(int warmup, int iterations, long timeMs, Path out) {
        this.warmup = warmup;
        this.iterations = iterations;
        this.timeMs = timeMs;
        this.out = out;
    }

    /**
     * The report's own option at {@code args[i]}: reads it (and its value, if it takes one)
     * and returns the index of the last argument it used; -1 when {@code args[i]} is none of
     * its options.
     */
    protected abstract int option(String[] args, int i);

    /** Every option, for the message naming an unknown one: "--warmup N --iterations N ...". */
    protected abstract String expected();

    /**
     * Reads {@code args} into these options (the defaults stay where an option is not
     * given). Throws {@link IllegalArgumentException} naming the option and the value, or
     * {@link CommandLine#help()} for {@code --help} in option position.
     */
    public final void read(String[] args) {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--warmup" -> warmup = (int) CommandLine.number(args, ++i, a, 0);
                case "--iterations" -> iterations = (int) CommandLine.number(args, ++i, a, 1);
                case "--time-ms" -> timeMs = CommandLine.number(args, ++i, a, 1);
                case "--out" -> out = Path.of(CommandLine.value(args, ++i, a));
                case "--help", "-h" -> throw CommandLine.help();
                default -> {
                    int last = option(args, i);
                    if (last < i) throw new IllegalArgumentException("unknown option: " + a + " (expected: " + expected() + ")");
                    i = last;
                }
            }
        }
    }

    /**
     * The options of a report made of parts: also {@code --only PART,...} (the parts to run,
     * in the report's order whatever the order given; default all) and {@code --quiet} (no
     * JMH progress output).
     */
    public static class WithParts extends ReportOptions {
        /** Every part, in the report's order. */
        public final List<String> parts;
        /** The parts to run. */
        public List<String> only;
        /** No JMH progress output. */
        public boolean quiet;

        protected WithParts(int warmup, int iterations, long timeMs, Path out, List<String> parts) {
            super(warmup, iterations, timeMs, out);
            this.parts = List.copyOf(parts);
            this.only = this.parts;
        }

        @Override
        protected int option(String[] args, int i) {
            String a = args[i];
            switch (a) {
                case "--only" -> only = keys(args, ++i, a, parts);
                case "--quiet" -> quiet = true;
                default -> i = -1;
            }
            return i;
        }

        @Override
        protected String expected() {
            return "--warmup N --iterations N --time-ms N --only " + String.join(",", parts) + " --out FILE --quiet";
        }
    }

    /**
     * The value of {@code --only}-style option {@code name} at {@code args[i]}: its
     * comma-separated keys, each one of {@code known} (a key that is not, a typo say, would
     * otherwise select nothing and leave a silently empty report).
     */
    public static List<String> keys(String[] args, int i, String name, List<String> known) {
        List<String> keys = new ArrayList<>();
        for (String k : CommandLine.value(args, i, name).split(",")) {
            String key = k.trim();
            if (!known.contains(key)) {
                throw new IllegalArgumentException(name + ": " + key + " (expected: a comma-separated list of "
                        + String.join(", ", known) + ")");
            }
            keys.add(key);
        }
        return keys;
    }
}
