package org.cuvmm.bench.sharing;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import org.cuvmm.bench.CommandLineTest;
import org.junit.jupiter.api.Test;

/** bench/run-sharing-v2's command line: the rules of {@link CommandLineTest}; the message sizes it pits against. */
class SharingV2ReportCommandLineTest {
    @Test
    void helpBadOptionsAndAGoodCommandLine() {
        CommandLineTest.checkMain(SharingV2Report::parse, SharingV2Report.USAGE, "--iterations");
        CommandLineTest.checkMain(SharingV2Report::parse, SharingV2Report.USAGE, "--count-rounds");
    }

    @Test
    void messageSizesAreTheFramesOfOneRound() {
        // ATTACH: header + u16 + name; DESCRIPTOR: header + 24 + 8 (v1) or 20 (v2) per chunk; RELEASE, RELEASED: header + u64.
        assertArrayEquals(new int[] {23, 48, 24, 24}, SharingV2Report.messageSizes("frame", 1, 1));
        assertArrayEquals(new int[] {23, 100, 24, 24}, SharingV2Report.messageSizes("three", 2, 3));
    }
}
