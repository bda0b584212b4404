package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.*;

import java.lang.management.ManagementFactory;

import javax.management.ObjectName;

import org.cuvmm.BufferOrigin;
import org.cuvmm.HandleType;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.Test;

/** VirtualMemoryPool's javadoc, read as a user would: the promises no other test checks. */
class VirtualMemoryPoolJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    private static VirtualMemoryPool pool(VirtualMemoryResource r) {
        return VirtualMemoryPool.builder().resource(r).build();
    }

    /** Builder defaults: pool-N name, unbounded caps, sample rate 64, not closed. */
    @Test
    void builderDefaults() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            assertTrue(p.name().matches("pool-\\d+"), p.name());
            assertEquals(Long.MAX_VALUE, p.retentionCap(PoolLifetime.LOCAL));
            assertEquals(Long.MAX_VALUE, p.retentionCap(PoolLifetime.EXPORTED));
            assertEquals(VirtualMemoryPool.Builder.DEFAULT_LEAK_SAMPLE_RATE, p.leakSampleRate());
            assertEquals(64, p.leakSampleRate());
            assertSame(r, p.resource());
            assertFalse(p.isClosed());
            assertEquals(r.granularity(), p.sizeClasses().granularity());
            assertEquals(Long.MAX_VALUE, p.stats(PoolLifetime.LOCAL).retentionCapBytes());
            assertEquals(p.name(), p.stats(PoolLifetime.EXPORTED).poolName());
            assertEquals(PoolLifetime.EXPORTED, p.stats(PoolLifetime.EXPORTED).lifetime());
        }
    }

    /** build(): the refusals it documents, each naming what is wrong. */
    @Test
    void buildRefusals() {
        assertNames(assertThrows(NullPointerException.class, () -> VirtualMemoryPool.builder().build()), "resource");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            assertNames(assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryPool.builder().resource(r).name("  ").build()), "name");
            assertNames(assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryPool.builder().resource(r).name("").build()), "name");
            assertNames(assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryPool.builder().resource(r).retentionCap(PoolLifetime.LOCAL, -1).build()),
                    "LOCAL", "-1");
            assertNames(assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryPool.builder().resource(r).retentionCap(PoolLifetime.EXPORTED, -2).build()),
                    "EXPORTED", "-2");
            assertNames(assertThrows(IllegalArgumentException.class,
                    () -> VirtualMemoryPool.builder().resource(r).leakSampleRate(-1).build()), "leakSampleRate", "-1");
            assertNames(assertThrows(NullPointerException.class,
                    () -> VirtualMemoryPool.builder().retentionCap(null, 0)), "lifetime");
        }
        VirtualMemoryResource closed = VirtualMemoryResource.create(0);
        closed.close();
        assertNames(assertThrows(IllegalStateException.class, () -> VirtualMemoryPool.builder().resource(closed).build()),
                "resource", "closed");
    }

    /** Builder settings are applied. */
    @Test
    void builderSettingsAreApplied() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).name("jd-settings")
                     .retentionCap(PoolLifetime.LOCAL, 0).retentionCap(PoolLifetime.EXPORTED, 4L << 20)
                     .leakSampleRate(0).build()) {
            assertEquals("jd-settings", p.name());
            assertEquals(0, p.retentionCap(PoolLifetime.LOCAL));
            assertEquals(4L << 20, p.retentionCap(PoolLifetime.EXPORTED));
            assertEquals(0, p.leakSampleRate());
        }
    }

    /** allocate: size() is the request, mappedSize() its class, origin POOLED; allocate(0) the empty buffer. */
    @Test
    void allocateSizesAndTheEmptyBuffer() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long g = r.granularity();
            try (VirtualMemoryBuffer b = p.allocate(3 * g / 2)) {
                assertEquals(3 * g / 2, b.size());
                assertEquals(p.sizeClasses().classSize(p.sizeClasses().sizeIdx(3 * g / 2)), b.mappedSize());
                assertEquals(2 * g, b.mappedSize());
                assertEquals(BufferOrigin.POOLED, b.origin());
            }
            try (VirtualMemoryBuffer e = p.allocate(0)) {
                assertEquals(0, e.size());
                assertNotEquals(BufferOrigin.POOLED, e.origin());
            }
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(1, s.misses(), "allocate(0) is not pooled");
            assertEquals(0, s.hits());
            assertEquals(0, s.liveCount());
        }
    }

    /** allocate: IAE when negative or larger than maxClassSize, naming reqSize. */
    @Test
    void allocateSizeRefusals() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long tooBig = p.sizeClasses().maxClassSize() + 1;
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(-1)), "reqSize", "-1");
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(tooBig)),
                    "reqSize", String.valueOf(tooBig));
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(Long.MAX_VALUE)), "reqSize");
            try (Stream s = Stream.create(0)) {
                assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(tooBig, s)), "reqSize");
                assertNames(assertThrows(IllegalArgumentException.class, () -> p.allocate(-5, s)), "reqSize");
            }
            assertEquals(0, p.stats(PoolLifetime.LOCAL).misses());
        }
    }

    /** allocate(size, stream): NPE for null, ISE for a closed stream, naming it. */
    @Test
    void allocateOnStreamRefusals() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            assertNames(assertThrows(NullPointerException.class, () -> p.allocate(1, null)), "stream");
            Stream s = Stream.create(0);
            s.close();
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(1, s)), "stream", "closed");
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(0, s)), "stream", "closed");
        }
    }

    /** allocateExported: ISE over a resource that cannot export (names POSIX_FD). */
    @Test
    void allocateExportedNeedsAnExportingResource() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build());
             VirtualMemoryPool p = pool(r); Stream s = Stream.create(0)) {
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(1)), "POSIX_FD");
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(1, s)), "POSIX_FD");
        }
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            assertNames(assertThrows(NullPointerException.class, () -> p.allocateExported(1, null)), "stream");
            Stream s = Stream.create(0);
            s.close();
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(1, s)), "stream", "closed");
        }
    }

    /** allocateExported(0): the resource's empty buffer. */
    @Test
    void allocateExportedZeroIsTheEmptyBuffer() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0,
                VirtualMemoryResourceOptions.builder().handleType(HandleType.POSIX_FD).build());
             VirtualMemoryPool p = pool(r)) {
            try (VirtualMemoryBuffer e = p.allocateExported(0)) {
                assertEquals(0, e.size());
            }
            assertEquals(0, p.stats(PoolLifetime.EXPORTED).misses());
        }
    }

    /** Closed pool: allocate refuses with ISE naming the pool; close idempotent; live buffers stay valid. */
    @Test
    void aClosedPoolRefusesAllocationAndLiveBuffersStayValid() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).name("jd-closed").build();
            VirtualMemoryBuffer live = p.allocate(4);
            p.close();
            p.close();
            assertTrue(p.isClosed());
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(1)), "jd-closed", "closed");
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(0)), "jd-closed", "closed");
            live.fill((byte) 7);
            byte[] got = new byte[4];
            live.copyTo(0, got, 0, 4);
            assertArrayEquals(new byte[] {7, 7, 7, 7}, got);
            long released = r.granularity();
            live.close();
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.liveCount());
            assertEquals(0, s.retainedCount(), "a return to a closed pool is released, not kept");
            assertEquals(released, s.trimmedBytes());
            assertFalse(r.isClosed(), "the pool never closes its resource");
        }
    }

    /** trim(): returns the capacity released; retained becomes 0; live untouched. */
    @Test
    void trimReturnsTheCapacityReleased() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long g = r.granularity();
            VirtualMemoryBuffer a = p.allocate(g);
            VirtualMemoryBuffer b = p.allocate(3 * g);
            try (VirtualMemoryBuffer live = p.allocate(g)) {
                a.close();
                b.close();
                assertEquals(4 * g, p.stats(PoolLifetime.LOCAL).retainedBytes());
                assertEquals(0, p.trim(PoolLifetime.EXPORTED));
                assertEquals(4 * g, p.trim(PoolLifetime.LOCAL));
                assertEquals(0, p.trim());
                PoolStats s = p.stats(PoolLifetime.LOCAL);
                assertEquals(0, s.retainedBytes());
                assertEquals(1, s.liveCount());
                assertEquals(4 * g, s.trimmedBytes());
                assertThrows(NullPointerException.class, () -> p.trim(null));
            }
        }
    }

    /** setRetentionCap: returns what it released now; evicts least-recently-freed first; refusals. */
    @Test
    void setRetentionCapEvictsOldestAndReturnsBytes() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long g = r.granularity();
            VirtualMemoryBuffer older = p.allocate(g);
            VirtualMemoryBuffer newer = p.allocate(2 * g);
            older.close();
            newer.close();
            assertEquals(g, p.setRetentionCap(PoolLifetime.LOCAL, 2 * g));
            assertEquals(2 * g, p.retentionCap(PoolLifetime.LOCAL));
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(1, s.retainedCount());
            assertEquals(2 * g, s.retainedBytes());
            assertEquals(1, s.evictions());
            assertEquals(g, s.evictedBytes());
            assertEquals(2 * g, s.retentionCapBytes());
            assertNames(assertThrows(IllegalArgumentException.class, () -> p.setRetentionCap(PoolLifetime.LOCAL, -1)),
                    "capBytes", "-1");
            assertEquals(2 * g, p.retentionCap(PoolLifetime.LOCAL), "a refused cap changes nothing");
            assertThrows(NullPointerException.class, () -> p.setRetentionCap(null, 0));
            assertThrows(NullPointerException.class, () -> p.retentionCap(null));
            assertThrows(NullPointerException.class, () -> p.stats(null));
            assertEquals(0, p.setRetentionCap(PoolLifetime.LOCAL, Long.MAX_VALUE));
        }
    }

    /** "A single buffer larger than the cap is released when it is closed instead of kept" (an eviction). */
    @Test
    void aBufferLargerThanTheCapIsReleasedAtClose() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long g = r.granularity();
            p.setRetentionCap(PoolLifetime.LOCAL, g);
            p.allocate(2 * g).close();
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.retainedCount());
            assertEquals(1, s.evictions());
            assertEquals(2 * g, s.evictedBytes());
            assertEquals(0, s.liveCount());
        }
    }

    /** Reuse: the most recently freed idle buffer of the class; then a larger class within 2x; hits counted. */
    @Test
    void reuseOrderAndLargerClassHits() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long g = r.granularity();
            VirtualMemoryBuffer a = p.allocate(g);
            VirtualMemoryBuffer b = p.allocate(g);
            long addrB = b.address();
            a.close();
            b.close();
            try (VirtualMemoryBuffer again = p.allocate(g / 2)) {
                assertEquals(addrB, again.address(), "the most recently freed first");
                assertEquals(g / 2, again.size());
            }
            p.trim();
            p.allocate(2 * g).close();
            try (VirtualMemoryBuffer small = p.allocate(g)) {
                assertEquals(2 * g, small.mappedSize(), "a reused buffer keeps its class");
                assertEquals(g, small.size());
            }
            p.trim();
            p.allocate(3 * g).close();
            try (VirtualMemoryBuffer small = p.allocate(g)) {
                assertEquals(g, small.mappedSize(), "3g is more than 2x 1g: not reused");
            }
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(2, s.hits());
            assertEquals(1, s.largerClassHits());
            assertEquals(5, s.misses());
        }
    }

    /** Stats: live, requested, peak. */
    @Test
    void liveRequestedAndPeak() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            long g = r.granularity();
            try (VirtualMemoryBuffer a = p.allocate(g + 1); VirtualMemoryBuffer b = p.allocate(5)) {
                PoolStats s = p.stats(PoolLifetime.LOCAL);
                assertEquals(2, s.liveCount());
                assertEquals(3 * g, s.liveBytes());
                assertEquals(g + 6, s.liveRequestedBytes());
                assertEquals(3 * g, s.peakLiveBytes());
            }
            PoolStats s = p.stats(PoolLifetime.LOCAL);
            assertEquals(0, s.liveCount());
            assertEquals(0, s.liveBytes());
            assertEquals(0, s.liveRequestedBytes());
            assertEquals(3 * g, s.peakLiveBytes());
            assertEquals(3 * g, s.retainedBytes());
            PoolStats snapshot = s;
            p.trim();
            assertEquals(3 * g, snapshot.retainedBytes(), "a snapshot does not change");
        }
    }

    /** objectName: the documented form; a name with odd characters is quoted; NPE for null. */
    @Test
    void objectNames() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).name("jd-plain").build();
             VirtualMemoryPool q = VirtualMemoryPool.builder().resource(r).name("jd odd,name=x:*").build()) {
            assertEquals(new ObjectName("org.cuvmm:type=VirtualMemoryPool,name=jd-plain,lifetime=local"),
                    p.objectName(PoolLifetime.LOCAL));
            assertEquals(new ObjectName("org.cuvmm:type=VirtualMemoryPool,name=jd-plain,lifetime=exported"),
                    p.objectName(PoolLifetime.EXPORTED));
            ObjectName odd = q.objectName(PoolLifetime.LOCAL);
            assertEquals(ObjectName.quote("jd odd,name=x:*"), odd.getKeyProperty("name"));
            assertEquals("org.cuvmm", odd.getDomain());
            assertFalse(ManagementFactory.getPlatformMBeanServer().isRegistered(p.objectName(PoolLifetime.LOCAL)),
                    "registerMBeans defaults to false");
            assertThrows(NullPointerException.class, () -> p.objectName(null));
        }
    }

    /** registerMBeans(true): both beans exist until close; a second pool of that name is refused (ISE). */
    @Test
    void beansAreRegisteredUntilCloseAndNamesAreUnique() {
        javax.management.MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryPool p = VirtualMemoryPool.builder().resource(r).name("jd-beans").registerMBeans(true).build();
            try {
                assertTrue(server.isRegistered(p.objectName(PoolLifetime.LOCAL)));
                assertTrue(server.isRegistered(p.objectName(PoolLifetime.EXPORTED)));
                assertNames(assertThrows(IllegalStateException.class, () -> VirtualMemoryPool.builder().resource(r)
                        .name("jd-beans").registerMBeans(true).build()), "jd-beans");
                assertTrue(server.isRegistered(p.objectName(PoolLifetime.LOCAL)), "the refused pool took no bean");
                try (VirtualMemoryPool same = VirtualMemoryPool.builder().resource(r).name("jd-beans").build()) {
                    assertEquals("jd-beans", same.name(), "without beans the name may repeat");
                }
            } finally {
                p.close();
            }
            assertFalse(server.isRegistered(p.objectName(PoolLifetime.LOCAL)));
            assertFalse(server.isRegistered(p.objectName(PoolLifetime.EXPORTED)));
            try (VirtualMemoryPool again = VirtualMemoryPool.builder().resource(r).name("jd-beans").registerMBeans(true)
                    .build()) {
                assertTrue(server.isRegistered(again.objectName(PoolLifetime.LOCAL)));
            }
        }
    }

    /** "Live and leased buffers are never evicted": a cap of 0 keeps nothing idle but leaves live buffers be. */
    @Test
    void capZeroNeverTouchesLiveBuffers() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryPool p = pool(r)) {
            try (VirtualMemoryBuffer live = p.allocate(1)) {
                assertEquals(0, p.setRetentionCap(PoolLifetime.LOCAL, 0));
                live.fill((byte) 3);
                assertEquals(1, p.stats(PoolLifetime.LOCAL).liveCount());
            }
            assertEquals(0, p.stats(PoolLifetime.LOCAL).retainedCount());
        }
    }

    /**
     * allocate(0) over a closed resource: the javadoc listed ISE for a closed resource only
     * "when new memory is needed"; allocate(0) asks the resource for its empty buffer, which a
     * closed resource refuses. Pinned here; the javadoc now says so.
     */
    @Test
    void allocateZeroOverAClosedResourceIsRefused() {
        VirtualMemoryResource r = VirtualMemoryResource.create(0);
        try (VirtualMemoryPool p = pool(r)) {
            VirtualMemoryBuffer kept = p.allocate(1);
            kept.close();
            r.close();
            try (VirtualMemoryBuffer reused = p.allocate(1)) {
                assertEquals(1, reused.size(), "idle memory is still handed out");
            }
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocate(0)), "closed");
            assertNames(assertThrows(IllegalStateException.class, () -> p.allocateExported(0)), "closed");
        }
    }
}
