package org.cuvmm;

import java.util.Map;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/** Host-located memory: CPU access through a ByteBuffer view that pins the memory. */
class HostMemoryTest {
    private static VirtualMemoryResource hostResource() {
        return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .locationType(LocationType.HOST).handleType(HandleType.NONE).build());
    }

    @Test
    void anEmptyBufferHasAnEmptyView() {
        try (VirtualMemoryResource r = hostResource(); VirtualMemoryBuffer empty = r.allocate(0)) {
            assertEquals(0, empty.asByteBuffer().capacity());
        }
    }

    @Test
    void byteBufferViewSeesCopiesAndOutlivesClose() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = hostResource()) {
            assertTrue(r.isHostAccessible());
            VirtualMemoryBuffer b = r.allocate(MiB);
            b.fill((byte) 7);
            ByteBuffer view = b.asByteBuffer();
            assertEquals(MiB, view.capacity());
            assertEquals(7, view.get(12345));
            view.put(0, (byte) 9);
            byte[] one = new byte[1];
            b.copyTo(0, one, 0, 1);
            assertEquals(9, one[0]);
            b.close();
            // The view holds its own reference: still mapped, still readable.
            assertEquals(7, view.get((int) MiB - 1));
            assertTrue(TestSupport.counters().liveMappings() > before.get("mappings"));
            view = null;
        }
        LiveObjects.awaitBackAfterViewsAreCollected(before);
    }

    /**
     * A view of one host buffer is a host pointer into mapped VMM memory: the real driver
     * resolves it through unified addressing, so the host driver must accept it too, both
     * as a copy's source and as its destination.
     */
    @Test
    void copiesBetweenTwoHostBuffersThroughAByteBufferView() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = hostResource(); VirtualMemoryBuffer a = r.allocate(MiB);
             VirtualMemoryBuffer b = r.allocate(MiB)) {
            b.fill((byte) 0x21);
            a.copyFrom(0, b.asByteBuffer());
            byte[] out = new byte[(int) MiB];
            a.copyTo(out);
            for (int i = 0; i < out.length; i += 4093) assertEquals(0x21, out[i], "byte " + i);
            assertEquals(0x21, out[out.length - 1]);

            a.fill(1000, 24, (byte) 0x42);
            ByteBuffer view = b.asByteBuffer();
            view.position(500);
            view.limit(524);
            a.copyTo(1000, view);
            view = null;  // an interpreted frame would keep the slot reachable
            byte[] back = new byte[26];
            b.copyTo(499, back, 0, back.length);
            assertEquals(0x21, back[0]);
            assertEquals(0x42, back[1]);
            assertEquals(0x42, back[24]);
            assertEquals(0x21, back[25]);
        }
        LiveObjects.awaitBackAfterViewsAreCollected(before); // the views pin b's memory until collected
    }
}
