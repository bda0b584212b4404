package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: more frames than the import cache keeps (LRU eviction and FORGET every round), attached
 * by 3 threads of one v2 client, with the producer trimming now and then: no exception, and
 * fds, mappings and held ids stay bounded.
 */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class CacheThrashSoakTest {
    static final int FRAMES = 24;
    static final int ROUNDS = Integer.getInteger("probe.rounds", 20_000);

    @Test
    void lruThrashDoesNotDrift() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        Map<String, AtomicLong> errors = new ConcurrentHashMap<>();
        Map<String, AtomicLong> documented = new ConcurrentHashMap<>();
        List<String> samples = new ArrayList<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryResource into = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-thrash")
                     .leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(20).build();
             SharingClient client = SharingClient.builder(sock).cacheMaxEntries(8).build()) {
            long g = resource.granularity();
            VirtualMemoryBuffer[] frames = new VirtualMemoryBuffer[FRAMES];
            for (int i = 0; i < FRAMES; i++) {
                frames[i] = pool.allocateExported(g);
                server.publish("f" + i, frames[i]);
            }
            AtomicLong next = new AtomicLong();
            Thread[] ts = new Thread[3];
            for (int t = 0; t < ts.length; t++) {
                ts[t] = new Thread(() -> {
                    long r;
                    while ((r = next.incrementAndGet()) <= ROUNDS) {
                        try (Attachment a = client.attach("f" + (r * 7 % FRAMES), into)) {
                            a.buffer().size();
                        } catch (SharingException e) {
                            // Documented: UNKNOWN_NAME (withdrawn), INTERNAL for a buffer its owner
                            // closed, and TOO_MANY_IDS when the one retry after dropIdle meets the limit
                            // again (SharingClient.attach javadoc): counted, not failures.
                            ErrorCode c = e.code();
                            String key = c == ErrorCode.UNKNOWN_NAME || c == ErrorCode.TOO_MANY_IDS
                                    || c == ErrorCode.INTERNAL && String.valueOf(e.getMessage()).contains("is closed")
                                    ? "documented " + c : e.toString().replaceAll("[0-9]+", "N");
                            (key.startsWith("documented") ? documented : errors).computeIfAbsent(key,
                                    x -> new AtomicLong()).incrementAndGet();
                        } catch (Throwable e) {
                            errors.computeIfAbsent(e.toString().replaceAll("[0-9]+", "N"), x -> new AtomicLong())
                                    .incrementAndGet();
                        }
                    }
                });
                ts[t].start();
            }
            int replaced = 0;
            while (next.get() < ROUNDS) {
                Thread.sleep(20);
                int j = replaced++ % FRAMES;
                server.unpublish("f" + j);
                frames[j].closeWhenUnused();
                if (replaced % 10 == 0) pool.trim();
                frames[j] = pool.allocateExported(g);
                server.publish("f" + j, frames[j]);
                if (replaced % 50 == 0) {
                    String s = "round " + next.get() + " fds=" + OpenFds.cuvmmMemfds() + " maps="
                            + OpenFds.cuvmmMemfdMappings() + " cache=" + client.importCache().stats() + " serverIds="
                            + server.stats().idsHeld() + " errors=" + errors;
                    samples.add(s);
                    System.out.println("CacheThrashSoakTest " + s);
                }
            }
            for (Thread t : ts) t.join(60_000);
            ImportCache.Stats cs = client.importCache().stats();
            String all = String.join("\n", samples);
            assertTrue(cs.entries() <= 8, cs + "\n" + all);
            assertTrue(cs.idsHeld() <= 20, cs + "\n" + all);
            for (int i = 0; i < FRAMES; i++) {
                server.unpublish("f" + i);
                frames[i].closeWhenUnused();
            }
            pool.trim();
            IpcTestSupport.await("evicted and forgotten", 10, () -> server.stats().idsHeld() == 0
                    && client.importCache().stats().fdsKept() == 0 && client.importCache().stats().entries() == 0);
            System.out.println("CacheThrashSoakTest end: " + client.importCache().stats() + " errors " + errors
                    + " documented " + documented);
            assertTrue(errors.isEmpty(), "attach errors: " + errors + "\n" + all);
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after all closed");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings());
    }
}
