package org.cuvmm.ipc;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.OpenFds;

/**
 * Probe consumer: args SOCKET VERSION THREADS SLOTS. Commands on stdin: {@code run MS} (THREADS
 * threads attach/verify/release random frames f0..f(SLOTS-1) for MS ms, some leases held a
 * while; prints DONE ...), {@code stat} (prints STAT ...), {@code exit}. Unexpected
 * exceptions print UNEXPECTED. Frames carry a stamp (slot << 48 | gen) in their first and
 * last 8 bytes.
 */
public final class SoakConsumerMain {
    private SoakConsumerMain() {}

    static final AtomicLong attaches = new AtomicLong();
    static final AtomicLong expected = new AtomicLong();
    static final AtomicLong unexpected = new AtomicLong();
    static final AtomicLong dataErrors = new AtomicLong();

    public static void main(String[] args) {
        IpcTestSupport.runChildMain(() -> run(Path.of(args[0]), Integer.parseInt(args[1]), Integer.parseInt(args[2]),
                Integer.parseInt(args[3])));
    }

    static String stat(SharingClient client) throws Exception {
        java.util.Map<String, Integer> fds = OpenFds.byKind();
        ImportCache.Stats s = client.importCache().stats();
        return "STAT memfds=" + fds.getOrDefault(OpenFds.CUVMM_MEMFD, 0) + " sockets=" + fds.getOrDefault("socket", 0)
                + " total=" + fds.values().stream().mapToInt(Integer::intValue).sum() + " maps="
                + OpenFds.cuvmmMemfdMappings() + " entries=" + s.entries() + " idsHeld=" + s.idsHeld() + " fdsKept="
                + s.fdsKept() + " bytes=" + s.bytes() + " pending=" + client.pendingReleases() + " attachments="
                + client.attachments().size() + " connected=" + client.isConnected() + " threads="
                + Thread.activeCount() + " cache=" + s;
    }

    private static void run(Path sock, int version, int threads, int slots) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.builder(sock).clientName("probe-v" + version)
                     .protocolVersion(version).build()) {
            say("CONNECTED version " + client.protocolVersion());
            for (String line; (line = in.readLine()) != null; ) {
                String[] w = line.trim().split(" ");
                switch (w[0]) {
                    case "run" -> {
                        long until = System.nanoTime() + Long.parseLong(w[1]) * 1_000_000L;
                        List<Thread> ts = new ArrayList<>();
                        for (int t = 0; t < threads; t++) {
                            Thread th = new Thread(() -> loop(client, resource, slots, until), "probe-loop-" + t);
                            th.start();
                            ts.add(th);
                        }
                        for (Thread th : ts) th.join();
                        say("DONE attaches=" + attaches + " expected=" + expected + " unexpected=" + unexpected
                                + " dataErrors=" + dataErrors);
                    }
                    case "stat" -> say(stat(client));
                    case "exit" -> {
                        client.close();
                        say("CLOSED " + stat(client));
                        return;
                    }
                    default -> throw new IllegalArgumentException("command: " + line);
                }
            }
        }
    }

    private static void loop(SharingClient client, VirtualMemoryResource resource, int slots, long until) {
        ArrayDeque<Attachment> held = new ArrayDeque<>();
        ThreadLocalRandom r = ThreadLocalRandom.current();
        byte[] b8 = new byte[8];
        while (System.nanoTime() < until) {
            int slot = r.nextInt(slots);
            Attachment a;
            try {
                a = client.attach("f" + slot, resource);
                attaches.incrementAndGet();
            } catch (SharingException e) {
                // Documented (PROTOCOL.md 13.7 check order): UNKNOWN_NAME, and INTERNAL for a buffer
                // its owner closed (unpublish then closeWhenUnused while this ATTACH was answered).
                if (e.code() == ErrorCode.UNKNOWN_NAME
                        || e.code() == ErrorCode.INTERNAL && String.valueOf(e.getMessage()).contains("is closed")) {
                    expected.incrementAndGet();
                } else {
                    unexpected.incrementAndGet();
                    report("attach f" + slot, e);
                }
                continue;
            } catch (Throwable e) {
                unexpected.incrementAndGet();
                report("attach f" + slot, e);
                continue;
            }
            try {
                a.buffer().copyTo(0, b8, 0, 8);
                long first = ByteBuffer.wrap(b8).getLong();
                a.buffer().copyTo(a.buffer().size() - 8, b8, 0, 8);
                long last = ByteBuffer.wrap(b8).getLong();
                if (first != last || (first >>> 48) != slot) {
                    dataErrors.incrementAndGet();
                    say("DATAERROR f" + slot + " first=" + Long.toHexString(first) + " last=" + Long.toHexString(last)
                            + " lease " + a.leaseId() + " dropped=" + a.isDropped());
                }
            } catch (Throwable e) {
                unexpected.incrementAndGet();
                report("read f" + slot, e);
            }
            if (r.nextInt(5) == 0) {
                held.add(a);
                if (held.size() > 2) closeIt(held.poll());
            } else {
                closeIt(a);
            }
        }
        while (!held.isEmpty()) closeIt(held.poll());
    }

    private static void closeIt(Attachment a) {
        try {
            a.close();
        } catch (Throwable e) {
            unexpected.incrementAndGet();
            report("close " + a, e);
        }
    }

    static synchronized void report(String what, Throwable e) {
        System.out.println("UNEXPECTED " + what + ": " + e);
        e.printStackTrace(System.out);
        System.out.flush();
    }

    static synchronized void say(String s) {
        System.out.println(s);
        System.out.flush();
    }
}
