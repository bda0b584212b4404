package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.junit.jupiter.api.Test;

/**
 * A seeded random (written by an independent probe; -Dcuvmm.fuzz.seed, -Dcuvmm.fuzz.rounds) fuzzer of the client. A fake server answers each ATTACH
 * with a DESCRIPTOR (version 1 or 2) built from two real one-chunk exports, mutated at random
 * (fields, flags, ids, counts, sizes, the number of fds attached), sent in random pieces. The
 * attach must either work (then every byte of the buffer is read: a mapping past the end of a
 * memfd would crash the JVM with SIGBUS) or fail with an exception that says something, in
 * bounded time; and after the client's close no fd, mapping or client thread is left (the
 * fixture's checks).
 */
class ClientRandomFuzzTest extends FakeServerSupport {
    @Test
    void randomDescriptors() throws Exception {
        Random rnd = new Random(Long.getLong("cuvmm.fuzz.seed", 4242L));
        int rounds = Integer.getInteger("cuvmm.fuzz.rounds", 60);
        List<String> anomalies = new ArrayList<>();
        int worked = 0;
        for (int round = 0; round < rounds && anomalies.size() < 10; round++) {
            int v = rnd.nextBoolean() ? 1 : 2;
            long seed = rnd.nextLong();
            String[] what = {"round " + round + " v" + v};
            CompletableFuture<Void> f = CompletableFuture.runAsync(() -> {
                try (FdSocket s = listen.accept()) {
                    Frame hello = next(s, v, FrameType.HELLO);
                    FrameIO.write(s, new Messages.HelloOk(v, 253), hello.requestId, null, v);
                    Frame attach = next(s, v, FrameType.ATTACH);
                    if (attach == null) return;
                    Random r = new Random(seed);
                    byte[] payload = payload(r, v);
                    int nfds = r.nextInt(8) == 0 ? r.nextInt(3) : 2;
                    byte[] frame = raw(v, FrameType.DESCRIPTOR, attach.requestId, payload);
                    what[0] += " payload " + ServerRandomFuzzTest.hex(payload) + " fds " + nfds;
                    try (BufferDescriptor a = partA.exportDescriptor(); BufferDescriptor b = partB.exportDescriptor()) {
                        int[] fds = java.util.Arrays.copyOf(new int[] {a.fds()[0], b.fds()[0]}, nfds);
                        int first = r.nextInt(4) == 0 ? 1 + r.nextInt(frame.length - 1) : frame.length;
                        s.send(frame, 0, first, fds);
                        if (first < frame.length) s.send(frame, first, frame.length - first, null);
                    }
                    while (next(s, v, null) != null) { /* drain */ }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            long t0 = System.nanoTime();
            try (SharingClient c = SharingClient.builder(sock).protocolVersion(v).timeout(Duration.ofSeconds(3)).build()) {
                try (Attachment a = c.attach("x", resource)) {
                    ByteBuffer dst = ByteBuffer.allocate((int) Math.min(a.buffer().size(), 64L << 20));
                    for (long off = 0; off < a.buffer().size(); off += dst.capacity()) {
                        dst.clear();
                        dst.limit((int) Math.min(dst.capacity(), a.buffer().size() - off));
                        a.buffer().copyTo(off, dst);
                    }
                    worked++;
                } catch (IOException | RuntimeException e) {
                    if (e.getMessage() == null || e.getMessage().isEmpty()) anomalies.add(what[0] + ": " + e);
                    if (e instanceof IOException && !(e instanceof SharingException)
                            && e.getMessage().startsWith("no reply")) {
                        anomalies.add(what[0] + ": the attach timed out: " + e);
                    }
                }
            } catch (Exception e) {
                anomalies.add(what[0] + ": close/connect threw " + e);
            }
            long ms = (System.nanoTime() - t0) / 1_000_000;
            if (ms > 5000) anomalies.add(what[0] + ": took " + ms + " ms");
            try {
                f.get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                anomalies.add(what[0] + ": the fake server: " + e);
            }
        }
        assertTrue(anomalies.isEmpty(), anomalies.size() + " anomalies (" + worked + " attaches worked):\n"
                + String.join("\n", anomalies));
    }

    /** A valid two-chunk DESCRIPTOR payload of {@code v}, then mutated. */
    static byte[] payload(Random r, int v) {
        long g = G;
        byte[] p = v == 1 ? IpcTestSupport.descriptorPayload(1 + r.nextInt(1000), 1, 2 * g, g, g)
                : v2desc(1 + r.nextInt(1000), 2 * g, new long[] {g, g}, new long[] {1 + r.nextInt(5), 10 + r.nextInt(5)},
                        new int[] {1, 1});
        ByteBuffer b = ByteBuffer.wrap(p);
        int per = v == 1 ? 8 : 20;
        switch (r.nextInt(9)) {
            case 0 -> b.putLong(12, pick(r, g)); // buffer size
            case 1 -> b.putLong(24 + per * r.nextInt(2), pick(r, g)); // a chunk size
            case 2 -> b.putInt(20, r.nextInt(4)); // chunk count
            case 3 -> b.putInt(8, r.nextInt(3)); // handle type
            case 4 -> {
                if (v == 2) b.putInt(40 + 20 * r.nextInt(2), r.nextInt(4)); // flags
                else p[16 + r.nextInt(p.length - 16)] ^= (byte) (1 << r.nextInt(8));
            }
            case 5 -> {
                if (v == 2) b.putLong(32 + 20 * r.nextInt(2), r.nextBoolean() ? 0 : b.getLong(32 + 20 * (1 - 0))); // ids
            }
            case 6 -> p[r.nextInt(p.length)] ^= (byte) (1 << r.nextInt(8));
            case 7 -> {
                b.putLong(24, g / 2); // two half chunks of the same memfds
                b.putLong(24 + per, g / 2);
                b.putLong(12, g);
            }
            default -> { /* valid */ }
        }
        return p;
    }

    static long pick(Random r, long g) {
        long[] c = {0, 1, g - 1, g, g + 1, 2 * g, 3 * g, 4096, Long.MAX_VALUE, -1, -g};
        return c[r.nextInt(c.length)];
    }
}
