package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * A seeded random (written by an independent probe; -Dcuvmm.fuzz.seed, -Dcuvmm.fuzz.rounds) frame fuzzer against the server. Each round: a fresh
 * connection, HELLO (v1 or v2), one valid frame mutated at random (bit flips, a header field
 * set to an extreme, the payload cut or extended), a well-formed ATTACH after it, sent in
 * random pieces, then a half-close. Every reply must parse, the server must end the
 * connection (no hang), a non-fatal refusal must leave the ATTACH answered, and at the end no
 * fd, thread or lease is left (the fixture's checks).
 */
class ServerRandomFuzzTest extends FuzzServerSupport {
    @Test
    void randomMutations() throws Exception {
        Random rnd = new Random(Long.getLong("cuvmm.fuzz.seed", 20261202L));
        int rounds = Integer.getInteger("cuvmm.fuzz.rounds", 120);
        List<String> anomalies = new ArrayList<>();
        for (int round = 0; round < rounds; round++) {
            int v = rnd.nextBoolean() ? 1 : 2;
            byte[] victim = mutate(rnd, validFrame(rnd, v), v);
            byte[] attach = frameV(v, 3, 777, str("b"));
            byte[] all = concat(frameV(v, 1, 1, str("fuzz")), victim, attach);
            String what = "round " + round + " v" + v + " victim " + hex(victim);
            try (FdSocket s = FdSocket.connect(sockPath())) {
                CompletableFuture<List<Frame>> replies = CompletableFuture.supplyAsync(() -> {
                    List<Frame> got = new ArrayList<>();
                    try {
                        for (;;) {
                            Frame f = FrameIO.read(s);
                            if (f == null) return got;
                            f.close();
                            got.add(f);
                            if (f.type == FrameType.DESCRIPTOR && f.requestId == 777) {
                                long lease = f.message instanceof Messages.Descriptor d ? d.leaseId()
                                        : ((Messages.DescriptorV2) f.message).leaseId();
                                s.send(frameV(v, 5, 778, u64(lease)), null);
                                s.shutdownOutput();
                            }
                        }
                    } catch (Exception e) {
                        got.add(null);
                        return got;
                    }
                });
                int at = 0;
                while (at < all.length) {
                    int n = 1 + rnd.nextInt(Math.max(1, all.length - at));
                    if (rnd.nextInt(4) == 0) n = Math.min(n, 1 + rnd.nextInt(3));
                    n = Math.min(n, all.length - at);
                    try {
                        s.send(all, at, n, null);
                    } catch (java.io.IOException e) {
                        break; // the server closed after a fatal error
                    }
                    at += n;
                }
                // no half-close yet: a DESCRIPTOR for 777 triggers RELEASE then the half-close
                List<Frame> got;
                try {
                    got = replies.get(3, TimeUnit.SECONDS);
                } catch (java.util.concurrent.TimeoutException e) {
                    s.shutdownOutput();
                    try {
                        got = replies.get(5, TimeUnit.SECONDS);
                    } catch (java.util.concurrent.TimeoutException e2) {
                        anomalies.add(what + ": no end of stream 5 s after the half-close");
                        continue;
                    }
                }
                if (got.contains(null)) {
                    anomalies.add(what + ": a reply did not parse / read failed: " + got);
                    continue;
                }
                check(what, got, anomalies, (victim[6] & 0xFF) << 8 | (victim[7] & 0xFF));
            }
            if (anomalies.size() > 20) break;
        }
        assertTrue(anomalies.isEmpty(), anomalies.size() + " anomalies:\n" + String.join("\n", anomalies));
    }

    private void check(String what, List<Frame> got, List<String> anomalies, int victimType) {
        boolean fatal = false;
        boolean attachAnswered = false;
        for (Frame f : got) {
            if (f.type == FrameType.ERROR) {
                ErrorCode c = ((Messages.Error) f.message).errorCode();
                if (c == null) anomalies.add(what + ": unknown error code in " + f);
                else if (c.fatal()) fatal = true;
            }
            if (f.requestId == 777) attachAnswered = true;
        }
        if (got.isEmpty() || got.get(0).type != FrameType.HELLO_OK && !(got.get(0).type == FrameType.ERROR)) {
            anomalies.add(what + ": first reply " + got);
        }
        // An ERROR whose length was made larger swallows the ATTACH and is cut short by the
        // half-close: TRUNCATED, fatal, but never answered (an ERROR is never answered).
        if (!fatal && !attachAnswered && !got.isEmpty() && victimType != 8) {
            // a length made larger swallows the ATTACH (then TRUNCATED, fatal): only non-fatal rounds count
            anomalies.add(what + ": no fatal error, yet the ATTACH after it was never answered: " + got);
        }
    }

    java.nio.file.Path sockPath() { return sock; }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < Math.min(b.length, 48); i++) s.append(String.format("%02x", b[i]));
        if (b.length > 48) s.append("...(" + b.length + ")");
        return s.toString();
    }

    static byte[] validFrame(Random rnd, int v) {
        switch (rnd.nextInt(8)) {
            case 0: return frameV(v, 1, 5, str("again"));
            case 1: return frameV(v, 3, 5, str(rnd.nextBoolean() ? "b" : "nope"));
            case 2: return frameV(v, 5, 5, u64(rnd.nextInt(1000) + 1));
            case 3: return frameV(v, 8, 5, concat(ByteBuffer.allocate(4).putInt(11).array(), str("client err")));
            case 4: return frameV(v, 9, 5, idList(2, 1, 2));
            case 5: return frameV(v, 4, 5, IpcTestSupport.descriptorPayload(1, 1, 4096, 4096));
            case 6: return frameV(v, 7, 5, concat(u64(3), str("b")));
            default: return frameV(v, 6, 5, u64(9));
        }
    }

    static byte[] mutate(Random rnd, byte[] f, int v) {
        byte[] m = f.clone();
        switch (rnd.nextInt(7)) {
            case 0: { // flip bits
                int flips = 1 + rnd.nextInt(3);
                for (int i = 0; i < flips; i++) m[rnd.nextInt(m.length)] ^= (byte) (1 << rnd.nextInt(8));
                return m;
            }
            case 1: { // a header field to an extreme
                ByteBuffer b = ByteBuffer.wrap(m);
                int[] extremes = {0, 1, 0xFFFF, 0x7FFF};
                switch (rnd.nextInt(4)) {
                    case 0 -> b.putShort(4, (short) extremes[rnd.nextInt(4)]);
                    case 1 -> b.putShort(6, (short) extremes[rnd.nextInt(4)]);
                    case 2 -> b.putInt(8, rnd.nextBoolean() ? 0 : -1);
                    default -> b.putInt(12, b.getInt(12) + (rnd.nextBoolean() ? 1 : -1));
                }
                return m;
            }
            case 2: { // payload cut, length kept consistent
                int cut = rnd.nextInt(Math.max(1, m.length - 16));
                byte[] c = java.util.Arrays.copyOf(m, m.length - cut);
                ByteBuffer.wrap(c).putInt(12, c.length - 16);
                return c;
            }
            case 3: { // payload extended with junk, length consistent
                byte[] junk = new byte[1 + rnd.nextInt(20)];
                rnd.nextBytes(junk);
                byte[] c = concat(m, junk);
                ByteBuffer.wrap(c).putInt(12, c.length - 16);
                return c;
            }
            case 4: { // a random payload byte
                if (m.length > 16) m[16 + rnd.nextInt(m.length - 16)] = (byte) rnd.nextInt(256);
                return m;
            }
            case 5: { // the string length field or a count field set big
                if (m.length > 18) ByteBuffer.wrap(m).putShort(16, (short) (0xFFFF - rnd.nextInt(3)));
                return m;
            }
            default: { // the version of the other connection kind
                ByteBuffer.wrap(m).putShort(4, (short) (3 - v));
                return m;
            }
        }
    }
}
