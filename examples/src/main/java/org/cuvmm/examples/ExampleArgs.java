package org.cuvmm.examples;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/**
 * The examples' command-line arguments (a socket path, numbers): a bad one is refused with a
 * message that names it, the value and what is expected, and the example exits with status 2
 * instead of ending in a stack trace (found by an independent probe). {@code --help} or
 * {@code -h} prints the usage and exits with status 0.
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

    /** The longest Unix socket path: {@code sun_path} holds 108 bytes with its terminating NUL. */
    static final int MAX_SOCKET_PATH_BYTES = 107;

    /** Whether {@code --help} or {@code -h} is among the arguments. */
    static boolean wantsHelp(String[] args) {
        for (String a : args) {
            if (a.equals("--help") || a.equals("-h")) return true;
        }
        return false;
    }

    /**
     * {@code args[index]} as a socket path ({@link #socketPath(String)}), or {@code fallback}
     * when the argument is absent.
     */
    static Path socketPath(String[] args, int index, Path fallback) {
        return args.length <= index ? fallback : socketPath(args[index]);
    }

    /**
     * {@code text} as a Unix socket path: not an option ({@code --...}), and 1 to 107 bytes
     * once made absolute (the server binds the absolute path; a longer one cannot be bound).
     *
     * @throws IllegalArgumentException naming SOCKET, the value and what to do
     */
    static Path socketPath(String text) {
        if (text.startsWith("-") || text.isEmpty()) { // "-v" too: a producer would bind a file of that name
            throw new IllegalArgumentException("SOCKET: '" + text + "' (expected: the path of a socket file, not an "
                    + "option; --help shows the usage)");
        }
        Path path = Path.of(text);
        int bytes = path.toAbsolutePath().normalize().toString().getBytes(StandardCharsets.UTF_8).length;
        if (bytes > MAX_SOCKET_PATH_BYTES) {
            throw new IllegalArgumentException("SOCKET: '" + text + "' is " + bytes + " bytes as an absolute path "
                    + "(expected: at most " + MAX_SOCKET_PATH_BYTES + ", the limit of a Unix socket path; use a shorter "
                    + "path, such as one directly under /tmp)");
        }
        return path;
    }

    /** Prints {@code usage} to standard output (for {@code --help}); the example then exits with status 0. */
    static void printUsage(String usage) {
        System.out.println("usage: " + usage);
    }

    /** Prints {@code why} and {@code usage} to standard error and exits with status 2 (a usage error). */
    static void exitWithUsage(String program, IllegalArgumentException why, String usage) {
        System.err.println(program + ": " + why.getMessage());
        System.err.println("usage: " + usage);
        System.exit(2);
    }
}
