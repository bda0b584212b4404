package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

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
}
