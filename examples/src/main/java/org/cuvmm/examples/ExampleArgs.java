package org.cuvmm.examples;

/**
 * The examples' numeric command-line arguments: a bad one is refused with a message that
 * names it, the value and what is expected, and the example exits with status 2 instead of
 * ending in a stack trace (found by an independent probe).
 */
final class ExampleArgs {
    private ExampleArgs() {}

    /**
     * {@code args[index]} as a whole number of at least {@code min}, or {@code fallback} when
     * the argument is absent.
     *
     * @throws IllegalArgumentException naming {@code name}, the value and the expected range
     */
    static int wholeNumber(String[] args, int index, String name, int fallback, int min) {
        if (args.length <= index) return fallback;
        String text = args[index];
        try {
            int value = Integer.parseInt(text.trim());
            if (value >= min) return value;
        } catch (NumberFormatException notANumber) {
            // refused below
        }
        throw new IllegalArgumentException(name + ": '" + text + "' (expected: a whole number >= " + min + ")");
    }

    /** Prints {@code why} and {@code usage} to standard error and exits with status 2 (a usage error). */
    static void exitWithUsage(String program, IllegalArgumentException why, String usage) {
        System.err.println(program + ": " + why.getMessage());
        System.err.println("usage: " + usage);
        System.exit(2);
    }
}
