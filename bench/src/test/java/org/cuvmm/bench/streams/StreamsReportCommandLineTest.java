package org.cuvmm.bench.streams;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.cuvmm.bench.CommandLineTest;
import org.junit.jupiter.api.Test;

/** bench/run-streams' command line: the rules of {@link CommandLineTest}, and its --only keys. */
class StreamsReportCommandLineTest {
    @Test
    void helpBadOptionsAndAGoodCommandLine() {
        CommandLineTest.checkMain(StreamsReport::parse, StreamsReport.USAGE, "--iterations");
    }

    @Test
    void onlyTakesTheKnownKeys() {
        assertEquals(List.of("overlap", "gc"), StreamsReport.parse(new String[] {"--only", "overlap,gc"}).only);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> StreamsReport.parse(new String[] {"--only", "copy,pool"}));
        assertTrue(e.getMessage().startsWith("--only: pool (expected: "), e.getMessage());
    }
}
