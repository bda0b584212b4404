package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.junit.jupiter.api.Test;

/** Proves the example works as published: it succeeds, says what it did, and leaves nothing behind. */
class FirstBufferTest {

    @Test
    void runsVerifiesAndReleasesEverything() {
        DriverCounters c = Driver.get().counters();
        long[] before = {c.liveAllocations(), c.liveReservations(), c.liveMappings(), c.hostAllocations(),
                c.hostMappings(), c.hostMemfds()};

        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        boolean ok;
        try (PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8)) {
            ok = FirstBuffer.run(out);
        }
        String output = bytes.toString(StandardCharsets.UTF_8);

        assertTrue(ok, output);
        assertTrue(output.startsWith("driver: " + Driver.get().kind()), output);
        assertTrue(output.contains("allocated 1048576 bytes at 0x"), output);
        assertTrue(output.matches("(?s).*grew to 6291456 bytes: (GROWN_IN_PLACE|MOVED), at 0x.*"), output);
        assertTrue(output.contains("first 1 MiB intact after the grow: true"), output);
        assertTrue(output.contains("new part written and read back: true"), output);
        assertTrue(output.endsWith("OK\n"), output);

        long[] after = {c.liveAllocations(), c.liveReservations(), c.liveMappings(), c.hostAllocations(),
                c.hostMappings(), c.hostMemfds()};
        assertArrayEquals(before, after, "try-with-resources released every chunk, reservation and mapping");
    }
}
