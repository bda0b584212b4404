package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.ipc.SharingServer;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The producer/consumer pair as a user runs it: the producer in this JVM (so its fds can be
 * counted), the consumer in a second JVM, so the fds really cross processes.
 */
class SharedProducerConsumerTest {
    private static final String VERIFIED = "verified: all " + SharedProducer.SIZE + " bytes hold pattern seed "
            + SharedProducer.SEED;

    private Path dir;
    private Path socket;
    private File childLog;
    private Process child;
    private Leaks.Snapshot baseline;

    @BeforeEach
    void setUp() throws Exception {
        dir = Files.createTempDirectory(Path.of("/tmp"), "cuvmm-ex");
        socket = dir.resolve("p.sock");
        childLog = dir.resolve("consumer.log").toFile();
        // Loads the classes, jars and native code every test below uses, then counts.
        baseline = Leaks.baselineAfter(() -> {
            Path warm = dir.resolve("warm.sock");
            Leaks.Output out = new Leaks.Output();
            FutureTask<Boolean> p = startProducer(warm, 1, out, new CountDownLatch(1));
            awaitServing(out);
            SharedConsumer.run(warm, false, new ByteArrayInputStream(new byte[0]), new Leaks.Output().stream);
            assertTrue(p.get(10, TimeUnit.SECONDS), out.text());
        });
    }

    @AfterEach
    void tearDown() throws Exception {
        if (child != null && child.isAlive()) child.destroyForcibly().waitFor();
        try (var s = Files.walk(dir)) {
            s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    @Test
    void aConsumerInAnotherJvmVerifiesTheProducersBytes() throws Exception {
        Leaks.Output producerOut = new Leaks.Output();
        FutureTask<Boolean> producer = startProducer(socket, 1, producerOut, new CountDownLatch(1));
        awaitServing(producerOut);
        assertTrue(producerOut.text().startsWith("serving 'example': " + SharedProducer.SIZE + " bytes"), producerOut.text());

        child = startConsumer();
        assertTrue(child.waitFor(30, TimeUnit.SECONDS), "the consumer finished: " + read(childLog));
        String consumerOut = read(childLog);
        assertEquals(0, child.exitValue(), consumerOut);
        assertTrue(consumerOut.startsWith("attached 'example': " + SharedProducer.SIZE + " bytes"), consumerOut);
        assertTrue(consumerOut.contains(VERIFIED), consumerOut);
        assertTrue(consumerOut.endsWith("released\n"), consumerOut);

        // The producer stops by itself after its one consumer, and says who came: the other JVM.
        assertTrue(producer.get(15, TimeUnit.SECONDS), producerOut.text());
        String out = producerOut.text();
        assertTrue(out.contains("attach  ATTACHED 'example' lease"), out);
        assertTrue(out.contains("by SharedConsumer pid " + child.pid() + " (pid " + child.pid()), out);
        assertTrue(out.contains("release RELEASED 'example'"), out);
        assertTrue(out.endsWith("stopped: buffer released, socket removed\n"), out);
        assertFalse(Files.exists(socket), "the socket file is removed");
        baseline.assertBack("after serving a consumer in another JVM");
    }

    @Test
    void aKilledConsumerFreesItsLease() throws Exception {
        Leaks.Output producerOut = new Leaks.Output();
        FutureTask<Boolean> producer = startProducer(socket, 1, producerOut, new CountDownLatch(1));
        awaitServing(producerOut);

        child = startConsumer("--hold");
        await("the consumer holds the buffer", () -> read(childLog).contains("holding it"), () -> read(childLog));
        child.destroyForcibly(); // SIGKILL: no RELEASE is ever sent
        assertTrue(child.waitFor(10, TimeUnit.SECONDS));

        // The server sees the connection end, frees the lease, and the producer finishes.
        assertTrue(producer.get(15, TimeUnit.SECONDS), producerOut.text());
        assertTrue(producerOut.text().contains("release DISCONNECTED 'example'"), producerOut.text());
        baseline.assertBack("after a consumer was killed while attached");
    }

    @Test
    void stoppingTheProducerWaitsForAHoldingConsumer() throws Exception {
        Leaks.Output producerOut = new Leaks.Output();
        CountDownLatch stop = new CountDownLatch(1);
        FutureTask<Boolean> producer = startProducer(socket, 0, producerOut, stop); // serves until stopped
        awaitServing(producerOut);

        child = startConsumer("--hold"); // its stdin stays open: only the DROP lets it go
        await("the consumer holds the buffer", () -> read(childLog).contains("holding it"), () -> read(childLog));
        stop.countDown(); // what Ctrl-C does

        // unpublish sends DROP; the consumer reads everything again and releases; only then
        // does closeWhenUnused() close the producer's buffer.
        assertTrue(child.waitFor(30, TimeUnit.SECONDS), read(childLog));
        String consumerOut = read(childLog);
        assertEquals(0, child.exitValue(), consumerOut);
        assertTrue(consumerOut.contains("DROP: the producer withdrew 'example'"), consumerOut);
        assertTrue(consumerOut.contains("still readable: all " + SharedProducer.SIZE + " bytes"), consumerOut);
        assertTrue(producer.get(15, TimeUnit.SECONDS), producerOut.text());
        String out = producerOut.text();
        assertTrue(out.contains("release RELEASED 'example'"), out);
        assertFalse(out.contains("still attached after"), "released within the grace period: " + out);
        baseline.assertBack("after a producer stopped under a holding consumer");
    }

    @Test
    void bothHalvesInOneJvmLeaveNothingOpen() throws Exception {
        // The consumer side's own accounting: its fds and mappings (which a second JVM takes
        // away with it when it exits) must be released by the example itself.
        Leaks.Output producerOut = new Leaks.Output();
        FutureTask<Boolean> producer = startProducer(socket, 1, producerOut, new CountDownLatch(1));
        awaitServing(producerOut);
        Leaks.Output consumerOut = new Leaks.Output();
        assertEquals(0, SharedConsumer.run(socket, false, new ByteArrayInputStream(new byte[0]), consumerOut.stream),
                consumerOut.text());
        assertTrue(consumerOut.text().contains(VERIFIED), consumerOut.text());
        assertTrue(producer.get(15, TimeUnit.SECONDS), producerOut.text());
        baseline.assertBack("after producer and consumer ran in this JVM");
    }

    @Test
    @SuppressWarnings("try") // server.close() inside its try: the point of the test
    void aConsumersMappingOutlivesTheProducersBuffer() throws Exception {
        // The claim behind closeWhenUnused in SharedProducer: once the producer gave its buffer
        // up and its server closed, a consumer that still maps the memory reads the same bytes.
        try (VirtualMemoryResource producerSide = VirtualMemoryResource.create(0);
             VirtualMemoryResource consumerSide = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer owned = producerSide.allocate(SharedProducer.SIZE);
            BytePattern.fill(owned, 3);
            try (SharingServer server = SharingServer.builder(socket).build();
                 SharingClient client = SharingClient.connect(socket, "holder")) {
                server.publish("x", owned);
                Attachment a = client.attach("x", consumerSide);
                owned.closeWhenUnused();
                assertFalse(owned.isClosed(), "the consumer's lease keeps the producer's buffer open");
                server.close(); // ends the lease: the producer's buffer is closed now
                assertTrue(owned.isClosed());
                assertEquals(-1, BytePattern.firstMismatch(a.buffer(), 3), "the consumer still reads every byte");
                await("the client sees the server gone", () -> !client.isConnected(), client::toString);
                a.close(); // unmaps; no RELEASE to send: the server freed the lease with the connection
            } finally {
                owned.closeWhenUnused();
            }
        }
        baseline.assertBack("after the consumer unmapped the last view");
    }

    // ---------------------------------------------------------------- helpers

    private static FutureTask<Boolean> startProducer(Path socket, int consumers, Leaks.Output out, CountDownLatch stop) {
        FutureTask<Boolean> f = new FutureTask<>(() -> SharedProducer.serve(socket, consumers, out.stream, stop));
        Thread t = new Thread(f, "producer");
        t.setDaemon(true);
        t.start();
        return f;
    }

    private static void awaitServing(Leaks.Output out) throws InterruptedException {
        // The whole first line: printf writes it to the stream in pieces, and a check made
        // between two pieces saw "serving 'example': " alone (a CI run, 2026-12-01).
        await("the producer serves", () -> out.text().startsWith("serving") && out.text().contains("\n"), out::text);
    }

    /** SharedConsumer in a second JVM: this JVM's java, class path and cuvmm.* properties. */
    private Process startConsumer(String... extra) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        for (String k : System.getProperties().stringPropertyNames()) {
            if (k.startsWith("cuvmm.")) cmd.add("-D" + k + "=" + System.getProperty(k));
        }
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(SharedConsumer.class.getName());
        cmd.add(socket.toString());
        cmd.addAll(List.of(extra));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(childLog).start();
    }

    private static String read(File f) {
        try {
            return Files.readString(f.toPath(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(no output: " + e + ")";
        }
    }

    private static void await(String what, java.util.function.BooleanSupplier condition, Supplier<String> context)
            throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > until) throw new AssertionError("timed out waiting for: " + what + "\n" + context.get());
            Thread.sleep(10);
        }
    }
}
