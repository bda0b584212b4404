package org.cuvmm.pool;

import static org.cuvmm.pool.PoolTestSupport.assertStats;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Map;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * A local pooled buffer (memory used only in this process) that was exported anyway is
 * released when closed, not handed to the next {@code allocate}: whoever imported it may
 * still map it, and no lease says when it stops (BRIEF rule 5). An independent probe saw the
 * importer read the next owner's data. Exported-lifetime buffers keep the lease model
 * ({@code ExportedLifetimeTest}).
 */
class LocalExportTest {
    @Test
    void anExportedLocalBufferIsReleasedNotReused() {
        Map<String, Long> liveBefore = LiveObjects.now();
        int memfds = OpenFds.cuvmmMemfds();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("local-export").build()) {
            long g = resource.granularity();
            PoolLifetime L = PoolLifetime.LOCAL;
            VirtualMemoryBuffer first = pool.allocate(g);
            first.fill((byte) 7);
            VirtualMemoryBuffer imported;
            try (BufferDescriptor d = first.exportDescriptor()) {
                imported = resource.importBuffer(d); // stands in for another process's import
            }
            first.close();
            assertStats(pool.stats(L), 0, 0, 0, 0, "an exported local buffer closed: released, not retained");

            VirtualMemoryBuffer second = pool.allocate(g);
            assertEquals(2, pool.stats(L).misses(), "new memory, not the exported buffer's");
            second.fill((byte) 1);
            byte[] seen = new byte[16];
            imported.copyTo(0, seen, 0, seen.length);
            byte[] sevens = new byte[16];
            java.util.Arrays.fill(sevens, (byte) 7);
            assertArrayEquals(sevens, seen, "the importer still reads what the exporter wrote");
            imported.close();

            // A local buffer never exported is reused as before.
            second.close();
            assertStats(pool.stats(L), 0, 0, 1, g, "a local buffer never exported is kept");
            VirtualMemoryBuffer third = pool.allocate(g);
            assertEquals(1, pool.stats(L).hits());
            third.close();
        }
        assertEquals(memfds, OpenFds.cuvmmMemfds(), "every memfd closed");
        LiveObjects.assertBack(liveBefore, "pool closed");
    }

    /** Exporting only some chunks (the sharing server's version-2 path) marks those chunks too. */
    @Test
    void aLocalBufferWithOneChunkExportedIsReleasedNotReused() {
        Map<String, Long> liveBefore = LiveObjects.now();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("local-chunk-export").build()) {
            long g = resource.granularity();
            VirtualMemoryBuffer b = pool.allocate(g);
            try (BufferDescriptor d = b.exportChunks(0)) {
                assertEquals(1, d.fds().length);
            }
            b.close();
            assertStats(pool.stats(PoolLifetime.LOCAL), 0, 0, 0, 0, "released, not retained");
        }
        LiveObjects.assertBack(liveBefore, "pool closed");
    }
}
