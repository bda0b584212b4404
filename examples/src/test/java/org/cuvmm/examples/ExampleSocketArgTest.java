package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The socket-path argument of the sharing examples, run as a user runs them (a child JVM): a
 * path too long for a Unix socket, or an option where the path goes, exits 2 with a message
 * naming SOCKET and the value, and no stack trace; {@code --help} and {@code -h} print the
 * usage and exit 0. An independent probe found a 120-byte path ending each of them in
 * IllegalArgumentException out of main (exit 1), and {@code --help} taken as a socket path.
 */
class ExampleSocketArgTest {
    private static final String LONG = "/tmp/" + "a".repeat(120) + ".sock";

    private static Class<?> example(String name) {
        return switch (name) {
            case "SharedProducer" -> SharedProducer.class;
            case "SharedConsumer" -> SharedConsumer.class;
            case "PooledProducer" -> PooledProducer.class;
            default -> PooledProducer.Consumer.class;
        };
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"SharedProducer", "SharedConsumer", "PooledProducer", "PooledProducer.Consumer"})
    void aSocketPathTooLongIsAUsageError(String name) throws Exception {
        ChildJvm.Result r = ChildJvm.run(example(name), List.of(), Map.of(), LONG);
        assertEquals(2, r.exitCode(), r.toString());
        assertTrue(r.output().contains("SOCKET: '" + LONG + "' is " + LONG.length() + " bytes"), r.toString());
        assertTrue(r.output().contains("use a shorter path"), r.toString());
        assertTrue(r.output().contains("usage: "), r.toString());
        assertFalse(r.output().contains("Exception"), r.toString());
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"SharedProducer", "SharedConsumer", "PooledProducer", "PooledProducer.Consumer"})
    void anOptionWhereThePathGoesIsAUsageError(String name) throws Exception {
        ChildJvm.Result r = ChildJvm.run(example(name), List.of(), Map.of(), "--socket");
        assertEquals(2, r.exitCode(), r.toString());
        assertTrue(r.output().contains("SOCKET: '--socket' (expected: the path of a socket file, not an option"),
                r.toString());
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"SharedProducer", "SharedConsumer", "PooledProducer", "PooledProducer.Consumer"})
    void helpPrintsTheUsage(String name) throws Exception {
        for (String help : List.of("--help", "-h")) {
            ChildJvm.Result r = ChildJvm.run(example(name), List.of(), Map.of(), help);
            assertEquals(0, r.exitCode(), help + ": " + r);
            assertTrue(r.output().startsWith("usage: "), help + ": " + r);
        }
    }
}
