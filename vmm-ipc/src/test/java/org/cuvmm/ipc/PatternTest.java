package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/** The test pattern matches the formula and the examples in docs/PROTOCOL.md section 9. */
class PatternTest {
    @Test
    void documentedExamples() {
        assertEquals(0, Pattern.byteAt(0, 0) & 0xFF);
        assertEquals(131, Pattern.byteAt(1, 0) & 0xFF);
        assertEquals(6, Pattern.byteAt(2, 0) & 0xFF);
        assertEquals(1, Pattern.byteAt(2048, 0) & 0xFF);
        assertEquals(35, Pattern.byteAt(0, 5) & 0xFF);
        for (long i : new long[] {0, 1, 2047, 2048, 123456789, 1L << 40}) {
            for (long seed : new long[] {0, 1, -7, 99}) {
                assertEquals((i * 131 + seed * 7 + (i >>> 11)) & 0xFF, Pattern.byteAt(i, seed) & 0xFF);
            }
        }
    }

    @Test
    void fillAndVerifyABufferChunkByChunk() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(3 * r.granularity() - 5)) {
            Pattern.fill(b, 42);
            Pattern.verify(b, 42);
            assertEquals(-1, Pattern.firstMismatch(b, 42));
            assertTrue(Pattern.firstMismatch(b, 43) >= 0);
            b.fill(1000, 1, (byte) ~Pattern.byteAt(1000, 42));
            assertEquals(1000, Pattern.firstMismatch(b, 42));
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> Pattern.verify(b, 42));
            assertTrue(e.getMessage().contains("offset 1000"), e.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> Pattern.fill(b, b.size() - 1, 2, 0));
        }
    }
}
