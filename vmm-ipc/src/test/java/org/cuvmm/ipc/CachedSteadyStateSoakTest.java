package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/** Probe: 200k cached v2 rounds in one JVM; fds, mappings, cache stats and heap must not drift. */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class CachedSteadyStateSoakTest {
    static final int ROUNDS = Integer.getInteger("probe.rounds", 200_000);
    static final int FRAMES = 4;

    static long usedHeapAfterGc() throws InterruptedException {
        Runtime rt = Runtime.getRuntime();
        long best = Long.MAX_VALUE;
        for (int i = 0; i < 4; i++) {
            System.gc();
            Thread.sleep(50);
            best = Math.min(best, rt.totalMemory() - rt.freeMemory());
        }
        return best;
    }

    @Test
    void cachedRoundsDoNotDrift() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        List<String> samples = new ArrayList<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryResource importInto = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-steady")
                     .leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient client = SharingClient.connect(sock, "probe-steady")) {
            long g = resource.granularity();
            VirtualMemoryBuffer[] frames = new VirtualMemoryBuffer[FRAMES];
            for (int i = 0; i < FRAMES; i++) {
                frames[i] = pool.allocateExported((1 + i % 2) * g);
                server.publish("f" + i, frames[i]);
            }
            long heap0 = 0;
            Map<String, Integer> fdsW = null;
            long mapsW = 0;
            ImportCache.Stats cacheW = null;
            long idsW = 0;
            long fdsSentW = 0;
            long t0 = System.nanoTime();
            for (int round = 1; round <= ROUNDS; round++) {
                int i = round % FRAMES;
                try (Attachment a = client.attach("f" + i, importInto)) {
                    if (a.buffer().size() != frames[i].size()) throw new AssertionError("size " + a);
                }
                if (round % 1000 == 0) {
                    // the producer replaces a frame: the pool hands the same memory out again
                    int j = (round / 1000) % FRAMES;
                    server.unpublish("f" + j);
                    frames[j].closeWhenUnused();
                    frames[j] = pool.allocateExported((1 + j % 2) * g);
                    server.publish("f" + j, frames[j]);
                }
                if (round % 20_000 == 0) {
                    Map<String, Integer> fds = OpenFds.byKind();
                    long maps = OpenFds.cuvmmMemfdMappings();
                    ImportCache.Stats cs = client.importCache().stats();
                    SharingStats ss = server.stats();
                    long heap = usedHeapAfterGc();
                    String line = "round " + round + " t=" + (System.nanoTime() - t0) / 1_000_000 + "ms fds=" + fds
                            + " maps=" + maps + " cache=" + cs + " serverIds=" + ss.idsHeld() + " fdsSent=" + ss.fdsSent()
                            + " leases=" + server.totalLeaseCount() + " pending=" + client.pendingReleases() + " heap="
                            + heap + " pool=" + pool.stats(PoolLifetime.EXPORTED).liveCount();
                    samples.add(line);
                    System.out.println("CachedSteadyStateSoakTest " + line);
                    if (round == 40_000) {
                        heap0 = heap;
                        fdsW = fds;
                        mapsW = maps;
                        cacheW = cs;
                        idsW = ss.idsHeld();
                        fdsSentW = ss.fdsSent();
                    } else if (round > 40_000) {
                        String all = String.join("\n", samples);
                        assertEquals(fdsW, fds, "fds drift\n" + all);
                        assertEquals(mapsW, maps, "maps drift\n" + all);
                        assertEquals(cacheW.entries(), cs.entries(), "entries drift\n" + all);
                        assertEquals(cacheW.idsHeld(), cs.idsHeld(), "idsHeld drift\n" + all);
                        assertEquals(cacheW.fdsKept(), cs.fdsKept(), "fdsKept drift\n" + all);
                        assertEquals(cacheW.bytes(), cs.bytes(), "bytes drift\n" + all);
                        assertEquals(cacheW.misses(), cs.misses(), "misses grow in steady state\n" + all);
                        assertEquals(cacheW.fdsReceived(), cs.fdsReceived(), "fds received in steady state\n" + all);
                        assertEquals(idsW, ss.idsHeld(), "server ids drift\n" + all);
                        assertEquals(fdsSentW, ss.fdsSent(), "server fds sent in steady state\n" + all);
                        assertEquals(0, server.totalLeaseCount(), all);
                        assertEquals(0, client.pendingReleases(), all);
                        assertTrue(heap - heap0 < 8L << 20, "heap grew " + (heap - heap0) + " bytes\n" + all);
                    }
                }
            }
            for (int i = 0; i < FRAMES; i++) {
                server.unpublish("f" + i);
                frames[i].closeWhenUnused();
            }
            pool.trim();
            IpcTestSupport.await("EVICT/FORGET round trip done", 10,
                    () -> server.stats().idsHeld() == 0 && client.importCache().stats().entries() == 0
                            && client.importCache().stats().fdsKept() == 0);
            assertEquals(0, server.stats().releasedStillMappedAllocations());
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        System.out.println(String.join("\n", samples));
        IpcTestSupport.assertFdsBack(fds0, "after all closed");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings());
    }
}
