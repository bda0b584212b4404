package org.cuvmm.ipc;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;

/**
 * A protocol-version-2 consumer process for {@link CachedSharingTest}: connects to {@code
 * socket} with its import cache (default caps) and obeys one command per line on stdin:
 *
 * <ul>
 * <li>{@code round NAME SEED}: attaches, checks the pattern, closes the attachment (RELEASE,
 *     the mapping stays cached) and prints {@code ROUND calls=C fds=F hits=H misses=M}: the
 *     driver calls this process made in the attach and in the close (the check, which copies,
 *     is not counted) and the fds it received;</li>
 * <li>{@code hold NAME SEED}: attaches, checks, keeps the lease, prints {@code HELD};</li>
 * <li>{@code exit}: closes the client and exits 0.</li>
 * </ul>
 *
 * Any failure prints {@code FAILED} and exits 2.
 */
public final class CachedConsumerMain {
    private CachedConsumerMain() {}

    public static void main(String[] args) {
        IpcTestSupport.runChildMain(() -> run(Path.of(args[0])));
    }

    private static void run(Path sock) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        DriverCounters counters = Driver.get().counters();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(sock, "cached-consumer")) {
            say("CONNECTED version " + client.protocolVersion());
            for (String line; (line = in.readLine()) != null; ) {
                String[] w = line.trim().split(" ");
                switch (w[0]) {
                    case "round" -> {
                        long fds0 = client.importCache().stats().fdsReceived();
                        long c0 = counters.totalCalls();
                        Attachment a = client.attach(w[1], resource);
                        long c1 = counters.totalCalls();
                        BytePattern.verify(a.buffer(), Long.parseLong(w[2]));
                        long c2 = counters.totalCalls();
                        a.close();
                        long c3 = counters.totalCalls();
                        ImportCache.Stats s = client.importCache().stats();
                        say("ROUND calls=" + ((c1 - c0) + (c3 - c2)) + " fds=" + (s.fdsReceived() - fds0) + " hits="
                                + s.hits() + " misses=" + s.misses() + " entries=" + s.entries());
                    }
                    case "hold" -> {
                        Attachment a = client.attach(w[1], resource);
                        BytePattern.verify(a.buffer(), Long.parseLong(w[2]));
                        say("HELD lease " + a.leaseId());
                    }
                    case "exit" -> {
                        return;
                    }
                    default -> throw new IllegalArgumentException("command: " + line);
                }
            }
        }
    }

    private static void say(String s) {
        System.out.println(s);
        System.out.flush();
    }
}
