package org.cuvmm.bench.sharing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.cuvmm.bench.CommandLineTest;
import org.junit.jupiter.api.Test;

/** bench/run-sharing-pool's command line: the rules of {@link CommandLineTest}, and its --only keys. */
class SharingPoolReportCommandLineTest {
    @Test
    void helpBadOptionsAndAGoodCommandLine() {
        CommandLineTest.checkMain(SharingPoolReport::parse, SharingPoolReport.USAGE, "--iterations");
    }

    /** A key that is none of the parts (a typo) is refused: it used to select nothing, an empty report. */
    @Test
    void onlyTakesTheKnownKeys() {
        assertEquals(List.of("pool", "trim"), SharingPoolReport.parse(new String[] {"--only", "pool, trim"}).only);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SharingPoolReport.parse(new String[] {"--only", "transprot"}));
        assertTrue(e.getMessage().startsWith("--only: transprot (expected: a comma-separated list of transport, pool, "),
                e.getMessage());
    }
}
