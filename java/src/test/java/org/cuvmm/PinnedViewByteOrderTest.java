package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import org.junit.jupiter.api.Test;

/**
 * PinnedHostBuffer.asByteBuffer()'s byte order: the platform's for allocated memory (as a
 * VirtualMemoryBuffer's view), the caller's buffer's for registered memory. A registered view
 * was a plain duplicate(), always big-endian whatever the caller's order (an independent probe).
 */
class PinnedViewByteOrderTest {
    @Test
    void anAllocatedViewIsInNativeOrder() {
        try (PinnedHostBuffer p = PinnedHostBuffer.allocate(4096)) {
            assertEquals(ByteOrder.nativeOrder(), p.asByteBuffer().order());
        }
    }

    @Test
    void aRegisteredViewKeepsTheCallersOrder() {
        for (ByteOrder order : new ByteOrder[] {ByteOrder.LITTLE_ENDIAN, ByteOrder.BIG_ENDIAN}) {
            ByteBuffer mine = ByteBuffer.allocateDirect(8192).order(order);
            mine.putInt(0, 0x01020304);
            try (PinnedHostBuffer reg = PinnedHostBuffer.register(mine)) {
                ByteBuffer view = reg.asByteBuffer();
                assertEquals(order, view.order(), "the view of a buffer registered in " + order);
                assertEquals(0x01020304, view.getInt(0), "the int the caller wrote, read back through the view");
            }
        }
    }
}
