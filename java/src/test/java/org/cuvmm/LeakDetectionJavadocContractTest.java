package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.util.List;

import org.junit.jupiter.api.Test;

/** LeakDetection's javadoc, read as a user would: the bookkeeping no other test checks. */
class LeakDetectionJavadocContractTest {
    /**
     * reportedLeaks(): counts every leak found; lastReport(): "The text of the most recent leak
     * report"; recentReports(): "The most recent leak reports (at most 16), oldest first".
     * Reports are made through the package's own report() (what the cleaner and pools call).
     */
    @Test
    void reportsAreCountedAndTheRecentOnesKeptOldestFirst() {
        long before = LeakDetection.reportedLeaks();
        for (int i = 0; i < 20; i++) LeakDetection.report("javadoc-probe-" + i + "-end", null);
        assertEquals(before + 20, LeakDetection.reportedLeaks());
        List<String> recent = LeakDetection.recentReports();
        assertEquals(16, recent.size());
        for (int i = 0; i < 16; i++) {
            assertTrue(recent.get(i).contains("javadoc-probe-" + (i + 4) + "-end"), i + ": " + recent.get(i));
        }
        assertEquals(recent.get(15), LeakDetection.lastReport());
        assertTrue(LeakDetection.lastReport().contains("javadoc-probe-19-end"));
        // A snapshot: later reports do not change a list already returned.
        LeakDetection.report("javadoc-probe-20-end", null);
        assertEquals(16, recent.size());
        assertTrue(recent.get(15).contains("javadoc-probe-19-end"));
    }
}
