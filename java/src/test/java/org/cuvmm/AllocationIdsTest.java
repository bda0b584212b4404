package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Map;
import java.util.Set;

import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.Test;

/**
 * {@link VirtualMemoryBuffer#allocationIds()}: one non-zero, process-unique id per physical
 * allocation, the same in every buffer that maps it and across a pool's reuse, read with no
 * driver call.
 */
class AllocationIdsTest {
    @Test
    void anIdFollowsItsAllocationThroughAliasesGrowsAndViewsWithNoDriverCall() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer first = r.allocate(2 * MiB);
             VirtualMemoryBuffer other = r.allocate(2 * MiB)) {
            Map<String, Long> callsBefore = TestSupport.counters().calls();
            long[] ids = first.allocationIds();
            assertEquals(1, ids.length);
            assertNotEquals(0, ids[0], "ids are non-zero");
            assertNotEquals(ids[0], other.allocationIds()[0], "two allocations, two ids");
            assertEquals(callsBefore, TestSupport.counters().calls(), "reading ids makes no driver call");

            try (VirtualMemoryBuffer alias = r.modifyAllocation(first, MiB);
                 VirtualMemoryBuffer grown = r.modifyAllocation(first, 4 * MiB);
                 VirtualMemoryBuffer view = first.share(() -> { })) {
                assertArrayEquals(ids, alias.allocationIds(), "an alias maps the same allocation");
                assertArrayEquals(ids, view.allocationIds(), "a view maps the same allocation");
                long[] grownIds = grown.allocationIds();
                assertEquals(2, grownIds.length);
                assertEquals(ids[0], grownIds[0], "a grow keeps the first chunk's allocation (" + grown.origin() + ")");
                assertTrue(grownIds[1] != 0 && grownIds[1] != ids[0] && grownIds[1] != other.allocationIds()[0],
                        "the grow's new chunk has a new id: " + java.util.Arrays.toString(grownIds));
            }
            try (VirtualMemoryBuffer empty = r.allocate(0)) {
                assertEquals(0, empty.allocationIds().length, "an empty buffer has no chunk");
            }
        }
    }

    /**
     * A shrunk alias keeps its trailing chunk mapped: allocationIds names it, the whole export
     * does not; exportedChunkCount says how many of the ids pair with the export's fds.
     */
    @Test
    void aShrunkAliasHasMoreIdsThanItsExportHasFds() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer one = r.allocate(2 * MiB);
             VirtualMemoryBuffer two = r.modifyAllocation(one, 4 * MiB);
             VirtualMemoryBuffer shrunk = r.modifyAllocation(two, MiB)) {
            assertEquals(2, two.exportedChunkCount(), "a buffer whose chunks all hold its bytes");
            assertEquals(two.chunkCount(), two.exportedChunkCount());
            long[] ids = shrunk.allocationIds();
            assertEquals(2, shrunk.chunkCount(), "the shrunk alias still maps both chunks");
            assertEquals(2, ids.length);
            assertArrayEquals(two.allocationIds(), ids);
            Map<String, Long> callsBefore = TestSupport.counters().calls();
            assertEquals(1, shrunk.exportedChunkCount(), "only chunk 0 holds a byte of [0, 1 MiB)");
            assertEquals(callsBefore, TestSupport.counters().calls(), "exportedChunkCount makes no driver call");
            try (BufferDescriptor d = shrunk.exportDescriptor()) {
                assertEquals(shrunk.exportedChunkCount(), d.chunkCount(), "the export has one fd per exported chunk");
                assertEquals(shrunk.chunkSize(0), d.sizes()[0], "fd 0 is the allocation of ids[0]");
            }
            try (VirtualMemoryBuffer empty = r.allocate(0)) {
                assertEquals(0, empty.exportedChunkCount());
            }
        }
    }

    @Test
    void idsAreNeverReused() {
        Set<Long> seen = new HashSet<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            for (int i = 0; i < 50; i++) {
                try (VirtualMemoryBuffer b = r.allocate(2 * MiB)) {
                    long id = b.allocationIds()[0];
                    assertTrue(seen.add(id), "id " + id + " handed out twice (round " + i + ")");
                }
            }
        }
    }

    @Test
    void aPooledAllocationKeepsItsIdAcrossReuse() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
            VirtualMemoryBuffer b = pool.allocateExported(2 * MiB);
            long[] ids = b.allocationIds();
            b.close();
            long hits = pool.stats(PoolLifetime.EXPORTED).hits();
            try (VirtualMemoryBuffer again = pool.allocateExported(2 * MiB)) {
                assertEquals(hits + 1, pool.stats(PoolLifetime.EXPORTED).hits(), "the pool reused the memory");
                assertArrayEquals(ids, again.allocationIds(), "the reused allocation keeps its id");
            }
        }
    }

    @Test
    void anImportHasIdsOfItsOwnAndAClosedBufferRefuses() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB);
             BufferDescriptor d = src.exportDescriptor()) {
            long[] ids = src.allocationIds();
            try (VirtualMemoryBuffer imported = r.importBuffer(d);
                 VirtualMemoryBuffer importedAgain = r.importBuffer(d)) {
                long a = imported.allocationIds()[0], b = importedAgain.allocationIds()[0];
                assertNotEquals(ids[0], a, "an import is an allocation box of its own");
                assertNotEquals(a, b, "each import is a new box");
            }
            VirtualMemoryBuffer closed = r.allocate(2 * MiB);
            closed.close();
            IllegalStateException e = assertThrows(IllegalStateException.class, closed::allocationIds);
            assertTrue(e.getMessage().contains("closed"), e.getMessage());
        }
    }
}
