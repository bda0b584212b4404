package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame2;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The client's import cache (protocol version 2) in one process: the LRU bounds and the fds
 * received again after an eviction, EVICT of idle and leased cached mappings, a cache of 0,
 * and no fd or mapping left behind.
 */
class ImportCacheTest {
    private Path sock;
    private VirtualMemoryResource resource;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
    }

    @AfterEach
    void tearDown() {
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    private long[] live() {
        DriverCounters c = Driver.get().counters();
        return new long[] {c.liveAllocations(), c.liveReservations(), c.liveMappings(), c.liveRanges()};
    }

    @Test
    void aCacheBoundedToOneEntryReReceivesFdsAfterEviction() throws Exception {
        long g = resource.granularity();
        VirtualMemoryBuffer a = resource.allocate(g);
        VirtualMemoryBuffer b = resource.allocate(2 * g);
        BytePattern.fill(a, 1);
        BytePattern.fill(b, 2);
        try (SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("a", a);
            server.publish("b", b);
            // Warm up, then the baseline.
            try (SharingClient c = SharingClient.connect(sock); Attachment x = c.attach("a", resource)) {
                x.buffer().size();
            }
            await("the warm-up connection gone", 5, () -> server.connectionCount() == 0);
            Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
            String live = java.util.Arrays.toString(live());
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(1).build()) {
                ImportCache cache = c.importCache();
                attachAndCheck(c, "a", 1);
                attachAndCheck(c, "a", 1);
                assertEquals(1, cache.stats().hits());
                assertEquals(1, cache.stats().fdsReceived());
                attachAndCheck(c, "b", 2); // the second entry: "a" (idle, least recent) is evicted
                await("a's id forgotten (FORGOTTEN closes its kept fd)", 5, () -> cache.stats().fdsKept() == 1);
                assertEquals(1, cache.stats().entries());
                assertEquals(1, cache.stats().evictions());
                assertEquals(1, cache.stats().forgets());
                assertEquals(1, server.stats().idsHeld(), "the server forgot a's id");
                attachAndCheck(c, "a", 1); // a's fd comes again; b is evicted in turn
                assertEquals(3, cache.stats().fdsReceived(), "a's fd received a second time: " + cache);
                assertEquals(3, cache.stats().misses());
                assertEquals(4, server.stats().fdsSent(), "the warm-up's fd, a, b and a again");
            }
            IpcTestSupport.assertFdsBack(fds, "after closing the client");
            assertEquals(live, java.util.Arrays.toString(live()), "live allocations, reservations, mappings, ranges");
        } finally {
            a.close();
            b.close();
        }
    }

    /**
     * {@code Stats.fdsKept()} ("fds kept open") counts a kept fd until it is closed, so a caller
     * that waits for it to drop and then checks the process's fds finds the fd closed. (The count
     * dropped when the fd was taken out of its id under the lock; the close itself ran after the
     * lock, so the fd was still open while the count no longer showed it.) Deterministic: the
     * seam runs right before each kept fd is closed and reads the count and the fd there, for
     * the close at FORGOTTEN (an LRU eviction) and the close at the connection's end.
     */
    @Test
    void fdsKeptCountsAKeptFdUntilItIsClosed() throws Exception {
        long g = resource.granularity();
        List<String> atClose = new CopyOnWriteArrayList<>();
        java.util.concurrent.atomic.AtomicReference<ImportCache> cacheRef = new java.util.concurrent.atomic.AtomicReference<>();
        try (VirtualMemoryBuffer a = resource.allocate(g);
             VirtualMemoryBuffer b = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("a", a);
            server.publish("b", b);
            ImportCache.beforeFdCloseForTest = fd -> {
                ImportCache cache = cacheRef.get();
                if (cache == null) return;
                atClose.add("fdsKept=" + cache.stats().fdsKept() + " open=" + java.nio.file.Files.exists(
                        Path.of("/proc/self/fd/" + fd), java.nio.file.LinkOption.NOFOLLOW_LINKS));
            };
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(1).build()) {
                cacheRef.set(c.importCache());
                c.attach("a", resource).close(); // kept: one entry, a's fd
                c.attach("b", resource).close(); // a is evicted: FORGET, and FORGOTTEN closes a's fd
                await("a's kept fd closed at FORGOTTEN", 10, () -> atClose.size() == 1);
                await("the count after it", 10, () -> c.importCache().stats().fdsKept() == 1);
            } // the end: b's kept fd is closed
            assertEquals(List.of("fdsKept=2 open=true", "fdsKept=1 open=true"), atClose,
                    "the count right before each kept fd was closed (the fd must still be counted there)");
        } finally {
            ImportCache.beforeFdCloseForTest = null;
        }
    }

    @Test
    void aGrownBufferIsImportedFromTheKeptFdPlusTheNewChunksFd() throws Exception {
        long g = resource.granularity();
        try (VirtualMemoryBuffer small = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            BytePattern.fill(small, 6);
            server.publish("small", small);
            attachAndCheck(c, "small", 6);
            try (VirtualMemoryBuffer grown = resource.modifyAllocation(small, 2 * g)) {
                assertEquals(2, grown.chunkCount());
                assertEquals(small.allocationIds()[0], grown.allocationIds()[0], "the first chunk is the same allocation");
                BytePattern.fill(grown, 7);
                server.publish("grown", grown);
                long sent = server.stats().fdsSent();
                attachAndCheck(c, "grown", 7);
                assertEquals(sent + 1, server.stats().fdsSent(), "only the new chunk's fd travels");
                ImportCache.Stats s = c.importCache().stats();
                assertEquals(2, s.fdsReceived(), s.toString());
                assertEquals(2, s.misses(), "a new shape: imported, from the kept fd and the new one");
                assertEquals(2, s.entries());
                assertEquals(2, s.idsHeld());
                attachAndCheck(c, "grown", 7);
                assertEquals(1, c.importCache().stats().hits());
                server.unpublish("grown");
            }
        }
    }

    @Test
    void concurrentAttachesShareOneCachedImport() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            BytePattern.fill(owner.buffer, 11);
            server.publish("three", owner.buffer);
            int threads = 4;
            int each = 40;
            java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(threads);
            try {
                List<java.util.concurrent.Future<?>> done = new java.util.ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    done.add(pool.submit(() -> {
                        for (int i = 0; i < each; i++) {
                            try (Attachment a = c.attach("three", resource)) {
                                if (i % 10 == 0) BytePattern.verify(a.buffer(), 11);
                            }
                        }
                        return null;
                    }));
                }
                for (java.util.concurrent.Future<?> f : done) f.get(60, TimeUnit.SECONDS);
            } finally {
                pool.shutdownNow();
            }
            ImportCache.Stats s = c.importCache().stats();
            assertEquals(threads * each, s.hits() + s.misses(), s.toString());
            assertEquals(1, s.entries(), "one kept import for the one shape: " + s);
            assertEquals(3, s.fdsReceived(), "each allocation's fd once: " + s);
            assertEquals(3, s.idsHeld());
            assertEquals(0, server.totalLeaseCount());
            assertEquals(3, server.stats().idsHeld());
        }
    }

    @Test
    void atTheServersIdLimitTheCacheGivesBackIdleMappingsAndTheAttachIsAskedAgain() throws Exception {
        long g = resource.granularity();
        try (VirtualMemoryBuffer a = resource.allocate(g); VirtualMemoryBuffer b = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(1).build();
             SharingClient c = SharingClient.connect(sock)) {
            BytePattern.fill(a, 1);
            BytePattern.fill(b, 2);
            server.publish("a", a);
            server.publish("b", b);
            attachAndCheck(c, "a", 1); // holds a's id: the connection's one id
            attachAndCheck(c, "b", 2); // TOO_MANY_IDS, a forgotten, asked again
            ImportCache.Stats s = c.importCache().stats();
            assertEquals(1, s.entries(), s.toString());
            assertEquals(1, s.evictions(), s.toString());
            assertEquals(1, server.stats().idsHeld());
            try (Attachment held = c.attach("b", resource)) {
                // With b leased nothing is idle: a's attach is refused for good.
                SharingException e = org.junit.jupiter.api.Assertions.assertThrows(SharingException.class,
                        () -> c.attach("a", resource));
                assertEquals(ErrorCode.TOO_MANY_IDS, e.code(), e.getMessage());
                BytePattern.verify(held.buffer(), 2);
            }
        }
    }

    @Test
    void theByteBoundEvictsToo() throws Exception {
        long g = resource.granularity();
        try (VirtualMemoryBuffer a = resource.allocate(g); VirtualMemoryBuffer b = resource.allocate(g);
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxBytes(g).build()) {
            BytePattern.fill(a, 1);
            BytePattern.fill(b, 2);
            server.publish("a", a);
            server.publish("b", b);
            attachAndCheck(c, "a", 1);
            attachAndCheck(c, "b", 2);
            ImportCache.Stats s = c.importCache().stats();
            assertEquals(1, s.entries(), s.toString());
            assertEquals(g, s.bytes());
            assertEquals(1, s.evictions());
        }
    }

    @Test
    void aCacheOfZeroForgetsEachIdAtRelease() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.builder(sock).cacheMaxEntries(0).build()) {
            BytePattern.fill(owner.buffer, 3);
            server.publish("three", owner.buffer);
            for (int i = 1; i <= 3; i++) {
                try (Attachment a = c.attach("three", resource)) {
                    assertEquals(org.cuvmm.BufferOrigin.IMPORTED, a.buffer().origin(), "no cache: the import itself");
                    BytePattern.verify(a.buffer(), 3);
                }
                int round = i;
                await("round " + i + "'s ids forgotten", 5, () -> server.stats().idsHeld() == 0
                        && c.importCache().stats().fdsKept() == 0 && c.importCache().stats().forgets() == 3L * round);
            }
            assertEquals(9, c.importCache().stats().fdsReceived(), "every fd every time, as in version 1");
            assertEquals(0, c.importCache().stats().hits());
        }
    }

    @Test
    void anEvictClosesAnIdleCachedMappingAndTheClientForgets() throws Exception {
        try (SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            VirtualMemoryBuffer b = resource.allocate(resource.granularity());
            BytePattern.fill(b, 8);
            server.publish("b", b);
            attachAndCheck(c, "b", 8);
            assertEquals(1, c.importCache().stats().entries());
            server.unpublish("b");
            b.close(); // really released: EVICT
            await("the client's FORGET processed", 10, () -> server.stats().idsHeld() == 0);
            ImportCache.Stats s = c.importCache().stats();
            assertEquals(0, s.entries(), s.toString());
            assertEquals(0, s.fdsKept(), s.toString());
            assertEquals(0, s.idsHeld(), s.toString());
            assertEquals(0, server.stats().releasedStillMappedAllocations());
        }
    }

    /**
     * After the connection ends the client holds no id on any server, also while a lease of
     * that connection still maps the memory (a probe: idsHeld stayed 1 until the attachment closed).
     */
    @Test
    void noIdIsHeldOnceTheConnectionEnded() throws Exception {
        SharingClient c;
        Attachment a;
        try (SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer b = resource.allocate(resource.granularity());
            BytePattern.fill(b, 9);
            server.publish("b", b);
            c = SharingClient.connect(sock);
            a = c.attach("b", resource);
            assertEquals(1, c.importCache().stats().idsHeld());
            server.unpublish("b");
            b.closeWhenUnused();
        }
        try {
            await("the client to see the end", 10, () -> !c.isConnected());
            // isConnected() turns false when the requests fail, just before the cache hears of
            // the end on the same thread (once failed 1 in 12 in a batch: an independent probe).
            await("the cache to drop the ids", 10, () -> c.importCache().stats().idsHeld() == 0);
            ImportCache.Stats s = c.importCache().stats();
            assertEquals(0, s.idsHeld(), s.toString());
            BytePattern.verify(a.buffer(), 9); // the attachment still reads what it mapped
        } finally {
            a.close();
            c.close();
        }
        assertEquals(0, c.importCache().stats().fdsKept());
    }

    /**
     * A fake version-2 server sends EVICT while the client holds a lease on the cached
     * mapping: the mapping stays (readable, no FORGET) until the lease ends; then RELEASE and
     * FORGET both go out.
     */
    @Test
    void anEvictWhileLeasedUnmapsOnlyWhenTheLeaseEnds() throws Exception {
        VirtualMemoryBuffer local = resource.allocate(resource.granularity());
        BytePattern.fill(local, 9);
        List<String> seen = new CopyOnWriteArrayList<>();
        try (FdServerSocket fake = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> serving = CompletableFuture.runAsync(() -> {
                try (FdSocket s = fake.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        assertEquals(2, hello.version);
                        s.send(frame2(2, hello.requestId, new byte[] {0, 2, 0, (byte) 253}), null);
                    }
                    try (Frame attach = FrameIO.read(s); BufferDescriptor d = local.exportDescriptor()) {
                        byte[] p = new Messages.DescriptorV2(7, 1, local.size(), new long[] {local.mappedSize()},
                                new long[] {5}, new int[] {1}).encode();
                        d.useFds(fds -> s.send(frame2(4, attach.requestId, p), fds));
                    }
                    s.send(frame2(11, 0, new Messages.Evict(new long[] {5}).encode()), null);
                    for (int i = 0; i < 2; i++) {
                        try (Frame f = FrameIO.read(s)) {
                            seen.add(f.type + (f.message instanceof Messages.Forget g ? java.util.Arrays.toString(g.ids())
                                    : ""));
                            if (f.type == FrameType.RELEASE) {
                                s.send(frame2(6, f.requestId, new Messages.Released(7).encode()), null);
                            } else if (f.type == FrameType.FORGET) {
                                s.send(frame2(10, f.requestId, new Messages.Forgotten(1).encode()), null);
                            }
                        }
                    }
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "leased")) {
                assertEquals(2, c.protocolVersion());
                Attachment a = c.attach("x", resource);
                await("the EVICT read: the entry left the cache", 5, () -> c.importCache().stats().entries() == 0);
                assertEquals(List.of(), seen, "no FORGET while the lease maps it");
                // Counted under the cache's lock with the EVICT: no FORGET queued, the kept fd closed.
                assertEquals(0, c.importCache().stats().forgets(), c.importCache().toString());
                assertEquals(0, c.importCache().stats().fdsKept(), c.importCache().toString());
                BytePattern.verify(a.buffer(), 9); // still mapped: the lease is held
                a.close();
                serving.get(10, TimeUnit.SECONDS);
                // Both once the lease's mapping is gone; from two threads, so in either order.
                assertEquals(java.util.Set.of("RELEASE", "FORGET[5]"), java.util.Set.copyOf(seen), seen.toString());
                await("the kept fd closed", 5, () -> c.importCache().stats().fdsKept() == 0);
            }
        } finally {
            local.close();
        }
    }

    /**
     * A fake version-2 server EVICTs id 5 while the client's lease maps it, then names id 5
     * without its fd in another DESCRIPTOR: rejected with UNKNOWN_ID (no import from a
     * closed fd), the first lease still readable.
     */
    @Test
    void aDescriptorNamingAnEvictedIdIsRejected() throws Exception {
        long g = resource.granularity();
        VirtualMemoryBuffer local = resource.allocate(g);
        BytePattern.fill(local, 6);
        try (FdServerSocket fake = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> serving = CompletableFuture.runAsync(() -> {
                try (FdSocket s = fake.accept()) {
                    answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s); BufferDescriptor d = local.exportDescriptor()) {
                        byte[] p = new Messages.DescriptorV2(1, 1, g, new long[] {g}, new long[] {5}, new int[] {1})
                                .encode();
                        d.useFds(fds -> s.send(frame2(4, attach.requestId, p), fds));
                    }
                    s.send(frame2(11, 0, new Messages.Evict(new long[] {5}).encode()), null);
                    try (Frame attach = FrameIO.read(s)) {
                        byte[] p = new Messages.DescriptorV2(2, 1, g, new long[] {g}, new long[] {5}, new int[] {0})
                                .encode();
                        s.send(frame2(4, attach.requestId, p), null);
                    }
                    answerUntilClosed(s);
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "evicted")) {
                Attachment a = c.attach("x", resource);
                await("the EVICT read", 10, () -> c.importCache().stats().entries() == 0);
                SharingException e = org.junit.jupiter.api.Assertions.assertThrows(SharingException.class,
                        () -> c.attach("x", resource));
                assertEquals(ErrorCode.UNKNOWN_ID, e.code(), e.getMessage());
                BytePattern.verify(a.buffer(), 6);
                a.close();
            }
            serving.get(10, TimeUnit.SECONDS);
        } finally {
            local.close();
        }
    }

    /**
     * A fake version-2 server names, without its fd, an id it never gave: the client rejects
     * the DESCRIPTOR (ERROR UNKNOWN_ID back, RELEASE of the lease: both sent on the connection,
     * which stays open) and the attach fails.
     */
    @Test
    void aDescriptorNamingAnIdTheClientDoesNotHoldIsRejected() throws Exception {
        List<String> seen = new CopyOnWriteArrayList<>();
        try (FdServerSocket fake = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> serving = CompletableFuture.runAsync(() -> {
                try (FdSocket s = fake.accept()) {
                    answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s)) {
                        byte[] p = new Messages.DescriptorV2(9, 1, 4096, new long[] {resource.granularity()},
                                new long[] {42}, new int[] {0}).encode();
                        s.send(frame2(4, attach.requestId, p), null);
                    }
                    for (int i = 0; i < 2; i++) {
                        try (Frame f = FrameIO.read(s)) {
                            seen.add(f.type + (f.message instanceof Messages.Error e ? " " + e.errorCode() : "")
                                    + (f.message instanceof Messages.Release r ? " " + r.leaseId() : ""));
                            if (f.type == FrameType.RELEASE) {
                                s.send(frame2(6, f.requestId, new Messages.Released(9).encode()), null);
                            }
                        }
                    }
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "strict")) {
                SharingException e = org.junit.jupiter.api.Assertions.assertThrows(SharingException.class,
                        () -> c.attach("x", resource));
                assertEquals(ErrorCode.UNKNOWN_ID, e.code(), e.getMessage());
                assertTrue(e.getMessage().contains("names id 42 without its fd"), e.getMessage());
                serving.get(10, TimeUnit.SECONDS);
                assertEquals(java.util.Set.of("ERROR UNKNOWN_ID", "RELEASE 9"), java.util.Set.copyOf(seen), seen.toString());
                assertEquals(0, c.importCache().stats().idsHeld());
            }
        }
    }

    /**
     * A fake version-2 server sends a DESCRIPTOR whose chunk has the FD flag (new id 5) but
     * no fd: the client rejects it (FD_COUNT_MISMATCH) with ERROR and RELEASE, and FORGETs id
     * 5, which the server counted as held from the moment it sent it (PROTOCOL.md 13.3);
     * once FORGOTTEN, a second attach receives the fd and works.
     */
    @Test
    void aRejectedDescriptorsNewIdsAreForgottenSoALaterAttachWorks() throws Exception {
        long g = resource.granularity();
        VirtualMemoryBuffer local = resource.allocate(g);
        BytePattern.fill(local, 4);
        List<String> seen = new CopyOnWriteArrayList<>();
        try (FdServerSocket fake = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> serving = CompletableFuture.runAsync(() -> {
                try (FdSocket s = fake.accept()) {
                    answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s)) {
                        byte[] p = new Messages.DescriptorV2(1, 1, g, new long[] {g}, new long[] {5}, new int[] {1})
                                .encode();
                        s.send(frame2(4, attach.requestId, p), null); // FD flag, no fd
                    }
                    for (int i = 0; i < 3; i++) {
                        try (Frame f = FrameIO.read(s)) {
                            seen.add(f.type + (f.message instanceof Messages.Forget fg
                                    ? java.util.Arrays.toString(fg.ids()) : ""));
                            if (f.type == FrameType.RELEASE) {
                                s.send(frame2(6, f.requestId, new Messages.Released(1).encode()), null);
                            } else if (f.type == FrameType.FORGET) {
                                s.send(frame2(10, f.requestId, new Messages.Forgotten(1).encode()), null);
                            }
                        }
                    }
                    try (Frame attach = FrameIO.read(s); BufferDescriptor d = local.exportDescriptor()) {
                        byte[] p = new Messages.DescriptorV2(2, 1, g, new long[] {g}, new long[] {5}, new int[] {1})
                                .encode();
                        d.useFds(fds -> s.send(frame2(4, attach.requestId, p), fds));
                    }
                    try (Frame release = FrameIO.read(s)) {
                        s.send(frame2(6, release.requestId, new Messages.Released(2).encode()), null);
                    }
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(0).build()) {
                SharingException e = org.junit.jupiter.api.Assertions.assertThrows(SharingException.class,
                        () -> c.attach("x", resource));
                assertEquals(ErrorCode.FD_COUNT_MISMATCH, e.code(), e.getMessage());
                await("ERROR, RELEASE and FORGET[5] read by the fake", 10, () -> seen.size() == 3);
                assertEquals(java.util.Set.of("ERROR", "RELEASE", "FORGET[5]"), java.util.Set.copyOf(seen),
                        seen.toString());
                try (Attachment a = c.attach("x", resource)) {
                    BytePattern.verify(a.buffer(), 4);
                }
                serving.get(10, TimeUnit.SECONDS);
            }
        } finally {
            local.close();
        }
    }

    /**
     * A misbehaving fake server answers the client's FORGET with a DESCRIPTOR (new id 9 and
     * its fd): the client disposes of it (RELEASE of its lease, its id unpinned and forgotten
     * in turn), so no fd stays kept.
     */
    @Test
    void aForgetAnsweredWithADescriptorKeepsNoFd() throws Exception {
        long g = resource.granularity();
        VirtualMemoryBuffer local = resource.allocate(g);
        List<String> seen = new CopyOnWriteArrayList<>();
        try (FdServerSocket fake = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> serving = CompletableFuture.runAsync(() -> {
                try (FdSocket s = fake.accept()) {
                    answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s); BufferDescriptor d = local.exportDescriptor()) {
                        byte[] p = new Messages.DescriptorV2(1, 1, g, new long[] {g}, new long[] {5}, new int[] {1})
                                .encode();
                        d.useFds(fds -> s.send(frame2(4, attach.requestId, p), fds));
                    }
                    boolean answeredWrong = false;
                    for (;;) {
                        Frame next = FrameIO.read(s);
                        if (next == null) break;
                        try (Frame f = next) {
                            seen.add(f.type + (f.message instanceof Messages.Forget fg
                                    ? java.util.Arrays.toString(fg.ids()) : "")
                                    + (f.message instanceof Messages.Release r ? " " + r.leaseId() : ""));
                            if (f.type == FrameType.RELEASE) {
                                s.send(frame2(6, f.requestId, new Messages.Released(((Messages.Release) f.message)
                                        .leaseId()).encode()), null);
                            } else if (f.type == FrameType.FORGET && !answeredWrong) {
                                answeredWrong = true;
                                try (BufferDescriptor d = local.exportDescriptor()) {
                                    byte[] p = new Messages.DescriptorV2(2, 1, g, new long[] {g}, new long[] {9},
                                            new int[] {1}).encode();
                                    d.useFds(fds -> s.send(frame2(4, f.requestId, p), fds));
                                }
                            } else if (f.type == FrameType.FORGET) {
                                s.send(frame2(10, f.requestId, new Messages.Forgotten(1).encode()), null);
                            }
                        }
                    }
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(0).build()) {
                c.attach("x", resource).close(); // RELEASE 1, then FORGET [5] (no cache)
                await("the wrong answer disposed of: lease 2 released, id 9 forgotten", 10,
                        () -> seen.contains("RELEASE 2") && seen.contains("FORGET[9]"));
                await("no fd kept", 10, () -> c.importCache().stats().fdsKept() == 0);
                assertEquals(2, c.importCache().stats().fdsReceived(), c.importCache().toString());
            }
            serving.get(10, TimeUnit.SECONDS);
        } finally {
            local.close();
        }
    }

    /**
     * The FORGET race (docs/PROTOCOL.md 13.10): an ATTACH sent before the client's FORGET of an
     * id is answered after it, naming the id without its fd. The client still holds the kept
     * fd (FORGOTTEN has not come), imports from it without caching, and forgets the id once.
     */
    @Test
    void aDescriptorAnsweringAnAttachSentBeforeForgetUsesTheKeptFd() throws Exception {
        long g = resource.granularity();
        VirtualMemoryBuffer bufA = resource.allocate(g);
        VirtualMemoryBuffer bufC = resource.allocate(g);
        BytePattern.fill(bufA, 1);
        BytePattern.fill(bufC, 3);
        List<String> seen = new CopyOnWriteArrayList<>();
        java.util.concurrent.CountDownLatch attachCRead = new java.util.concurrent.CountDownLatch(1);
        try (FdServerSocket fake = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> serving = CompletableFuture.runAsync(() -> {
                try (FdSocket s = fake.accept()) {
                    answerHelloV2(s);
                    try (Frame attachA = FrameIO.read(s); BufferDescriptor d = bufA.exportDescriptor()) {
                        byte[] p = new Messages.DescriptorV2(1, 1, g, new long[] {g}, new long[] {5}, new int[] {1})
                                .encode();
                        d.useFds(fds -> s.send(frame2(4, attachA.requestId, p), fds));
                    }
                    try (Frame release = FrameIO.read(s)) {
                        s.send(frame2(6, release.requestId, new Messages.Released(1).encode()), null);
                    }
                    Frame attachC = FrameIO.read(s);
                    attachCRead.countDown();
                    Frame attachA2 = FrameIO.read(s); // sent before the FORGET below
                    try (attachC; BufferDescriptor d = bufC.exportDescriptor()) {
                        byte[] p = new Messages.DescriptorV2(2, 1, g, new long[] {g}, new long[] {6}, new int[] {1})
                                .encode();
                        d.useFds(fds -> s.send(frame2(4, attachC.requestId, p), fds));
                    }
                    // Caching c evicts a (one entry at most): the client FORGETs id 5.
                    Frame forget = FrameIO.read(s);
                    seen.add(forget.type + (forget.message instanceof Messages.Forget f
                            ? java.util.Arrays.toString(f.ids()) : ""));
                    try (attachA2) {
                        byte[] p = new Messages.DescriptorV2(3, 1, g, new long[] {g}, new long[] {5}, new int[] {0})
                                .encode();
                        s.send(frame2(4, attachA2.requestId, p), null); // id 5 without its fd: still held here
                    }
                    try (forget) {
                        s.send(frame2(10, forget.requestId, new Messages.Forgotten(1).encode()), null);
                    }
                    for (;;) {
                        Frame next = FrameIO.read(s);
                        if (next == null) break;
                        try (Frame f = next) {
                            seen.add(f.type + (f.message instanceof Messages.Forget fg
                                    ? java.util.Arrays.toString(fg.ids()) : ""));
                            if (f.type == FrameType.RELEASE) {
                                s.send(frame2(6, f.requestId, new Messages.Released(((Messages.Release) f.message)
                                        .leaseId()).encode()), null);
                            } else if (f.type == FrameType.FORGET) {
                                s.send(frame2(10, f.requestId, new Messages.Forgotten(((Messages.Forget) f.message)
                                        .ids().length).encode()), null);
                            }
                        }
                    }
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.builder(sock).cacheMaxEntries(1).build()) {
                try (Attachment a = c.attach("a", resource)) {
                    BytePattern.verify(a.buffer(), 1);
                }
                CompletableFuture<Attachment> first = CompletableFuture.supplyAsync(() -> attachQuietly(c, "c"));
                assertTrue(attachCRead.await(10, TimeUnit.SECONDS), "the fake read ATTACH c");
                Attachment late = c.attach("a", resource); // sent before the FORGET, answered after it
                Attachment cAttached = first.get(10, TimeUnit.SECONDS);
                assertEquals(org.cuvmm.BufferOrigin.IMPORTED, late.buffer().origin(), "imported from the kept fd, "
                        + "not cached: the server no longer counts the id");
                BytePattern.verify(late.buffer(), 1);
                BytePattern.verify(cAttached.buffer(), 3);
                late.close();
                cAttached.close();
                await("id 5's kept fd closed", 5, () -> c.importCache().stats().fdsKept() == 1);
                ImportCache.Stats st = c.importCache().stats();
                assertEquals(1, st.entries(), st.toString());
                assertEquals(1, st.idsHeld(), "only c's id: " + st);
                assertEquals(2, st.fdsReceived(), st.toString());
            }
            serving.get(10, TimeUnit.SECONDS);
            assertEquals(1, seen.stream().filter("FORGET[5]"::equals).count(), "id 5 forgotten once: " + seen);
        } finally {
            bufA.close();
            bufC.close();
        }
    }

    private Attachment attachQuietly(SharingClient c, String name) {
        try {
            return c.attach(name, resource);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** The fake server's side of the handshake: reads HELLO, answers HELLO_OK (version 2, 253 fds). */
    private static void answerHelloV2(FdSocket s) throws java.io.IOException {
        try (Frame hello = FrameIO.read(s)) {
            s.send(frame2(2, hello.requestId, new byte[] {0, 2, 0, (byte) 253}), null);
        }
    }


    private void attachAndCheck(SharingClient c, String name, long seed) throws Exception {
        try (Attachment a = c.attach(name, resource)) {
            BytePattern.verify(a.buffer(), seed);
        }
    }

    /**
     * The fake server's tail: answers RELEASE and FORGET until the client closes. A reply the
     * client no longer reads (it closed its socket after its last request: EPIPE / ECONNRESET)
     * ends the loop; the test has checked what it checks by then.
     */
    private static void answerUntilClosed(FdSocket s) throws java.io.IOException {
        for (;;) {
            Frame next = FrameIO.read(s);
            if (next == null) return;
            try (Frame f = next) {
                if (f.type == FrameType.RELEASE) {
                    s.send(frame2(6, f.requestId, new Messages.Released(((Messages.Release) f.message)
                            .leaseId()).encode()), null);
                } else if (f.type == FrameType.FORGET) {
                    s.send(frame2(10, f.requestId, new Messages.Forgotten(1).encode()), null);
                }
            } catch (java.io.IOException e) {
                return; // the client closed meanwhile
            }
        }
    }
}
