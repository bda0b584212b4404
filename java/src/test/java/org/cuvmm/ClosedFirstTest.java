package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Review s7: 9b9fa61 made "a closed buffer says closed whatever the arguments" hold for
 * copyFrom/copyTo(byte[] / ByteBuffer), fill, asByteBuffer and modifyAllocation, but the
 * buffer-to-buffer copy and every async operation still check their windows first: a closed
 * buffer given a bad window says IndexOutOfBoundsException, not IllegalStateException.
 */
class ClosedFirstTest {
    static final long MiB = 1L << 20;

    @Test
    void everyWindowedUseOfAClosedBufferSaysClosed() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0);
             VirtualMemoryBuffer other = r.allocate(4 * MiB)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            b.close();
            Executable[] uses = {
                () -> b.copyFrom(0, other, 0, 2 * MiB),
                () -> b.fillAsync(0, 2 * MiB, (byte) 0, s),
                () -> b.copyFromAsync(0, other, 0, 2 * MiB, s),
                () -> b.copyFromAsync(0, new byte[(int) (2 * MiB)], 0, (int) (2 * MiB), s),
            };
            StringBuilder wrong = new StringBuilder();
            for (int i = 0; i < uses.length; i++) {
                Throwable t = assertThrows(Throwable.class, uses[i]);
                if (!(t instanceof IllegalStateException)) wrong.append("\n use #").append(i).append(": ").append(t);
            }
            assertEquals("", wrong.toString(), "uses of a closed buffer that did not throw IllegalStateException");
        }
    }
}
