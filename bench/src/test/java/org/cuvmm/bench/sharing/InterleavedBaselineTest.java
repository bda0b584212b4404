package org.cuvmm.bench.sharing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
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
    void theCppPingPongTimesOneSegmentPerRequestAndWaitsWithoutCpuBetween() throws Exception {
        PingPongProcess.Segment a, b;
        Duration idleCpu;
        ProcessHandle child;
        try (PingPongProcess p = PingPongProcess.start(SharingPoolReport.binary("cuvmm-transport-baseline"),
                new int[] {23, 60, 24, 24}, 20, null)) {
            child = p.handle();
            a = p.segment();
            Duration before = child.info().totalCpuDuration().orElseThrow();
            Thread.sleep(300); // between segments: both its threads wait (stdin, the socket)
            idleCpu = child.info().totalCpuDuration().orElseThrow().minus(before);
            b = p.segment();
        } // close: its stdin ends, it must exit 0 (close throws otherwise)
        assertTrue(!child.isAlive(), "the ping-pong still runs after close()");
        // A busy wait would have used about 300 ms; the kernel's accounting has 10 ms ticks.
        assertTrue(idleCpu.toMillis() < 30, "CPU used between segments: " + idleCpu);
        for (PingPongProcess.Segment s : List.of(a, b)) {
            assertTrue(s.rounds() > 0 && s.nsPerRound() > 0, s.toString());
            // Its CPU is its own over the segment: at most two threads' worth of a 20 ms segment, plus ticks.
            assertTrue(s.cpuNs() < 2 * s.rounds() * s.nsPerRound() + 20e6, s.toString());
        }
    }

    @Test
    void sideCpuCountsOnlyBetweenResumeAndPause() {
        SideCpu sides = new SideCpu();
        burnCpu(80); // not counting yet
        sides.resume();
        burnCpu(40); // counted: the caller is the consumer's side
        sides.pause();
        burnCpu(80); // paused
        SideCpu.Split split = sides.perRound(1);
        assertTrue(split.consumerNs() >= 40e6 && split.consumerNs() < 75e6, "consumer CPU counted: " + split.consumerNs());
        assertThrows(IllegalStateException.class, sides::pause);
    }

    /** Spins until this thread has used {@code ms} more CPU time (not wall time: the same on a loaded machine). */
    private static void burnCpu(long ms) {
        java.lang.management.ThreadMXBean t = java.lang.management.ManagementFactory.getThreadMXBean();
        long end = t.getCurrentThreadCpuTime() + ms * 1_000_000L;
        long x = 0;
        while (t.getCurrentThreadCpuTime() < end) x += System.nanoTime() & 1;
        if (x == -1) throw new AssertionError(); // keeps the loop
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
        // Nearest rank: the ceil(q n)-th smallest.
        List<Double> eight = List.of(8.0, 1.0, 7.0, 2.0, 6.0, 3.0, 5.0, 4.0);
        assertEquals(2.0, SharingV2Report.quantile(eight, 0.25));
        assertEquals(6.0, SharingV2Report.quantile(eight, 0.75));
        List<Double> thirty = new java.util.ArrayList<>();
        for (int i = 30; i >= 1; i--) thirty.add((double) i);
        assertEquals(8.0, SharingV2Report.quantile(thirty, 0.25));
        assertEquals(23.0, SharingV2Report.quantile(thirty, 0.75));
    }
}
