package org.cuvmm.cli;

import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * {@code --key value} options and {@code --flag} switches of one subcommand, checked
 * against what the command accepts. Errors are {@link IllegalArgumentException}s whose
 * message is ready to print after the command's name.
 */
final class Arguments {
    private final Map<String, String> values = new HashMap<>();
    private final Set<String> flags = new HashSet<>();

    private Arguments() {}

    /**
     * @param valued options that take a value (without the leading dashes)
     * @param switches options that take none
     */
    static Arguments parse(List<String> args, Set<String> valued, Set<String> switches) {
        Arguments a = new Arguments();
        for (int i = 0; i < args.size(); i++) {
            String arg = args.get(i);
            if (!arg.startsWith("--")) throw new IllegalArgumentException("unexpected argument '" + arg + "'");
            String key = arg.substring(2);
            if (switches.contains(key)) {
                if (!a.flags.add(key)) throw new IllegalArgumentException("--" + key + " is given twice (give it once)");
            } else if (valued.contains(key)) {
                if (i + 1 >= args.size()) throw new IllegalArgumentException("--" + key + " needs a value");
                String earlier = a.values.put(key, args.get(++i));
                if (earlier != null) {
                    // The last one silently winning hid typos ("--seed 3 ... --seed 4" verified seed 4).
                    throw new IllegalArgumentException("--" + key + " is given twice ('" + earlier + "', then '"
                            + args.get(i) + "'): give it once");
                }
            } else {
                throw new IllegalArgumentException("unknown option '" + arg + "' (expected: "
                        + String.join(", ", valued.stream().map(k -> "--" + k + " VALUE").toList())
                        + (switches.isEmpty() ? "" : ", " + String.join(", ", switches.stream().map(k -> "--" + k).toList()))
                        + ")");
            }
        }
        return a;
    }

    String required(String key) {
        String v = values.get(key);
        if (v == null) throw new IllegalArgumentException("--" + key + " is required");
        return v;
    }

    boolean has(String key) { return values.containsKey(key) || flags.contains(key); }

    long longValue(String key, long fallback) {
        String v = values.get(key);
        if (v == null) return fallback;
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + key + ": " + v + " (expected: a whole number)");
        }
    }

    /** A whole number of at least {@code min}, or {@code fallback} when the option is absent. */
    int intValue(String key, int fallback, int min) {
        String v = values.get(key);
        if (v == null) return fallback;
        try {
            int n = Integer.parseInt(v.trim());
            if (n < min) throw new NumberFormatException();
            return n;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + key + ": " + v + " (expected: a whole number >= " + min + ")");
        }
    }

    /** Whole seconds, 0 or more, or {@code fallback} when the option is absent. */
    java.time.Duration seconds(String key, java.time.Duration fallback) {
        String v = values.get(key);
        if (v == null) return fallback;
        try {
            long n = Long.parseLong(v.trim());
            if (n < 0 || n > 1_000_000_000L) throw new NumberFormatException();
            return java.time.Duration.ofSeconds(n);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + key + ": " + v + " (expected: whole seconds, 0 to 1000000000; "
                    + "0 means no timeout)");
        }
    }

    /** A file mode in octal such as 0660, or {@code fallback} when the option is absent. */
    int octalMode(String key, int fallback) {
        String v = values.get(key);
        if (v == null) return fallback;
        try {
            int n = Integer.parseInt(v.trim(), 8);
            if (n < 0 || n > 07777) throw new NumberFormatException();
            return n;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + key + ": " + v + " (expected: an octal file mode such as 0600 "
                    + "or 0660)");
        }
    }

    /** The value, or null when the option is absent. */
    String optional(String key) { return values.get(key); }

    /** A buffer name of the sharing protocol: 1 to 255 bytes of UTF-8 (checked here, before any connection). */
    String bufferName(String key) {
        return withinBytes(key, org.cuvmm.ipc.Protocol.MAX_NAME_BYTES, "bytes of UTF-8, the protocol's limit on a buffer name");
    }

    /** A Unix socket path: 1 to 107 bytes (checked here, before any connection or bind). */
    java.nio.file.Path socketPath(String key) {
        return java.nio.file.Path.of(withinBytes(key, MAX_SOCKET_PATH_BYTES, "bytes, the limit of a Unix socket path"));
    }

    /**
     * A Unix socket path to bind: {@link #socketPath}, and 1 to 107 bytes once made absolute,
     * as the server binds it (a relative path under a deep working directory passed the first
     * check and was refused only at the bind, exit 1, naming "path").
     */
    java.nio.file.Path socketPathToBind(String key) {
        java.nio.file.Path path = socketPath(key);
        String absolute = path.toAbsolutePath().normalize().toString();
        int bytes = absolute.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        if (bytes > MAX_SOCKET_PATH_BYTES) {
            String shown = absolute.length() > 64 ? absolute.substring(0, 64) + "..." : absolute;
            throw new IllegalArgumentException("--" + key + ": \"" + path + "\" is " + bytes + " bytes as an absolute "
                    + "path, " + shown + " (expected: 1 to " + MAX_SOCKET_PATH_BYTES + " bytes, the limit of a Unix "
                    + "socket path; use a shorter one)");
        }
        return path;
    }

    /** The required value of {@code key}, refused unless it is 1 to {@code max} bytes of UTF-8 ({@code what} says whose limit). */
    private String withinBytes(String key, int max, String what) {
        String v = required(key);
        int bytes = v.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        if (bytes < 1 || bytes > max) {
            String shown = v.length() > 64 ? v.substring(0, 64) + "..." : v;
            throw new IllegalArgumentException("--" + key + ": \"" + shown + "\" is " + bytes + " bytes (expected: 1 to "
                    + max + " " + what + (bytes == 0 ? "" : "; use a shorter one") + ")");
        }
        return v;
    }

    /** sun_path holds 108 bytes with its terminating NUL. */
    private static final int MAX_SOCKET_PATH_BYTES = 107;

    /** A size in bytes, with an optional K/M/G suffix (powers of 1024). */
    long bytes(String key) {
        String v = required(key).trim().toUpperCase(java.util.Locale.ROOT);
        long unit = 1;
        if (v.endsWith("K") || v.endsWith("M") || v.endsWith("G")) {
            unit = v.endsWith("K") ? 1L << 10 : v.endsWith("M") ? 1L << 20 : 1L << 30;
            v = v.substring(0, v.length() - 1);
        }
        try {
            long n = Long.parseLong(v);
            if (n <= 0 || n > Long.MAX_VALUE / unit) throw new NumberFormatException();
            return n * unit;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + key + ": " + values.get(key)
                    + " (expected: a positive size in bytes, optionally with K, M or G)");
        }
    }
}
