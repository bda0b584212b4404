package org.cuvmm.bench.sharing;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.ipc.SharingServer;
import org.cuvmm.pool.VirtualMemoryPool;

/**
 * A diagnostic of deferred consumption (docs/VMM_DESIGN.md; bench/RESULTS-sharing-v2.md Run
 * 23): one server, two version-2 clients, one connected with {@code
 * cuvmm.ipc.deferConsumption=false} (plain consuming reads on both ends of its connection)
 * and one with it on; every thread on CPU 0 ({@code same}, the default) or the producer's on
 * CPU 0 and the consumer's on CPU 1 ({@code cross}); cached rounds of a pooled frame timed in
 * alternating segments of {@code --segment-ms} (so a drift of the machine's speed falls on
 * both alike). Prints the median, quartile and best segment of each and its context switches
 * per round (the whole process). Usage: {@code java -cp ... DeferredConsumptionAB [segments
 * (20)] [segment ms (300)] [same|cross (same)] [protocol version 1|2 (2)] [chunks 1|3 (1: the
 * pooled frame; 3: a buffer grown to 3 allocations)]}. Host driver: not a GPU result.
 */
public final class DeferredConsumptionAB {
    private static final String PROPERTY = "cuvmm.ipc.deferConsumption";

    private DeferredConsumptionAB() {}

    public static void main(String[] args) throws Exception {
        int segments = args.length > 0 ? Integer.parseInt(args[0]) : 20;
        long segmentNs = (args.length > 1 ? Long.parseLong(args[1]) : 300) * 1_000_000L;
        int consumerCpu = args.length > 2 && args[2].equals("cross") ? 1 : 0;
        if (args.length > 2 && !args[2].equals("cross") && !args[2].equals("same")) {
            throw new IllegalArgumentException("placement: " + args[2] + " (expected: same or cross)");
        }
        int version = args.length > 3 ? Integer.parseInt(args[3]) : 2;
        int chunks = args.length > 4 ? Integer.parseInt(args[4]) : 1;
        if ((version != 1 && version != 2) || (chunks != 1 && chunks != 3)) {
            throw new IllegalArgumentException("version " + version + ", chunks " + chunks + " (expected: 1 or 2, 1 or 3)");
        }
        Path dir = Files.createTempDirectory("cuvmm-defer-ab");
        Exception failure = null;
        try {
            run(dir.resolve("s"), segments, segmentNs, consumerCpu, version, chunks);
        } catch (Exception e) {
            failure = e;
            throw e;
        } finally {
            try {
                Files.deleteIfExists(dir.resolve("s")); // the server removes it on close; not after a failed start
                Files.deleteIfExists(dir);
            } catch (java.io.IOException e) {
                if (failure == null) throw e;
                failure.addSuppressed(e); // the run's own failure is the one to see
            }
        }
    }

    private static void run(Path sock, int segments, long segmentNs, int consumerCpu, int version, int chunks)
            throws Exception {
        try (VirtualMemoryResource producer = VirtualMemoryResource.create(0);
             VirtualMemoryResource consumer = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(producer).name("defer-ab").build();
             SharingServer server = SharingServer.builder(sock).build()) {
            long g = producer.granularity();
            List<VirtualMemoryBuffer> buffers = new ArrayList<>(); // closed at the end, the last made first
            VirtualMemoryBuffer frame;
            if (chunks == 3) { // as SharingV2Report's 3-chunk case: grown twice (the earlier views stay open until the end)
                buffers.add(frame = producer.allocate(g));
                buffers.add(frame = producer.modifyAllocation(frame, 2 * g));
                buffers.add(frame = producer.modifyAllocation(frame, 3 * g));
            } else {
                buffers.add(frame = pool.allocateExported(g));
            }
            server.publish("frame", frame);
            ThreadPlacement.pinCurrentThread(consumerCpu);
            // Both ends read the property when the connection is made: the client in build(), the
            // server when it admits, which is done before build() has its HELLO_OK.
            System.setProperty(PROPERTY, "false");
            SharingClient plain = SharingClient.builder(sock).clientName("ab plain").protocolVersion(version).build();
            System.clearProperty(PROPERTY);
            SharingClient deferring = SharingClient.builder(sock).clientName("ab deferring").protocolVersion(version).build();
            try {
                ThreadPlacement.pinThreadsNamed("cuvmm-ipc-conn-", 0);
                ThreadPlacement.pinThreadsNamed("cuvmm-ipc-accep", 0);
                ThreadPlacement.pinThreadsNamed("cuvmm-ipc-clien", consumerCpu);
                SharingClient[] clients = {plain, deferring};
                String[] names = {"plain reads", "deferred consumption"};
                for (int i = 0; i < 30_000; i++) {
                    SharingV2Report.round(plain, "frame", consumer);
                    SharingV2Report.round(deferring, "frame", consumer);
                }
                List<List<Double>> us = List.of(new ArrayList<>(), new ArrayList<>());
                List<List<Double>> switches = List.of(new ArrayList<>(), new ArrayList<>());
                for (int seg = 0; seg < segments; seg++) {
                    for (int j = 0; j < 2; j++) {
                        int k = seg % 2 == 0 ? j : 1 - j; // alternate which goes first
                        long s0 = SideCpu.processContextSwitches();
                        long n = 0;
                        long t0 = System.nanoTime(), t;
                        do {
                            SharingV2Report.round(clients[k], "frame", consumer);
                            n++;
                            t = System.nanoTime();
                        } while (t - t0 < segmentNs);
                        us.get(k).add((t - t0) / 1000.0 / n);
                        switches.get(k).add((double) (SideCpu.processContextSwitches() - s0) / n);
                    }
                }
                for (int k = 0; k < 2; k++) {
                    List<Double> r = sorted(us.get(k));
                    List<Double> q = sorted(switches.get(k));
                    System.out.printf("%-21s median %.2f us, first quartile %.2f, best %.2f; context switches / round %.2f%n",
                            names[k], r.get(r.size() / 2), r.get(r.size() / 4), r.get(0), q.get(q.size() / 2));
                }
            } finally {
                plain.close();
                deferring.close();
                server.unpublish("frame");
                for (int i = buffers.size() - 1; i >= 0; i--) buffers.get(i).close();
            }
        }
    }

    private static List<Double> sorted(List<Double> v) {
        List<Double> c = new ArrayList<>(v);
        Collections.sort(c);
        return c;
    }
}
