package org.cuvmm.cli.demo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Set;

import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.Test;

/** The demo's verification can fail: it finds a single wrong byte and a chunk at the wrong offset. */
class BytePatternTest {

    @Test
    void findsOneCorruptedByteAndNamesItsOffset() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0,
                     VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build());
             VirtualMemoryBuffer b = r.allocate(3 << 20)) {
            BytePattern.write(b, 0, b.size());
            assertNull(BytePattern.verify(b, 0, b.size()));
            long offset = (2 << 20) + 12345;
            byte wrong = (byte) ~BytePattern.at(offset);
            b.copyFrom(offset, new byte[] {wrong}, 0, 1);
            String bad = BytePattern.verify(b, 0, b.size());
            assertTrue(bad != null && bad.startsWith(String.format("byte at offset 0x%x is ", offset)), bad);
            assertNull(BytePattern.verify(b, 0, offset), "bytes before the corrupted one still match");
        }
    }

    @Test
    void doesNotRepeatAtChunkSizes() {
        // A chunk mapped at the wrong offset must read back wrong: the pattern at k * 2 MiB
        // must not equal the pattern at 0 over a whole page.
        for (long shift : new long[] {4096, 64 << 10, 2 << 20, 4 << 20}) {
            int same = 0;
            for (int i = 0; i < 4096; i++) if (BytePattern.at(i) == BytePattern.at(shift + i)) same++;
            assertTrue(same < 64, "shift " + shift + ": " + same + " of 4096 bytes equal");
        }
        Set<Byte> values = new HashSet<>();
        for (int i = 0; i < 4096; i++) values.add(BytePattern.at(i));
        assertEquals(256, values.size(), "every byte value occurs");
    }
}
