package org.cuvmm.ipc;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;

/**
 * A consumer process for {@link PooledSharingTest}: attaches to {@code name} at {@code socket},
 * checks the fill pattern {@code seed}, prints {@code ATTACHED lease <id>}, then obeys one
 * command per line on stdin:
 *
 * <ul>
 * <li>{@code verify}: checks the pattern again, prints {@code VERIFIED} (or fails);</li>
 * <li>{@code release}: closes the attachment (unmap, RELEASE, wait for RELEASED), keeps the
 *     connection open, prints {@code RELEASED};</li>
 * <li>{@code exit}: closes the client and exits 0.</li>
 * </ul>
 *
 * End of stdin (the test JVM has gone) exits too. Any failure prints {@code FAILED} and exits 2.
 */
public final class PooledConsumerMain {
    private PooledConsumerMain() {}

    public static void main(String[] args) {
        IpcTestSupport.runChildMain(() -> run(Path.of(args[0]), args[1], Long.parseLong(args[2])));
    }

    private static void run(Path sock, String name, long seed) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(sock, "pooled-consumer")) {
            Attachment a = client.attach(name, resource);
            BytePattern.verify(a.buffer(), seed);
            say("ATTACHED lease " + a.leaseId() + " " + a.buffer().size() + " bytes");
            for (String line; (line = in.readLine()) != null; ) {
                switch (line.trim()) {
                    case "verify" -> {
                        BytePattern.verify(a.buffer(), seed);
                        say("VERIFIED");
                    }
                    case "release" -> {
                        a.close();
                        say("RELEASED");
                    }
                    case "exit" -> {
                        a.close(); // idempotent
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
