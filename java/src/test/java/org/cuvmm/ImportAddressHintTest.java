package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import org.junit.jupiter.api.Test;

/**
 * An import reserves at the importing resource's address hint, as an allocation does (cuda.core
 * imports at its resource's {@code addr_hint}); taken, the hint is dropped and the import
 * lands elsewhere.
 */
class ImportAddressHintTest {
    /** A free, granularity-aligned address with {@code bytes} free after it (found, then released). */
    private static long freeAddress(VirtualMemoryResource r, long bytes) {
        try (VirtualMemoryBuffer probe = r.allocate(bytes)) {
            return probe.address();
        }
    }

    @Test
    void anImportLandsAtTheImportersHint() {
        try (VirtualMemoryResource exporter = VirtualMemoryResource.create(0)) {
            long g = exporter.granularity();
            try (VirtualMemoryBuffer b = exporter.allocate(2 * g); BufferDescriptor d = b.exportDescriptor()) {
                // The start of a free hole four times the import's size: with no hint the kernel
                // places a mapping at the top of a hole, so only the hint puts it here (a hole of
                // the import's own size was filled either way: a reviewer's check).
                long hint = freeAddress(exporter, 8 * g);
                try (VirtualMemoryResource importer = VirtualMemoryResource.create(0,
                        VirtualMemoryResourceOptions.builder().addressHint(hint).build());
                     VirtualMemoryBuffer imported = importer.importBuffer(d)) {
                    assertEquals(hint, imported.address(), "the import reserved at the hint");
                    // Taken now: a second import of the same descriptor lands elsewhere.
                    try (VirtualMemoryBuffer again = importer.importBuffer(d)) {
                        assertNotEquals(hint, again.address(), "the hint is taken: placed elsewhere");
                    }
                }
            }
        }
    }
}
