package org.cuvmm.bench.sharing;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.cuvmm.ipc.FdSocket;
import org.cuvmm.ipc.ReceivedMessage;

/**
 * The bare ping-pong of a round's message sizes in Java, over cuvmm's own socket layer
 * ({@link FdSocket#pair()}, {@link FdSocket#send(byte[], int[])}, {@link
 * FdSocket#receive(int)}: libc {@code sendmsg}/{@code recvmsg} through jnr-ffi, the fd guard,
 * the locks, a {@code byte[]} per message) and no protocol: no frame header check, no request
 * ids, no lease, no cache. A diagnostic column of {@link SharingV2Report} (issue 11): it
 * splits the gap between the C++ ping-pong and a cached version-2 round into what Java and
 * the socket layer cost (this over the C++ ping-pong) and what the protocol costs (the round
 * over this).
 *
 * <p>Shape as the C++ side: the timed thread (the caller, the consumer) sends message 0 and
 * reads message 1, sends 2 and reads 3, ...; an echo thread (the producer) reads each even
 * message and answers with the next. Timed like the Java rounds: {@code warmup} then
 * {@code iterations} runs of {@code timeMs}, ns per round = elapsed / rounds.
 */
final class SocketPingPong {
    private static final int[] NO_FDS = new int[0];

    private SocketPingPong() {}

    /** Pins the echo thread, once the JVM has given it its Linux name (set as it starts). */
    private static void pin(int cpu) throws IOException, InterruptedException {
        for (int tries = 0; ThreadPlacement.pinThreadsNamed("bench-socket-ec", cpu) == 0; tries++) {
            if (tries == 1000) throw new IllegalStateException("the echo thread never appeared in /proc/self/task");
            Thread.sleep(1);
        }
    }

    /**
     * The measured iterations' ns per round. {@code producerCpu} &gt;= 0 pins the echo thread
     * to that CPU (the caller pins itself); the echo thread ends with the socket pair.
     */
    static List<Double> run(int[] sizes, int warmup, int iterations, long timeMs, int producerCpu)
            throws IOException, InterruptedException {
        if (sizes.length == 0 || sizes.length % 2 != 0) {
            throw new IllegalArgumentException("sizes: " + sizes.length + " messages (expected: an even number, > 0)");
        }
        byte[][] messages = new byte[sizes.length][];
        for (int i = 0; i < sizes.length; i++) messages[i] = new byte[sizes[i]];
        FdSocket[] pair = FdSocket.pair();
        FdSocket consumer = pair[0];
        FdSocket producer = pair[1];
        Throwable[] echoFailure = new Throwable[1];
        Thread echo = new Thread(() -> {
            try {
                for (;;) {
                    for (int k = 0; k < sizes.length; k += 2) {
                        try (ReceivedMessage in = producer.receive(sizes[k], 0)) {
                            if (in.endOfStream()) return; // the consumer closed its end: done
                        }
                        producer.send(messages[k + 1], NO_FDS);
                    }
                }
            } catch (IOException e) {
                if (producer.isOpen()) echoFailure[0] = e;
            } catch (RuntimeException | Error e) {
                echoFailure[0] = e;
            }
        }, "bench-socket-echo");
        echo.setDaemon(true);
        echo.start();
        List<Double> measured = new ArrayList<>();
        try {
            if (producerCpu >= 0) pin(producerCpu);
            for (int it = 0; it < warmup + iterations; it++) {
                long n = 0;
                long t0 = System.nanoTime(), t;
                do {
                    for (int k = 0; k < sizes.length; k += 2) {
                        consumer.send(messages[k], NO_FDS);
                        try (ReceivedMessage in = consumer.receive(sizes[k + 1], 0)) {
                            if (in.length() != sizes[k + 1]) {
                                throw new IOException("echo: " + in.length() + " of " + sizes[k + 1] + " bytes"
                                        + (echoFailure[0] != null ? " (echo thread: " + echoFailure[0] + ")" : ""));
                            }
                        }
                    }
                    n++;
                    t = System.nanoTime();
                } while (t - t0 < timeMs * 1_000_000L);
                if (it >= warmup) measured.add((double) (t - t0) / n);
            }
        } finally {
            consumer.shutdownOutput(); // the echo thread reads end of stream and ends
            echo.join(10_000);
            consumer.close();
            producer.close();
        }
        if (echoFailure[0] != null) throw new IOException("the echo thread failed", echoFailure[0]);
        return measured;
    }
}
