package org.cuvmm.bench.sharing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * bench/run-sharing-v2's interleaved measurement: the C++ ping-pong as a child process timed
 * one segment at a time, the Java socket ping-pong in segments, and the paired ratio.
 */
class InterleavedBaselineTest {
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void theCppPingPongTimesOneSegmentPerRequestAndEndsWithItsInput() throws Exception {
        PingPongProcess.Segment a, b;
        try (PingPongProcess p = PingPongProcess.start(SharingPoolReport.binary("cuvmm-transport-baseline"),
                new int[] {23, 60, 24, 24}, 20, null)) {
            a = p.segment();
            b = p.segment();
        } // close: its stdin ends, it must exit 0 (close throws otherwise)
        for (PingPongProcess.Segment s : List.of(a, b)) {
            assertTrue(s.rounds() > 0 && s.nsPerRound() > 0, s.toString());
            // A segment of 20 ms: its rounds take about that long (generous: a loaded machine).
            assertTrue(s.rounds() * s.nsPerRound() >= 20e6 && s.rounds() * s.nsPerRound() < 2e9, s.toString());
            assertTrue(s.cpuNs() >= 0 && s.switches() >= 0, s.toString());
        }
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void aPingPongThatRefusesItsArgumentsIsReportedWithWhatItPrinted() throws Exception {
        // One size: the binary refuses an odd count and exits 2 before its "ready" line.
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> PingPongProcess.start(
                SharingPoolReport.binary("cuvmm-transport-baseline"), new int[] {23}, 20, null));
        assertTrue(e.getMessage().contains("an even number of sizes"), e.getMessage());
        assertTrue(e.getMessage().contains("exit 2"), e.getMessage());
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void theJavaSocketPingPongTimesSegmentsUntilClosed() throws Exception {
        try (SocketPingPong p = SocketPingPong.open(new int[] {23, 60}, -1)) {
            double first = p.segment(20);
            double second = p.segment(20);
            assertTrue(first > 0 && second > 0, first + ", " + second);
        }
    }

    @Test
    void thePairedRatioDividesEachJavaSegmentByItsOwnCppSegment() {
        assertEquals(List.of(2.0, 2.0, 3.0), SharingV2Report.pairedRatios(List.of(2.0, 4.0, 9.0), List.of(1.0, 2.0, 3.0)));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SharingV2Report.pairedRatios(List.of(1.0, 2.0), List.of(1.0)));
        assertTrue(e.getMessage().contains("2 Java, 1 C++"), e.getMessage());
        List<Double> eight = List.of(8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0);
        assertEquals(3.0, SharingV2Report.quantile(eight, 0.25));
        assertEquals(7.0, SharingV2Report.quantile(eight, 0.75));
    }
}
