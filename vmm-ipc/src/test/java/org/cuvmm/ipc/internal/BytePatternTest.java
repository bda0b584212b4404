package org.cuvmm.ipc.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Set;

import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.Test;

/**
 * The seeded pattern matches the formula and the examples in docs/PROTOCOL.md section 9 (the
 * Python client and {@code cuvmm serve} depend on those exact bytes); the hashed pattern has
 * no period at chunk sizes; both find a single wrong byte.
 */
class BytePatternTest {
    @Test
    void seededMatchesTheDocumentedExamples() {
        assertEquals(0, BytePattern.byteAt(0, 0) & 0xFF);
        assertEquals(131, BytePattern.byteAt(1, 0) & 0xFF);
        assertEquals(6, BytePattern.byteAt(2, 0) & 0xFF);
        assertEquals(1, BytePattern.byteAt(2048, 0) & 0xFF);
        assertEquals(35, BytePattern.byteAt(0, 5) & 0xFF);
        for (long i : new long[] {0, 1, 2047, 2048, 123456789, 1L << 40}) {
            for (long seed : new long[] {0, 1, -7, 99}) {
                assertEquals((i * 131 + seed * 7 + (i >>> 11)) & 0xFF, BytePattern.byteAt(i, seed) & 0xFF);
            }
        }
        byte[] run = new byte[5000];
        BytePattern.fill(run, 3000, 9);
        for (int j = 0; j < run.length; j++) assertEquals(BytePattern.byteAt(3000 + j, 9), run[j], "array fill, byte " + j);
    }

    @Test
    void seededFillsAndVerifiesABufferBlockByBlock() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(3 * r.granularity() - 5)) {
            BytePattern.fill(b, 42);
            BytePattern.verify(b, 42);
            assertEquals(-1, BytePattern.firstMismatch(b, 42));
            assertTrue(BytePattern.firstMismatch(b, 43) >= 0);
            long last = b.size() - 1; // in the last, short block
            b.fill(last, 1, (byte) ~BytePattern.byteAt(last, 42));
            assertEquals(last, BytePattern.firstMismatch(b, 42));
            b.fill(1000, 1, (byte) ~BytePattern.byteAt(1000, 42));
            assertEquals(1000, BytePattern.firstMismatch(b, 42));
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> BytePattern.verify(b, 42));
            assertTrue(e.getMessage().contains("offset 1000"), e.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> BytePattern.fill(b, b.size() - 1, 2, 0));
        }
    }

    @Test
    void hashedFindsOneCorruptedByteAndNamesItsOffset() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0,
                     VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build());
             VirtualMemoryBuffer b = r.allocate(3 << 20)) {
            BytePattern.fillHashed(b, 0, b.size());
            assertNull(BytePattern.hashMismatch(b, 0, b.size()));
            long offset = (2 << 20) + 12345;
            byte wrong = (byte) ~BytePattern.hashAt(offset);
            b.copyFrom(offset, new byte[] {wrong}, 0, 1);
            String bad = BytePattern.hashMismatch(b, 0, b.size());
            assertTrue(bad != null && bad.startsWith(String.format("byte at offset 0x%x is ", offset)), bad);
            assertNull(BytePattern.hashMismatch(b, 0, offset), "bytes before the corrupted one still match");
        }
    }

    @Test
    void hashedDoesNotRepeatAtChunkSizesWhereSeededDoes() {
        // A chunk mapped at the wrong offset must read back wrong: the hashed pattern at
        // k * 2 MiB must not equal the pattern at 0 over a whole page. The seeded pattern
        // repeats every 512 KiB, which is why the grow demo uses the hashed one.
        for (long shift : new long[] {4096, 64 << 10, 2 << 20, 4 << 20}) {
            int same = 0;
            for (int i = 0; i < 4096; i++) if (BytePattern.hashAt(i) == BytePattern.hashAt(shift + i)) same++;
            assertTrue(same < 64, "shift " + shift + ": " + same + " of 4096 bytes equal");
        }
        for (int i = 0; i < 4096; i++) assertEquals(BytePattern.byteAt(i, 1), BytePattern.byteAt((2 << 20) + i, 1));
        Set<Byte> values = new HashSet<>();
        for (int i = 0; i < 4096; i++) values.add(BytePattern.hashAt(i));
        assertEquals(256, values.size(), "every byte value occurs");
    }
}
