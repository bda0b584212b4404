package org.cuvmm.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** A report's driver line says when its numbers are no GPU result (issue 10, item 5). */
class ReportSupportTest {
    @Test
    void onlyTheNvidiaDriverIsAGpuResult() {
        assertTrue(ReportSupport.notAGpuResult("host", false).contains("NOT a GPU result"));
        String library = ReportSupport.notAGpuResult("cuda", true);
        assertTrue(library.contains("cuda driver API over the host library (no GPU)"), library);
        assertTrue(library.contains("NOT a GPU result"), library);
        assertEquals("", ReportSupport.notAGpuResult("cuda", false));
    }
}
