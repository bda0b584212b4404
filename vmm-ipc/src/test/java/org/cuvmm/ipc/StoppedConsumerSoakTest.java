package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: a consumer JVM is SIGSTOPped mid-loop (leases held, cache full) while the producer
 * churns frames (DROPs and EVICTs queue up for it) and then closes the server: close() must
 * return within its documented bound, end the leases, and the continued consumer must recover.
 */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class StoppedConsumerSoakTest {
    static final int SLOTS = 6;

    @Test
    void serverCloseWithAStoppedConsumer() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        SoakChild child = null;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-stopped")
                     .leakSampleRate(0).build()) {
            long g = resource.granularity();
            SharingServer server = SharingServer.builder(sock).registerMBean(true).build();
            VirtualMemoryBuffer[] frames = new VirtualMemoryBuffer[SLOTS];
            long gen = 0;
            for (int i = 0; i < SLOTS; i++) {
                frames[i] = pool.allocateExported((1 + i % 3) * g);
                MultiJvmSoakTest.stamp(frames[i], i, ++gen);
                server.publish("f" + i, frames[i]);
            }
            child = new SoakChild("stopped-v2", SoakConsumerMain.class, sock.toString(), "2", "3",
                    String.valueOf(SLOTS));
            child.awaitLine("CONNECTED", 1, 60);
            child.command("run 8000");
            Thread.sleep(2000);
            long pid = child.process.pid();
            assertEquals(0, new ProcessBuilder("kill", "-STOP", String.valueOf(pid)).start().waitFor());
            Thread.sleep(200);
            int leasesAtStop = server.totalLeaseCount();
            ThreadLocalRandom r = ThreadLocalRandom.current();
            long until = System.nanoTime() + 2_000_000_000L;
            int churns = 0;
            while (System.nanoTime() < until) { // DROPs and EVICTs for the stopped consumer
                int i = r.nextInt(SLOTS);
                server.unpublish("f" + i);
                frames[i].closeWhenUnused();
                frames[i] = pool.allocateExported((1 + r.nextInt(3)) * g);
                MultiJvmSoakTest.stamp(frames[i], i, ++gen);
                server.publish("f" + i, frames[i]);
                if (r.nextInt(10) == 0) pool.trim();
                churns++;
            }
            String before = server.stats().toString();
            long t0 = System.nanoTime();
            server.close();
            long closeMs = (System.nanoTime() - t0) / 1_000_000;
            String after = "leases=" + server.totalLeaseCount() + " conns=" + server.connectionCount();
            System.out.println("StoppedConsumerSoakTest: leases at stop " + leasesAtStop + ", churns " + churns
                    + ", close took " + closeMs + " ms; before " + before + "; after " + after);
            assertTrue(closeMs <= SharingServer.CLOSE_WAIT_MILLIS + 1000, "close took " + closeMs + " ms");
            assertEquals(0, server.totalLeaseCount(), after);
            assertEquals(0, server.connectionCount(), after);
            for (VirtualMemoryBuffer f : frames) f.closeWhenUnused();
            IpcTestSupport.await("frames back in the pool", 5, () -> pool.stats(PoolLifetime.EXPORTED).liveCount() == 0);
            assertEquals(0, new ProcessBuilder("kill", "-CONT", String.valueOf(pid)).start().waitFor());
            String done = child.awaitLine("DONE", 1, 60);
            child.command("stat");
            String stat = child.awaitLine("STAT", 1, 30);
            System.out.println("StoppedConsumerSoakTest consumer: " + done + "\n" + stat);
            assertEquals(0, SoakChild.field(stat, "memfds"), stat);
            assertEquals(0, SoakChild.field(stat, "maps"), stat);
            assertEquals(0, child.exit(30), child.output());
            pool.trim();
        } finally {
            if (child != null) {
                new ProcessBuilder("kill", "-CONT", String.valueOf(child.process.pid())).start().waitFor();
                child.close();
            }
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after everything closed");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings());
    }
}
