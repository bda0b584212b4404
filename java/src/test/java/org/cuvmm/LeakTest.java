package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** Brief section 6, rule 7: a buffer never closed is released by the cleaner with a warning. */
class LeakTest {
    /** An odd size, so this test's report cannot be confused with another test's leak. */
    private static final long LEAKED_SIZE = 2 * MiB - 12345;

    @Test
    void unreachableOpenBufferIsReleasedAndReportedWithItsSite() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        long leaks = LeakDetection.reportedLeaks();
        long address;
        String previous = System.getProperty(LeakDetection.CAPTURE_PROPERTY);
        System.setProperty(LeakDetection.CAPTURE_PROPERTY, "true");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            address = leakOne(r);
        } finally {
            if (previous == null) System.clearProperty(LeakDetection.CAPTURE_PROPERTY);
            else System.setProperty(LeakDetection.CAPTURE_PROPERTY, previous);
        }
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (LeakDetection.reportedLeaks() == leaks && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        assertTrue(LeakDetection.reportedLeaks() > leaks, "the cleaner reported the leak within 20 s");
        String tag = "0x" + Long.toHexString(address) + ", " + LEAKED_SIZE + " bytes";
        while (LeakDetection.recentReports().stream().noneMatch(t -> t.contains(tag)) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        String report = LeakDetection.recentReports().stream().filter(t -> t.contains(tag)).findFirst()
                .orElseThrow(() -> new AssertionError("no leak report names " + tag + ": " + LeakDetection.recentReports()));
        assertTrue(report.contains("was never closed"), report);
        assertTrue(report.contains("leakOne"), "report names the allocation site: " + report);
        // The site starts at the caller's line, not inside cuvmm (the constructor, allocate).
        String firstFrame = report.substring(report.indexOf("It was allocated at:")).split("\n")[1];
        assertTrue(firstFrame.contains("LeakTest.leakOne"), "first frame: " + firstFrame + "; report: " + report);
        assertTrue(report.contains("frames inside cuvmm omitted before the first)"), report);
        // The report is written just before the release: wait for the counters too.
        while (!before.equals(LiveObjects.now()) && System.nanoTime() < deadline) Thread.sleep(10);
        LiveObjects.assertBack(before, "after the cleaner released the leaked buffer");
    }

    private static long leakOne(VirtualMemoryResource r) {
        VirtualMemoryBuffer b = r.allocate(LEAKED_SIZE);
        b.fill((byte) 1);
        return b.address(); // not closed: dropped on return
    }

    @Test
    void withoutCaptureTheReportNamesTheProperty() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        long leaks = LeakDetection.reportedLeaks();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            r.allocate(MiB);
        }
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (LeakDetection.reportedLeaks() == leaks && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        assertTrue(LeakDetection.reportedLeaks() > leaks);
        assertTrue(LeakDetection.lastReport().contains(LeakDetection.CAPTURE_PROPERTY), LeakDetection.lastReport());
        // Another leak's report may have ended the wait: this one's buffer must be gone before the
        // next test class counts live objects (StreamTest saw it released during its first test).
        while (!before.equals(LiveObjects.now()) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        LiveObjects.assertBack(before, "after the cleaner released the leaked buffer");
    }

    /**
     * A leaked PinnedHostBuffer records no allocation site: with capture on, its report says
     * so instead of giving the pool's sampling advice (a reviewer) or the property's (a probe).
     */
    @Test
    void aPinnedLeakWithCaptureOnSaysItRecordsNoSite() throws Exception {
        String previous = System.getProperty(LeakDetection.CAPTURE_PROPERTY);
        System.setProperty(LeakDetection.CAPTURE_PROPERTY, "true");
        try {
            long size = 12_347; // odd, to find this test's report
            leakPinned(size);
            long deadline = System.nanoTime() + 20_000_000_000L;
            String tag = size + " bytes";
            while (LeakDetection.recentReports().stream().noneMatch(t -> t.contains(tag) && t.contains("Pinned"))
                    && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
            }
            String report = LeakDetection.recentReports().stream().filter(t -> t.contains(tag) && t.contains("Pinned"))
                    .findFirst().orElseThrow(() -> new AssertionError("no report of the pinned leak: "
                            + LeakDetection.recentReports()));
            assertTrue(report.contains("does not record where it was allocated"), report);
            assertTrue(!report.contains("leakSampleRate") && !report.contains("=true to record"), report);
        } finally {
            if (previous == null) System.clearProperty(LeakDetection.CAPTURE_PROPERTY);
            else System.setProperty(LeakDetection.CAPTURE_PROPERTY, previous);
        }
    }

    private static void leakPinned(long size) {
        PinnedHostBuffer.allocate(size).asByteBuffer(); // not closed: dropped on return
    }
}
