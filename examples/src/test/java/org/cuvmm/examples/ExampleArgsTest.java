package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;

import org.junit.jupiter.api.Test;

/**
 * The examples' numbers: absent gives the default, a good one is taken, and a bad one (not a
 * number, below the minimum) is refused naming the argument, the value and the range; the
 * examples then exit with status 2 instead of a stack trace (found by an independent probe:
 * {@code Integer.parseInt} on a bad value ended them with NumberFormatException).
 */
class ExampleArgsTest {
    @Test
    void absentGoodAndBadNumbers() {
        String[] args = {"/tmp/s.sock", "3", "x", "0", " 7"};
        assertEquals(5, ExampleArgs.wholeNumber(args, 9, "ROUNDS", 5, 1), "absent: the default");
        assertEquals(3, ExampleArgs.wholeNumber(args, 1, "ROUNDS", 5, 1));
        assertEquals(7, ExampleArgs.wholeNumber(args, 4, "ROUNDS", 5, 1), "surrounding spaces are ignored");
        assertEquals(0, ExampleArgs.wholeNumber(args, 3, "CONSUMERS", 1, 0), "0 where 0 is allowed");
        IllegalArgumentException notANumber = assertThrows(IllegalArgumentException.class,
                () -> ExampleArgs.wholeNumber(args, 2, "CONSUMERS", 1, 1));
        assertEquals("CONSUMERS: 'x' (expected: a whole number >= 1)", notANumber.getMessage());
        IllegalArgumentException tooSmall = assertThrows(IllegalArgumentException.class,
                () -> ExampleArgs.wholeNumber(args, 3, "ROUNDS", 5, 1));
        assertEquals("ROUNDS: '0' (expected: a whole number >= 1)", tooSmall.getMessage());
    }

    /**
     * The socket path: absent gives the default; an option where the path goes, or a path
     * over 107 bytes once absolute, is refused naming SOCKET and the value (the path used to
     * reach the bind, which threw IllegalArgumentException out of main).
     */
    @Test
    void socketPaths() {
        Path fallback = Path.of("/tmp/d.sock");
        assertEquals(fallback, ExampleArgs.socketPath(new String[0], 0, fallback), "absent: the default");
        String longest = "/tmp/" + "a".repeat(97) + ".sock"; // 107 bytes
        assertEquals(Path.of(longest), ExampleArgs.socketPath(new String[] {longest}, 0, fallback));
        String tooLong = "/tmp/" + "a".repeat(98) + ".sock";
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ExampleArgs.socketPath(tooLong));
        assertEquals("SOCKET: '" + tooLong + "' is 108 bytes as an absolute path (expected: at most 107, the limit "
                + "of a Unix socket path; use a shorter path, such as one directly under /tmp)", e.getMessage());
        IllegalArgumentException relative = assertThrows(IllegalArgumentException.class,
                () -> ExampleArgs.socketPath("a".repeat(107)), "relative: counted as the server binds it, absolute");
        assertTrue(relative.getMessage().contains("bytes as an absolute path"), relative.getMessage());
        IllegalArgumentException option = assertThrows(IllegalArgumentException.class,
                () -> ExampleArgs.socketPath("--hlod"));
        assertEquals("SOCKET: '--hlod' (expected: the path of a socket file, not an option; --help shows the usage)",
                option.getMessage());
        assertThrows(IllegalArgumentException.class, () -> ExampleArgs.socketPath(""));
        // A single dash too: a producer bound a file named "-v" (a review).
        assertThrows(IllegalArgumentException.class, () -> ExampleArgs.socketPath("-v"));
        assertTrue(ExampleArgs.wantsHelp(new String[] {"/tmp/s.sock", "-h"}));
        assertTrue(ExampleArgs.wantsHelp(new String[] {"--help"}));
        assertFalse(ExampleArgs.wantsHelp(new String[] {"/tmp/s.sock", "--hold"}));
    }
}
