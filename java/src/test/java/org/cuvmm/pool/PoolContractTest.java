package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.*;

import java.util.Map;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.BufferLease;
import org.cuvmm.BufferOrigin;
import org.cuvmm.HandleType;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Probe: the javadoc of VirtualMemoryPool, PoolStats and the builder. */
class PoolContractTest {
    private VirtualMemoryResource resource;
    private long g;
    private Map<String, Long> before;

    static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    @BeforeEach
    void open() {
        before = LiveObjects.now();
        resource = VirtualMemoryResource.create(0);
        g = resource.granularity();
    }

    @AfterEach
    void close() {
        resource.close();
        LiveObjects.assertBack(before, "after the pool probe");
    }

    @Test
    void builderValidation() {
        assertNames(assertThrows(NullPointerException.class, () -> VirtualMemoryPool.builder().build()), "resource");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryPool.builder().resource(resource).name(" ").build()), "name");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryPool.builder().resource(resource).retentionCap(PoolLifetime.LOCAL, -1).build()), "retentionCap", "-1");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryPool.builder().resource(resource).retentionCap(PoolLifetime.EXPORTED, -1).build()), "retentionCap", "-1");
        assertNames(assertThrows(IllegalArgumentException.class, () -> VirtualMemoryPool.builder().resource(resource).leakSampleRate(-1).build()), "leakSampleRate", "-1");
        assertNames(assertThrows(NullPointerException.class, () -> VirtualMemoryPool.builder().retentionCap(null, 1)), "lifetime");
        try (VirtualMemoryResource closed = VirtualMemoryResource.create(0)) {
            closed.close();
            assertNames(assertThrows(IllegalStateException.class, () -> VirtualMemoryPool.builder().resource(closed).build()), "closed");
        }
        try (VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).build()) {
            assertEquals(Long.MAX_VALUE, p.retentionCap(PoolLifetime.LOCAL));
            assertEquals(Long.MAX_VALUE, p.retentionCap(PoolLifetime.EXPORTED));
            assertEquals(VirtualMemoryPool.Builder.DEFAULT_LEAK_SAMPLE_RATE, p.leakSampleRate());
            assertTrue(p.name().startsWith("pool-"));
            assertSame(resource, p.resource());
            assertThrows(NullPointerException.class, () -> p.stats(null));
            assertThrows(NullPointerException.class, () -> p.trim(null));
            assertThrows(NullPointerException.class, () -> p.retentionCap(null));
            assertThrows(NullPointerException.class, () -> p.setRetentionCap(null, 0));
            assertThrows(NullPointerException.class, () -> p.objectName(null));
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.setRetentionCap(PoolLifetime.LOCAL, -1)), "capBytes", "-1");
        }
    }

    @Test
    void allocateArgumentRanges() {
        try (VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).build()) {
            long max = p.sizeClasses().maxClassSize();
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(-1)), "reqSize", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(max + 1)), "reqSize", String.valueOf(max + 1));
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(Long.MAX_VALUE)), "reqSize");
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocateExported(Long.MAX_VALUE)), "reqSize");
            assertNames(assertThrows(NullPointerException.class, () -> p.allocate(1, null)), "stream");
            Stream s = Stream.create(0);
            s.close();
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(1, s)), "stream");
            try (VirtualMemoryBuffer z = p.allocate(0)) {
                assertEquals(0, z.size());
                assertNotEquals(BufferOrigin.POOLED, z.origin());
            }
            try (VirtualMemoryBuffer one = p.allocate(1)) {
                assertEquals(1, one.size());
                assertEquals(g, one.mappedSize());
                assertEquals(BufferOrigin.POOLED, one.origin());
            }
            assertEquals(0, p.stats(PoolLifetime.LOCAL).liveCount());
        }
    }

    @Test
    void statsAfterTrimAndClose() {
        VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).name("probe-stats").build();
        VirtualMemoryBuffer a = p.allocate(g);
        VirtualMemoryBuffer b = p.allocate(3 * g);
        PoolStats s = p.stats(PoolLifetime.LOCAL);
        assertEquals("probe-stats", s.poolName());
        assertEquals(PoolLifetime.LOCAL, s.lifetime());
        assertEquals(2, s.liveCount());
        assertEquals(g + b.mappedSize(), s.liveBytes());
        assertEquals(4 * g, s.liveRequestedBytes());
        assertEquals(2, s.misses());
        a.close();
        s = p.stats(PoolLifetime.LOCAL);
        assertEquals(1, s.liveCount());
        assertEquals(1, s.retainedCount());
        assertEquals(g, s.retainedBytes());
        assertEquals(g + b.mappedSize(), s.peakLiveBytes());
        long trimmed = p.trim();
        assertEquals(g, trimmed);
        s = p.stats(PoolLifetime.LOCAL);
        assertEquals(0, s.retainedCount());
        assertEquals(0, s.retainedBytes());
        assertEquals(g, s.trimmedBytes());
        assertEquals(0, p.trim(), "nothing idle");
        VirtualMemoryBuffer c = p.allocate(g);
        c.close();
        p.close();
        p.close(); // idempotent
        assertTrue(p.isClosed());
        s = p.stats(PoolLifetime.LOCAL);
        assertEquals(0, s.retainedCount(), "closing releases idle memory");
        assertEquals(2 * g, s.trimmedBytes(), "capacity released by closing the pool counts as trimmed");
        assertEquals(1, s.liveCount(), "b is still live");
        assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(1)), "closed");
        assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(0)), "closed");
        assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(1)), "closed");
        // live buffer stays valid; its memory is released, not kept, at close
        b.fill((byte) 1);
        b.close();
        s = p.stats(PoolLifetime.LOCAL);
        assertEquals(0, s.liveCount());
        assertEquals(0, s.liveBytes());
        assertEquals(0, s.retainedCount(), "a buffer closed after the pool closed must not be retained");
        assertEquals(0, s.retainedBytes());
    }

    @Test
    void retentionCapEvicts() {
        try (VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).retentionCap(PoolLifetime.LOCAL, 0).build()) {
            VirtualMemoryBuffer a = p.allocate(g);
            a.close();
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.retainedCount());
            assertEquals(1, s.evictions());
            assertEquals(g, s.evictedBytes());
            assertEquals(0, s.retentionCapBytes());
            p.setRetentionCap(PoolLifetime.LOCAL, Long.MAX_VALUE);
            VirtualMemoryBuffer b1 = p.allocate(g);
            VirtualMemoryBuffer b2 = p.allocate(g);
            b1.close();
            b2.close();
            assertEquals(2 * g, p.stats(PoolLifetime.LOCAL).retainedBytes());
            assertEquals(g, p.setRetentionCap(PoolLifetime.LOCAL, g), "lowering evicts at once");
            assertEquals(g, p.stats(PoolLifetime.LOCAL).retainedBytes());
            assertEquals(g, p.trim(PoolLifetime.LOCAL));
            assertEquals(0, p.trim(PoolLifetime.EXPORTED));
        }
    }

    @Test
    void reuseHitsAndLargerClass() {
        try (VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).build()) {
            VirtualMemoryBuffer a = p.allocate(2 * g);
            long addr = a.address();
            a.close();
            VirtualMemoryBuffer b = p.allocate(g + 1); // class 2g: a hit
            assertEquals(addr, b.address());
            assertEquals(g + 1, b.size());
            assertEquals(1, p.stats(PoolLifetime.LOCAL).hits());
            b.close();
            VirtualMemoryBuffer c = p.allocate(g); // class g: smallest larger class within 2x -> larger-class hit
            assertEquals(addr, c.address());
            assertEquals(2 * g, c.mappedSize(), "a reused buffer keeps its class");
            assertEquals(1, p.stats(PoolLifetime.LOCAL).largerClassHits());
            c.close();
        }
    }

    @Test
    void anExportedLocalBufferIsReleasedNotKept() {
        try (VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).build()) {
            VirtualMemoryBuffer a = p.allocate(g);
            BufferDescriptor d = a.exportDescriptor();
            d.close();
            a.close();
            assertEquals(0, p.stats(PoolLifetime.LOCAL).retainedCount(), "ever-exported local memory must not be reused");
            VirtualMemoryBuffer x = p.allocate(g);
            VirtualMemoryBuffer alias = resource.modifyAllocation(x, g);
            alias.exportChunks(0).close();
            alias.close();
            x.close();
            assertEquals(0, p.stats(PoolLifetime.LOCAL).retainedCount(), "exported through an alias");
        }
    }

    @Test
    void exportedLifetimeReturnsOnlyWhenLeasesAreGone() {
        try (VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).build()) {
            VirtualMemoryBuffer out = p.allocateExported(g);
            BufferLease l1 = out.lease("c1");
            BufferLease l2 = out.lease("c2");
            out.closeWhenUnused();
            assertEquals(1, p.stats(PoolLifetime.EXPORTED).liveCount());
            l1.close();
            assertEquals(1, p.stats(PoolLifetime.EXPORTED).liveCount());
            l2.close();
            PoolStats s = p.stats(PoolLifetime.EXPORTED);
            assertEquals(0, s.liveCount());
            assertEquals(1, s.retainedCount());
            assertEquals(0, p.stats(PoolLifetime.LOCAL).retainedCount(), "lifetimes are kept apart");
        }
        try (VirtualMemoryResource none = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .handleType(HandleType.NONE).build());
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(none).build()) {
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(1)), "POSIX_FD");
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(1, Stream.legacy(0))), "POSIX_FD");
        }
    }

    @Test
    void poolNeverClosesItsResourceAndAResourceClosedUnderAPool() {
        VirtualMemoryPool p = VirtualMemoryPool.builder().resource(resource).build();
        VirtualMemoryBuffer a = p.allocate(g);
        a.close();
        p.close();
        assertFalse(resource.isClosed());
        VirtualMemoryPool q = VirtualMemoryPool.builder().resource(resource).build();
        VirtualMemoryBuffer b = q.allocate(g);
        b.close();
        resource.close();
        VirtualMemoryBuffer reused = q.allocate(g); // idle memory: no resource needed
        reused.close();
        assertNames(assertThrows(IllegalStateException.class, () -> q.allocate(4 * g)), "closed");
        q.close();
    }
}
