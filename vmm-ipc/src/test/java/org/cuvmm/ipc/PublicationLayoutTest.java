package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A publication reads its buffer's exported chunks (sizes, allocation ids) once, at the first
 * version-2 ATTACH, and keeps them (issue 11): they are the buffer's own, in address order,
 * and an alias smaller than its mapping lists only the chunks that hold its bytes, as an
 * export does.
 */
class PublicationLayoutTest {
    @Test
    void theLayoutIsTheBuffersExportedChunksReadOnce() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            VirtualMemoryBuffer one = resource.allocate(g);
            VirtualMemoryBuffer two = resource.modifyAllocation(one, 2 * g);
            VirtualMemoryBuffer three = resource.modifyAllocation(two, 3 * g);
            try {
                Publication p = new Publication("three", three);
                Publication.ChunkLayout layout = p.layout();
                assertArrayEquals(new long[] {g, g, g}, layout.sizes());
                assertArrayEquals(three.allocationIds(), layout.allocationIds());
                assertSame(layout, p.layout(), "read once, then kept");
                // An alias of the first chunk only: one exported chunk, as exportDescriptor lists.
                try (VirtualMemoryBuffer first = resource.modifyAllocation(three, g)) {
                    Publication.ChunkLayout l1 = new Publication("first", first).layout();
                    assertArrayEquals(new long[] {g}, l1.sizes());
                    assertArrayEquals(new long[] {three.allocationIds()[0]}, l1.allocationIds());
                }
            } finally {
                three.close();
                two.close();
                one.close();
            }
        }
    }
}
