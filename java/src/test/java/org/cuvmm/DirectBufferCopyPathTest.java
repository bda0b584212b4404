package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * A direct ByteBuffer is copied in one driver call with its address, each way. In the JDK every
 * direct buffer is a {@link java.nio.MappedByteBuffer} (DirectByteBuffer extends it), so a
 * branch on that type, meant for file mappings, took every direct copy through the heap, 1 MiB
 * and one driver call and synchronize per piece (a reviewer's test, which caught it).
 */
class DirectBufferCopyPathTest {
    @Test
    void aDirectBufferIsCopiedInOneDriverCall() {
        int n = 8 << 20;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(n)) {
            ByteBuffer direct = ByteBuffer.allocateDirect(n);
            DriverCounters c = TestSupport.counters();
            b.copyFrom(0, direct.duplicate()); // warm-up
            c.resetCalls();
            b.copyFrom(0, direct.duplicate());
            Map<String, Long> from = nonZero(c.calls());
            c.resetCalls();
            b.copyTo(0, direct.duplicate());
            Map<String, Long> to = nonZero(c.calls());
            long fromCopies = from.entrySet().stream().filter(e -> e.getKey().startsWith("cuMemcpy"))
                    .mapToLong(Map.Entry::getValue).sum();
            long toCopies = to.entrySet().stream().filter(e -> e.getKey().startsWith("cuMemcpy"))
                    .mapToLong(Map.Entry::getValue).sum();
            assertEquals(1, fromCopies, "copyFrom(direct): one driver copy, its address passed: " + from);
            assertEquals(1, toCopies, "copyTo(direct): one driver copy, its address passed: " + to);
        }
    }

    private static Map<String, Long> nonZero(Map<String, Long> m) {
        Map<String, Long> out = new java.util.TreeMap<>();
        m.forEach((k, v) -> { if (v != 0) out.put(k, v); });
        return out;
    }
}
