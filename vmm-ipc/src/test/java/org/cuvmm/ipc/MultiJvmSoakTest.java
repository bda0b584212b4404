package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;

import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.PoolStats;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: a producer (this JVM) churning pooled frames while 3 consumer JVMs (v2, v1, v2)
 * attach/release in loops; one consumer is SIGKILLed mid-loop and restarted. Checks leaks,
 * stats agreement and unexpected exceptions.
 */
@org.junit.jupiter.api.Tag("soak") // seconds to minutes: only when asked (pom.xml, cuvmm.test.excludedGroups)
class MultiJvmSoakTest {
    static final int SLOTS = 6;
    static final int PHASES = Integer.getInteger("probe.phases", 4);
    static final int RUN_MS = Integer.getInteger("probe.runMs", 5000);

    final List<Throwable> producerErrors = new ArrayList<>();

    static void stamp(VirtualMemoryBuffer b, int slot, long gen) {
        byte[] v = ByteBuffer.allocate(8).putLong(((long) slot << 48) | gen).array();
        b.copyFrom(0, v, 0, 8);
        b.copyFrom(b.size() - 8, v, 0, 8);
    }

    static Object attr(ObjectName n, String a) throws Exception {
        return ManagementFactory.getPlatformMBeanServer().getAttribute(n, a);
    }

    static String mx(ObjectName n) throws Exception {
        return "mx[conns=" + attr(n, "ConnectionCount") + " leases=" + attr(n, "LeaseCount") + " ids=" + attr(n, "IdsHeld")
                + " rsm=" + attr(n, "ReleasedStillMappedAllocations") + " rsmBytes=" + attr(n, "ReleasedStillMappedBytes")
                + " rsmConsumers=" + attr(n, "ReleasedStillMappedConsumers") + "]";
    }

    @Test
    void soakWithKilledConsumer() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        MBeanServer mbs = ManagementFactory.getPlatformMBeanServer();
        ObjectName on;
        List<SoakChild> children = new ArrayList<>();
        StringBuilder log = new StringBuilder();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-soak").leakSampleRate(0)
                    .build();
            SharingServer server = SharingServer.builder(sock).registerMBean(true).build();
            on = server.objectName();
            assertTrue(mbs.isRegistered(on));
            VirtualMemoryBuffer[] frames = new VirtualMemoryBuffer[SLOTS];
            long gen = 0;
            for (int i = 0; i < SLOTS; i++) {
                frames[i] = pool.allocateExported((1 + i % 3) * g);
                stamp(frames[i], i, ++gen);
                server.publish("f" + i, frames[i]);
            }
            String[] kinds = {"2", "1", "2"};
            for (int c = 0; c < 3; c++) {
                children.add(new SoakChild("consumer" + c + "-v" + kinds[c], SoakConsumerMain.class,
                        sock.toString(), kinds[c], "3", String.valueOf(SLOTS)));
            }
            for (SoakChild c : children) c.awaitLine("CONNECTED", 1, 60);
            long[] baseFds = new long[3];
            for (int c = 0; c < 3; c++) {
                children.get(c).command("stat");
                String s = children.get(c).next("STAT", 30);
                baseFds[c] = SoakChild.field(s, "total");
                log.append("base ").append(children.get(c).label).append(": ").append(s).append('\n');
            }
            for (int phase = 1; phase <= PHASES; phase++) {
                for (SoakChild c : children) c.command("run " + RUN_MS);
                long end = System.nanoTime() + RUN_MS * 1_000_000L;
                boolean killed = false;
                ThreadLocalRandom r = ThreadLocalRandom.current();
                long t0 = System.nanoTime();
                while (System.nanoTime() < end) {
                    if (phase == 2 && !killed && System.nanoTime() - t0 > RUN_MS * 400_000L) {
                        SoakChild victim = children.get(2);
                        victim.process.destroyForcibly(); // SIGKILL
                        victim.process.waitFor();
                        victim.close();
                        killed = true;
                        log.append("killed ").append(victim.label).append(" stats ").append(server.stats()).append('\n');
                    }
                    int i = r.nextInt(SLOTS);
                    String name = "f" + i;
                    try {
                        switch (r.nextInt(10)) {
                            case 0, 1, 2, 3 -> { // replace the frame
                                server.unpublish(name);
                                if (frames[i] != null) frames[i].closeWhenUnused();
                                frames[i] = pool.allocateExported((1 + r.nextInt(3)) * g);
                                stamp(frames[i], i, ++gen);
                                server.publish(name, frames[i]);
                            }
                            case 4, 5 -> { // republish the same frame
                                server.unpublish(name);
                                if (frames[i] != null) server.publish(name, frames[i]);
                            }
                            case 6 -> pool.trim();
                            case 7 -> server.unpublish(name);
                            case 8 -> {
                                if (!server.isPublished(name) && frames[i] != null) server.publish(name, frames[i]);
                            }
                            default -> {
                                SharingStats s = server.stats();
                                s.idsHeld();
                                attr(on, "ReleasedStillMapped");
                                pool.stats(PoolLifetime.EXPORTED);
                            }
                        }
                    } catch (Throwable e) {
                        producerErrors.add(e);
                        e.printStackTrace();
                    }
                    Thread.sleep(0, 200_000);
                }
                if (killed) {
                    IpcTestSupport.await("killed consumer's connection gone", 20, () -> server.connectionCount() == 2);
                    SoakChild again = new SoakChild("consumer2-restarted", SoakConsumerMain.class, sock.toString(),
                            "2", "3", String.valueOf(SLOTS));
                    again.awaitLine("CONNECTED", 1, 60);
                    children.set(2, again);
                    again.command("stat");
                    baseFds[2] = SoakChild.field(again.next("STAT", 30), "total");
                } else {
                    for (SoakChild c : children) {
                        String d = c.next("DONE", 60);
                        log.append("phase ").append(phase).append(' ').append(c.label).append(": ").append(d).append('\n');
                    }
                }
                // quiesce: everything unpublished, frames freed, pool trimmed
                for (int i = 0; i < SLOTS; i++) {
                    server.unpublish("f" + i);
                    if (frames[i] != null) frames[i].closeWhenUnused();
                    frames[i] = null;
                }
                for (SoakChild c : children) {
                    if (!killed) continue;
                    if (c.label.contains("restarted")) continue;
                    String d = c.next("DONE", 60);
                    log.append("phase ").append(phase).append(' ').append(c.label).append(": ").append(d).append('\n');
                }
                pool.trim();
                try {
                    IpcTestSupport.await("no ids held, nothing released-still-mapped, no leases", 15,
                            () -> server.stats().idsHeld() == 0 && server.stats().releasedStillMappedAllocations() == 0
                                    && server.totalLeaseCount() == 0);
                } catch (AssertionError e) {
                    throw new AssertionError(e.getMessage() + "\nstats " + server.stats() + "\n" + mx(on) + "\npool "
                            + pool.stats(PoolLifetime.EXPORTED) + "\n" + log, e);
                }
                PoolStats ps = pool.stats(PoolLifetime.EXPORTED);
                log.append("phase ").append(phase).append(" quiesced: ").append(server.stats()).append(' ').append(mx(on))
                        .append(" pool ").append(ps).append('\n');
                assertEquals(0, ps.liveCount(), "pool live after quiesce: " + ps + "\n" + log);
                assertEquals(0, ps.retainedCount(), "pool retained after trim: " + ps + "\n" + log);
                assertEquals(server.totalLeaseCount(), ((Number) attr(on, "LeaseCount")).intValue());
                assertEquals(server.stats().idsHeld(), ((Number) attr(on, "IdsHeld")).longValue());
                assertEquals(0, ((Number) attr(on, "ReleasedStillMappedAllocations")).intValue(), mx(on));
                assertEquals(0, ((Number) attr(on, "ReleasedStillMappedConsumers")).intValue(), mx(on));
                assertEquals(server.connectionCount(), ((Number) attr(on, "ConnectionCount")).intValue());
                Thread.sleep(300); // EVICT/FORGET settle in the consumers
                for (int c = 0; c < 3; c++) {
                    SoakChild ch = children.get(c);
                    ch.command("stat");
                    String s = ch.next("STAT", 30);
                    log.append("phase ").append(phase).append(' ').append(ch.label).append(": ").append(s).append('\n');
                }
                for (int c = 0; c < 3; c++) {
                    String s = children.get(c).linesStartingWith("STAT").get(children.get(c).count("STAT") - 1);
                    assertEquals(0, SoakChild.field(s, "memfds"), children.get(c).label + " memfds after quiesce: " + s + "\n" + log);
                    assertEquals(0, SoakChild.field(s, "maps"), children.get(c).label + " maps after quiesce: " + s + "\n" + log);
                    assertEquals(0, SoakChild.field(s, "entries"), children.get(c).label + " entries: " + s + "\n" + log);
                    assertEquals(0, SoakChild.field(s, "pending"), children.get(c).label + " pending: " + s + "\n" + log);
                    assertEquals(baseFds[c], SoakChild.field(s, "total"), children.get(c).label + " fds vs base: " + s + "\n" + log);
                }
                // republish for the next phase
                for (int i = 0; i < SLOTS; i++) {
                    frames[i] = pool.allocateExported((1 + i % 3) * g);
                    stamp(frames[i], i, ++gen);
                    server.publish("f" + i, frames[i]);
                }
            }
            for (SoakChild c : children) {
                for (String l : c.linesStartingWith("UNEXPECTED")) log.append(c.label).append(": ").append(l).append('\n');
                for (String l : c.linesStartingWith("DATAERROR")) log.append(c.label).append(": ").append(l).append('\n');
            }
            for (SoakChild c : children) assertEquals(0, c.exit(30), c.label + " exit:\n" + c.output());
            IpcTestSupport.await("connections gone", 15, () -> server.connectionCount() == 0);
            SharingStats s = server.stats();
            assertEquals(0, s.idsHeld(), s.toString());
            assertEquals(0, s.releasedStillMappedAllocations(), s.toString());
            assertEquals(0, server.totalLeaseCount());
            assertEquals(0, ((Number) attr(on, "ConnectionCount")).intValue());
            for (int i = 0; i < SLOTS; i++) {
                server.unpublish("f" + i);
                frames[i].close();
            }
            server.close();
            assertTrue(!mbs.isRegistered(on), "bean unregistered on close");
            pool.close();
            System.out.println("MultiJvmSoakTest log:\n" + log);
            String bad = log.toString().lines().filter(l -> l.contains("UNEXPECTED") || l.contains("DATAERROR"))
                    .reduce("", (a, b) -> a + b + "\n");
            assertTrue(bad.isEmpty(), "unexpected in consumers:\n" + bad + "\nfull:\n" + children.stream()
                    .map(SoakChild::output).reduce("", (a, b) -> a + "\n-----\n" + b));
            assertTrue(producerErrors.isEmpty(), "producer errors: " + producerErrors);
        } finally {
            for (SoakChild c : children) c.close();
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after everything closed");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings(), "memfd mappings back to baseline");
    }
}
