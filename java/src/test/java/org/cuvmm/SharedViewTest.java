package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * {@link VirtualMemoryBuffer#share(Runnable)}: a view over the same mapping made and closed
 * with no driver call; {@code whenGone} once the view and what derives from it are gone; the
 * memory stays mapped while any holder maps it, and an import's {@code whenUnmapped} waits
 * for every view.
 */
class SharedViewTest {
    @Test
    void aViewOfAnImportCostsNoDriverCallAndKeepsTheMappingOfTheCache() {
        Map<String, Long> live = LiveObjects.now();
        Map<String, String> fds = OpenFds.byNumber();
        AtomicInteger unmapped = new AtomicInteger();
        AtomicInteger gone = new AtomicInteger();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB)) {
            src.fill((byte) 9);
            VirtualMemoryBuffer cached;
            try (BufferDescriptor d = src.exportDescriptor()) {
                cached = r.importBuffer(d, unmapped::incrementAndGet);
            }
            Map<String, Long> mapped = LiveObjects.now();
            DriverCounters c = TestSupport.counters();
            for (int round = 0; round < 3; round++) {
                Map<String, Long> calls = c.calls();
                VirtualMemoryBuffer view = cached.share(gone::incrementAndGet);
                assertEquals(BufferOrigin.SHARED_VIEW, view.origin());
                assertEquals(cached.address(), view.address());
                assertEquals(cached.size(), view.size());
                view.close();
                assertEquals(calls, c.calls(), "share and close of a view: no driver call (round " + round + ")");
                assertEquals(round + 1, gone.get(), "whenGone ran once at the view's close");
                assertEquals(0, unmapped.get(), "the cache's buffer still maps the import");
                LiveObjects.assertBack(mapped, "the mapping stays for the cache (round " + round + ")");
            }
            byte[] one = new byte[1];
            cached.copyTo(MiB, one, 0, 1);
            assertEquals(9, one[0]);
            cached.close();
            assertEquals(1, unmapped.get());
        }
        LiveObjects.assertBack(live, "after the views and the import");
        OpenFds.assertNoNewFds(fds, "after the views and the import");
    }

    @Test
    void theOriginalClosedFirstLeavesTheMappingToTheView() {
        Map<String, Long> live = LiveObjects.now();
        List<String> order = new ArrayList<>();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB)) {
            src.fill((byte) 4);
            VirtualMemoryBuffer imported;
            try (BufferDescriptor d = src.exportDescriptor()) {
                imported = r.importBuffer(d, () -> order.add("unmapped"));
            }
            VirtualMemoryBuffer view = imported.share(() -> order.add("gone"));
            imported.close();
            assertEquals(List.of(), order, "the view still maps the import");
            byte[] one = new byte[1];
            view.copyTo(0, one, 0, 1);
            assertEquals(4, one[0], "the memory is still mapped for the view");
            view.close();
            assertEquals(List.of("gone", "unmapped"), order, "the view's whenGone, then the import's whenUnmapped");
            view.close(); // idempotent
            assertEquals(2, order.size(), "each exactly once");
            assertThrows(IllegalStateException.class, () -> view.share(() -> { }));
        }
        LiveObjects.assertBack(live, "after the import and its view");
    }

    @Test
    void whenGoneWaitsForEverythingDerivedFromTheView() throws Exception {
        Map<String, Long> live = LiveObjects.now();
        AtomicInteger gone = new AtomicInteger();
        AtomicInteger innerGone = new AtomicInteger();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .locationType(LocationType.HOST_NUMA).handleType(HandleType.POSIX_FD).build());
             VirtualMemoryBuffer owner = r.allocate(2 * MiB)) {
            owner.fill((byte) 6);
            CountDownLatch goneLatch = new CountDownLatch(1);
            VirtualMemoryBuffer view = owner.share(() -> {
                gone.incrementAndGet();
                goneLatch.countDown();
            });
            VirtualMemoryBuffer alias = r.modifyAllocation(view, MiB);
            VirtualMemoryBuffer grown = r.modifyAllocation(view, 4 * MiB);
            VirtualMemoryBuffer inner = view.share(innerGone::incrementAndGet);
            ByteBuffer bytes = alias.asByteBuffer();
            view.close();
            alias.close();
            grown.close();
            assertEquals(0, gone.get(), "an inner view and a ByteBuffer still hold the view");
            inner.close();
            assertEquals(1, innerGone.get());
            assertEquals(0, gone.get(), "the ByteBuffer still holds the view");
            assertEquals(6, bytes.get(100));
            bytes = null;
            collectUntil(goneLatch);
            assertEquals(1, gone.get(), "the ByteBuffer's cleaner dropped the last holder");
            byte[] one = new byte[1];
            owner.copyTo(0, one, 0, 1);
            assertEquals(6, one[0], "the owner's mapping was never touched");
        }
        LiveObjects.assertBack(live, "after the views");
    }

    @Test
    void aLeakedViewIsReleasedByTheCleanerAndRunsWhenGone() throws Exception {
        // No live-object baseline here: the collections below may also reclaim other tests'
        // leaks, and the view's release changes no count (the owner keeps the mapping).
        AtomicInteger gone = new AtomicInteger();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer owner = r.allocate(2 * MiB)) {
            CountDownLatch goneLatch = new CountDownLatch(1);
            owner.share(() -> { // never closed
                gone.incrementAndGet();
                goneLatch.countDown();
            });
            collectUntil(goneLatch);
            assertEquals(1, gone.get(), "the cleaner released the leaked view");
            byte[] one = new byte[1];
            owner.copyTo(0, one, 0, 1); // still mapped for its owner
        }
    }

    /** Collects until {@code gone} is counted down: one System.gc() per bounded wait, 10 s in all. */
    private static void collectUntil(CountDownLatch gone) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        do {
            System.gc();
        } while (!gone.await(100, TimeUnit.MILLISECONDS) && System.nanoTime() < deadline);
    }

    @Test
    void theViewsCloseWaitsForStreamWorkRecordedOnTheView() {
        StreamTestSupport.Fixture f = StreamTestSupport.Fixture.open();
        AtomicInteger gone = new AtomicInteger();
        try (VirtualMemoryBuffer owner = f.resource.allocate(2 * MiB); Stream stream = Stream.create(0)) {
            VirtualMemoryBuffer view = owner.share(gone::incrementAndGet);
            CountDownLatch gate = StreamTestSupport.gate(stream);
            view.fillAsync(0, 2 * MiB, (byte) 8, stream);
            view.close(stream);
            assertEquals(0, gone.get(), "the fill recorded on the view has not run: the view is not released");
            gate.countDown();
            StreamTestSupport.reaperDrained();
            assertEquals(1, gone.get(), "released once the stream passed the fill");
            byte[] one = new byte[1];
            owner.copyTo(2 * MiB - 1, one, 0, 1);
            assertEquals(8, one[0]);
        } finally {
            f.close();
        }
    }

    @Test
    void aViewOfAPooledBufferKeepsThePoolFromReusingTheMemory() {
        Map<String, Long> live = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
            VirtualMemoryBuffer pooled = pool.allocate(2 * MiB);
            long[] ids = pooled.allocationIds();
            VirtualMemoryBuffer view = pooled.share(() -> { });
            pooled.close();
            try (VirtualMemoryBuffer next = pool.allocate(2 * MiB)) {
                assertTrue(ids[0] != next.allocationIds()[0], "the pool did not hand out memory a view still maps");
            }
            assertArrayEquals(ids, view.allocationIds());
            view.close();
        }
        LiveObjects.assertBack(live, "after the pool and the view");
    }

    /**
     * A view keeps the parent's memory mapped, not the parent's Java object: a parent dropped
     * without close() while its view lives must become unreachable (so its Cleaner can report
     * the leak and release it). The view's lazily built name once captured the parent buffer.
     */
    @Test
    void aViewDoesNotKeepADroppedParentBufferReachable() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer[] parent = {r.allocate(2 * MiB)};
            VirtualMemoryBuffer view = parent[0].share(() -> {});
            java.lang.ref.WeakReference<VirtualMemoryBuffer> weak = new java.lang.ref.WeakReference<>(parent[0]);
            parent[0] = null;
            try {
                for (int i = 0; i < 100 && weak.get() != null; i++) {
                    System.gc();
                    Thread.sleep(10);
                }
                assertTrue(weak.get() == null, "the dropped parent buffer is still reachable while its view lives");
            } finally {
                view.close();
            }
        }
    }
}
