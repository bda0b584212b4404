package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/** Probe: thousands of v1/v2 client connections (attach, cache, close) against one server: no drift. */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class ConnectionChurnSoakTest {
    static final int CYCLES = Integer.getInteger("probe.cycles", 3000);

    @Test
    void connectionChurnDoesNotLeak() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        List<String> samples = new ArrayList<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryResource into = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-churn").leakSampleRate(0)
                     .build();
             SharingServer server = SharingServer.builder(sock).registerMBean(true).build()) {
            VirtualMemoryBuffer frame = pool.allocateExported(2 * resource.granularity());
            server.publish("f", frame);
            Map<String, Integer> fdsW = null;
            long heapW = 0;
            int threadsW = 0;
            for (int i = 1; i <= CYCLES; i++) {
                try (SharingClient c = SharingClient.builder(sock).protocolVersion(i % 2 == 0 ? 2 : 1).build()) {
                    c.attach("f", into).close();
                    Attachment held = c.attach("f", into); // left open: the client's close() releases it
                    held.buffer().size();
                }
                if (i % 500 == 0) {
                    IpcTestSupport.await("connections gone", 10, () -> server.connectionCount() == 0);
                    Thread.sleep(200);
                    long heap = CachedSteadyStateSoakTest.usedHeapAfterGc();
                    int threads = ManagementFactory.getThreadMXBean().getThreadCount();
                    Map<String, Integer> fds = OpenFds.byKind();
                    String s = "cycle " + i + " fds=" + fds + " threads=" + threads + " heap=" + heap + " leases="
                            + server.totalLeaseCount() + " stats=" + server.stats() + " maps="
                            + OpenFds.cuvmmMemfdMappings();
                    samples.add(s);
                    System.out.println("ConnectionChurnSoakTest " + s);
                    if (i == 1000) {
                        fdsW = fds;
                        heapW = heap;
                        threadsW = threads;
                    } else if (i > 1000) {
                        String all = String.join("\n", samples);
                        assertEquals(fdsW, fds, all);
                        assertTrue(threads <= threadsW + 2, "threads grew\n" + all);
                        assertTrue(heap - heapW < (4L << 20), "heap grew " + (heap - heapW) + "\n" + all);
                        assertEquals(0, server.totalLeaseCount(), all);
                        assertEquals(0, server.stats().idsHeld(), all);
                    }
                }
            }
            server.unpublish("f");
            frame.close();
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after all closed");
    }
}
