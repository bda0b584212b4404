package org.cuvmm.bench.sharing;

import org.cuvmm.bench.CommandLineTest;
import org.junit.jupiter.api.Test;

/** bench/run-sharing-pool's command line: the rules of {@link CommandLineTest}. */
class SharingPoolReportCommandLineTest {
    @Test
    void helpBadOptionsAndAGoodCommandLine() {
        CommandLineTest.checkMain(SharingPoolReport::parse, SharingPoolReport.USAGE, "--iterations");
    }
}
