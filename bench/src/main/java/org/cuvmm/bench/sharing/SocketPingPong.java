package org.cuvmm.bench.sharing;

import java.io.IOException;

import org.cuvmm.ipc.FdSocket;
import org.cuvmm.ipc.ReceivedMessage;

/**
 * The bare ping-pong of a round's message sizes in Java, over cuvmm's own socket layer
 * ({@link FdSocket#pair()}, {@link FdSocket#send(byte[], int[])}, {@link
 * FdSocket#receive(int)}: libc {@code send} (no fds) and {@code recvmsg} through jnr-ffi, the fd guard,
 * the locks, a {@code byte[]} per message) and no protocol: no frame header check, no request
 * ids, no lease, no cache. A diagnostic column of {@link SharingV2Report} (issue 11): it
 * splits the gap between the C++ ping-pong and a cached version-2 round into what Java and
 * the socket layer cost (this over the C++ ping-pong) and what the protocol costs (the round
 * over this).
 *
 * <p>Shape as the C++ side: the timed thread (the caller, the consumer) sends message 0 and
 * reads message 1, sends 2 and reads 3, ...; an echo thread (the producer) reads each even
 * message and answers with the next. Timed in segments like the Java rounds ({@link
 * #segment(long)}: ns per round = elapsed / rounds), so that the report can interleave it
 * with them. {@link #close()} ends the echo thread and closes the pair.
 */
final class SocketPingPong implements AutoCloseable {
    private static final int[] NO_FDS = new int[0];

    private final int[] sizes;
    private final byte[][] messages;
    private final FdSocket consumer;
    private final FdSocket producer;
    private final Thread echo;
    private volatile Throwable echoFailure;

    private SocketPingPong(int[] sizes) throws IOException {
        if (sizes.length == 0 || sizes.length % 2 != 0) {
            throw new IllegalArgumentException("sizes: " + sizes.length + " messages (expected: an even number, > 0)");
        }
        this.sizes = sizes.clone();
        this.messages = new byte[sizes.length][];
        for (int i = 0; i < sizes.length; i++) messages[i] = new byte[sizes[i]];
        FdSocket[] pair = FdSocket.pair();
        this.consumer = pair[0];
        this.producer = pair[1];
        this.echo = new Thread(this::echo, "bench-socket-echo");
        echo.setDaemon(true);
    }

    /**
     * A ping-pong of {@code sizes} with its echo thread started; {@code producerCpu} &gt;= 0
     * pins the echo thread to that CPU (the caller pins itself).
     */
    static SocketPingPong open(int[] sizes, int producerCpu) throws IOException, InterruptedException {
        SocketPingPong p = new SocketPingPong(sizes);
        p.echo.start();
        try {
            if (producerCpu >= 0) pin(producerCpu);
            return p;
        } catch (IOException | InterruptedException | RuntimeException e) {
            p.close();
            throw e;
        }
    }

    private void echo() {
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
            if (producer.isOpen()) echoFailure = e;
        } catch (RuntimeException | Error e) {
            echoFailure = e;
        } finally {
            // A failed echo must not leave the timed side waiting for an answer: it reads the end.
            try {
                if (producer.isOpen()) producer.shutdownOutput();
            } catch (IOException | RuntimeException e) {
                if (echoFailure != null) echoFailure.addSuppressed(e);
            }
        }
    }

    /** Pins the echo thread, once the JVM has given it its Linux name (set as it starts). */
    private static void pin(int cpu) throws IOException, InterruptedException {
        for (int tries = 0; ThreadPlacement.pinThreadsNamed("bench-socket-ec", cpu) == 0; tries++) {
            if (tries == 1000) throw new IllegalStateException("the echo thread never appeared in /proc/self/task");
            Thread.sleep(1);
        }
    }

    /** Rounds for {@code timeMs} on the calling thread; returns ns per round. */
    double segment(long timeMs) throws IOException {
        long n = 0;
        long t0 = System.nanoTime(), t;
        do {
            for (int k = 0; k < sizes.length; k += 2) {
                consumer.send(messages[k], NO_FDS);
                try (ReceivedMessage in = consumer.receive(sizes[k + 1], 0)) {
                    if (in.length() != sizes[k + 1]) { // short: the echo thread ended the stream
                        Throwable f = echoFailure;
                        throw new IOException("echo: " + in.length() + " of " + sizes[k + 1] + " bytes"
                                + (f != null ? " (echo thread: " + f + ")" : ""));
                    }
                }
            }
            n++;
            t = System.nanoTime();
        } while (t - t0 < timeMs * 1_000_000L);
        return (double) (t - t0) / n;
    }

    @Override
    public void close() throws IOException {
        try {
            consumer.shutdownOutput(); // the echo thread reads end of stream and ends
            echo.join(10_000);
            if (echo.isAlive()) throw new IOException("the echo thread did not end within 10 s of the end of its input");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted waiting for the echo thread to end", e);
        } finally {
            consumer.close();
            producer.close();
        }
        Throwable f = echoFailure;
        if (f != null) throw new IOException("the echo thread failed", f);
    }
}
