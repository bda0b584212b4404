package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;

import javax.management.ObjectName;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: a v2 consumer JVM keeps cached mappings, is SIGSTOPped (so it never FORGETs), the
 * producer frees and trims everything (EVICTs): stats and the MXBean say "released, still
 * mapped by 1 consumer" and agree; the consumer is SIGKILLed: both go to 0, the pool is empty.
 */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class StatsAfterKillSoakTest {
    static final int SLOTS = 4;

    @Test
    void releasedStillMappedFollowsTheConsumersLife() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        SoakChild child = null;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-rsm").leakSampleRate(0)
                     .build();
             SharingServer server = SharingServer.builder(sock).registerMBean(true).build()) {
            ObjectName on = server.objectName();
            long g = resource.granularity();
            VirtualMemoryBuffer[] frames = new VirtualMemoryBuffer[SLOTS];
            long total = 0;
            for (int i = 0; i < SLOTS; i++) {
                frames[i] = pool.allocateExported((1 + i % 2) * g);
                total += frames[i].mappedSize();
                MultiJvmSoakTest.stamp(frames[i], i, 1);
                server.publish("f" + i, frames[i]);
            }
            child = new SoakChild("rsm-v2", SoakConsumerMain.class, sock.toString(), "2", "2", String.valueOf(SLOTS));
            child.awaitLine("CONNECTED", 1, 60);
            child.command("run 1500");
            String done = child.awaitLine("DONE", 1, 60);
            assertTrue(done.contains("unexpected=0"), done + "\n" + child.output());
            child.command("stat");
            String stat = child.awaitLine("STAT", 1, 30);
            assertEquals(SLOTS, SoakChild.field(stat, "entries"), stat);
            long pid = child.process.pid();
            assertEquals(0, new ProcessBuilder("kill", "-STOP", String.valueOf(pid)).start().waitFor());
            for (int i = 0; i < SLOTS; i++) {
                server.unpublish("f" + i);
                frames[i].closeWhenUnused();
            }
            long trimmed = pool.trim();
            assertEquals(total, trimmed, "nothing leased: all trimmed");
            // Release notices are delivered shortly after the release, on their own thread (documented).
            IpcTestSupport.await("every trimmed allocation counted released-still-mapped", 10,
                    () -> server.stats().releasedStillMappedAllocations() == SLOTS);
            SharingStats s = server.stats();
            String mx = MultiJvmSoakTest.mx(on);
            System.out.println("StatsAfterKillSoakTest stopped: " + s + " " + mx);
            assertEquals(SLOTS, s.releasedStillMappedAllocations(), s.toString());
            assertEquals(total, s.releasedStillMappedBytes(), s.toString());
            assertEquals(SLOTS, ((Number) MultiJvmSoakTest.attr(on, "ReleasedStillMappedAllocations")).intValue(), mx);
            assertEquals(total, ((Number) MultiJvmSoakTest.attr(on, "ReleasedStillMappedBytes")).longValue(), mx);
            assertEquals(1, ((Number) MultiJvmSoakTest.attr(on, "ReleasedStillMappedConsumers")).intValue(), mx);
            String[] lines = (String[]) MultiJvmSoakTest.attr(on, "ReleasedStillMapped");
            assertEquals(SLOTS, lines.length);
            for (String l : lines) assertTrue(l.endsWith("still mapped by 1 consumer"), l);
            assertEquals(SLOTS, s.connections().get(0).releasedIdsHeld(), s.toString());
            assertEquals(0, pool.stats(PoolLifetime.EXPORTED).liveCount());
            child.process.destroyForcibly(); // SIGKILL of the stopped process
            child.process.waitFor();
            IpcTestSupport.await("the connection gone", 10, () -> server.connectionCount() == 0);
            s = server.stats();
            mx = MultiJvmSoakTest.mx(on);
            System.out.println("StatsAfterKillSoakTest killed: " + s + " " + mx);
            assertEquals(0, s.releasedStillMappedAllocations(), s.toString());
            assertEquals(0, s.releasedStillMappedBytes(), s.toString());
            assertEquals(0, ((Number) MultiJvmSoakTest.attr(on, "ReleasedStillMappedAllocations")).intValue(), mx);
            assertEquals(0, ((Number) MultiJvmSoakTest.attr(on, "ReleasedStillMappedConsumers")).intValue(), mx);
            assertEquals(0, ((Number) MultiJvmSoakTest.attr(on, "IdsHeld")).longValue(), mx);
            assertEquals(0, ((Number) MultiJvmSoakTest.attr(on, "LeaseCount")).intValue(), mx);
        } finally {
            if (child != null) child.close();
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after everything closed");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings());
    }
}
