package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.PoolStats;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: the server is closed (and rebuilt at the same path) again and again while consumer JVMs
 * (v1, v2) attach in loops and close their own clients at random.
 */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class ServerCloseRaceSoakTest {
    static final int SLOTS = 4;
    static final int CYCLES = Integer.getInteger("probe.cycles", 8);

    @Test
    void serverCloseRacingAttachesFromOtherJvms() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        List<SoakChild> children = new ArrayList<>();
        StringBuilder log = new StringBuilder();
        long total = 6000L + CYCLES * 2500L;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-close").leakSampleRate(0)
                     .build()) {
            long g = resource.granularity();
            children.add(new SoakChild("close-v2", CloseRaceConsumerMain.class, sock.toString(), "2", "4",
                    String.valueOf(SLOTS), String.valueOf(total)));
            children.add(new SoakChild("close-v1", CloseRaceConsumerMain.class, sock.toString(), "1", "4",
                    String.valueOf(SLOTS), String.valueOf(total)));
            for (int cycle = 1; cycle <= CYCLES; cycle++) {
                SharingServer server = SharingServer.builder(sock).registerMBean(true).build();
                VirtualMemoryBuffer[] frames = new VirtualMemoryBuffer[SLOTS];
                for (int i = 0; i < SLOTS; i++) {
                    frames[i] = pool.allocateExported((1 + i % 2) * g);
                    server.publish("f" + i, frames[i]);
                }
                long until = System.nanoTime() + (cycle == 1 ? 5000 : 1500) * 1_000_000L;
                ThreadLocalRandom r = ThreadLocalRandom.current();
                while (System.nanoTime() < until) {
                    int i = r.nextInt(SLOTS);
                    server.unpublish("f" + i);
                    frames[i].closeWhenUnused();
                    frames[i] = pool.allocateExported((1 + r.nextInt(2)) * g);
                    server.publish("f" + i, frames[i]);
                    if (r.nextInt(20) == 0) pool.trim();
                    Thread.sleep(2);
                }
                int conns = server.connectionCount();
                int leases = server.totalLeaseCount();
                long t0 = System.nanoTime();
                server.close();
                long closeMs = (System.nanoTime() - t0) / 1_000_000;
                log.append("cycle ").append(cycle).append(": ").append(conns).append(" connections, ").append(leases)
                        .append(" leases at close; close took ").append(closeMs).append(" ms; after: conns=")
                        .append(server.connectionCount()).append(" leases=").append(server.totalLeaseCount())
                        .append(" stats=").append(server.stats()).append('\n');
                assertTrue(closeMs < SharingServer.CLOSE_WAIT_MILLIS + 1000, "close took " + closeMs + " ms\n" + log);
                assertTrue(!ManagementFactory.getPlatformMBeanServer().isRegistered(server.objectName()), "bean gone");
                for (VirtualMemoryBuffer f : frames) f.closeWhenUnused();
                try {
                    IpcTestSupport.await("leases gone after close", 5, () -> server.totalLeaseCount() == 0
                            && server.connectionCount() == 0 && pool.stats(PoolLifetime.EXPORTED).liveCount() == 0);
                } catch (AssertionError e) {
                    throw new AssertionError(e.getMessage() + ": conns=" + server.connectionCount() + " leases="
                            + server.totalLeaseCount() + " pool=" + pool.stats(PoolLifetime.EXPORTED) + " stats="
                            + server.stats() + "\n" + log, e);
                }
                pool.trim();
                PoolStats ps = pool.stats(PoolLifetime.EXPORTED);
                assertEquals(0, ps.retainedCount(), ps.toString());
                Thread.sleep(r.nextInt(300));
            }
            for (SoakChild c : children) {
                String s = c.awaitLine("STAT", 1, 120);
                log.append(c.label).append(": ").append(s).append('\n');
                for (String l : c.linesStartingWith("EXC")) log.append("  ").append(l).append('\n');
            }
            System.out.println("ServerCloseRaceSoakTest log:\n" + log);
            for (SoakChild c : children) {
                String s = c.awaitLine("STAT", 1, 1);
                System.out.println("---- " + c.label + " output:\n" + c.output());
                assertTrue(s.contains(" memfds=0 ") && s.contains(" maps=0 ") && s.contains("fdsSame=true"),
                        c.label + " leaked: " + s + "\n" + log);
                assertTrue(c.linesStartingWith("STACK").isEmpty(), c.label + " non-IO exceptions:\n" + c.output());
            }
        } finally {
            for (SoakChild c : children) c.close();
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after everything closed");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings(), "memfd mappings back");
    }
}
