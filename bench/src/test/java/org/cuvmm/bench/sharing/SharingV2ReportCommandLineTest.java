package org.cuvmm.bench.sharing;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicReference;

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

    @Test
    void placementIsParsedAndABadOneNamed() {
        assertEquals(ThreadPlacement.Mode.CROSS, SharingV2Report.parse(new String[0]).placement);
        assertEquals(ThreadPlacement.Mode.SAME, SharingV2Report.parse(new String[] {"--placement", "same"}).placement);
        assertEquals(ThreadPlacement.Mode.UNPINNED, SharingV2Report.parse(new String[] {"--placement", "UNPINNED"}).placement);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SharingV2Report.parse(new String[] {"--placement", "both"}));
        assertTrue(e.getMessage().contains("--placement: both (expected: unpinned, cross or same)"), e.getMessage());
    }

    /** A thread pinned by {@link ThreadPlacement} is allowed on that CPU only (read back from /proc). */
    @Test
    void pinningAThreadLeavesItOneAllowedCpu() throws Exception {
        AtomicReference<Object> seen = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                ThreadPlacement.pinCurrentThread(0);
                seen.set(Files.readAllLines(Path.of("/proc/thread-self/status")).stream()
                        .filter(l -> l.startsWith("Cpus_allowed_list:")).findFirst().orElse("none"));
            } catch (Throwable x) {
                seen.set(x);
            }
        });
        t.start();
        t.join(10_000);
        assertEquals("Cpus_allowed_list:\t0", seen.get());
    }
}
