package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.cuvmm.BufferOrigin;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.cuvmm.testing.ChildJvm;
import org.cuvmm.testing.OpenFds;

/** Helpers of the vmm-ipc tests: fd snapshots, pipes, raw frames, a 3-chunk buffer, child JVMs. */
final class IpcTestSupport {
    static {
        // The JDK opens /dev/random and /dev/urandom on first use of SecureRandom and keeps them:
        // open them now, before any baseline.
        new java.security.SecureRandom().nextLong();
        NativeIo.posix();
    }

    private IpcTestSupport() {}

    /** Open fds by kind ({@link OpenFds#byKind()}): sockets, pipes and memfds all count. */
    static Map<String, Integer> fdSnapshot() { return OpenFds.byKind(); }

    /** True when this JVM runs cuvmm's host driver (exported fds are memfds any process can mmap). */
    static boolean onHostDriver() { return org.cuvmm.Driver.get().kind() == org.cuvmm.DriverKind.HOST; }

    /**
     * True when every allocation is backed by a cuvmm host memfd in this process: the host driver,
     * or the cuda driver over cuvmm's host library (the cuda pass), which is the same implementation.
     */
    static boolean memfdsBackAllocations() {
        org.cuvmm.Driver d = org.cuvmm.Driver.get();
        return d.kind() == org.cuvmm.DriverKind.HOST || d.isHostLibrary();
    }

    static int memfdCount() { return OpenFds.cuvmmMemfds(); }

    /** Waits (up to 10 s: connection threads close their sockets asynchronously) for the fds to match {@code baseline}. */
    static void assertFdsBack(Map<String, Integer> baseline, String when) throws InterruptedException {
        OpenFds.assertBack(baseline, when);
    }

    /** A pipe: [read end, write end], both owned by the caller. */
    static int[] pipe() {
        int[] p = new int[2];
        assertEquals(0, NativeIo.posix().pipe(p), "pipe()");
        return p;
    }

    /** True when {@code fd} is open in this process. */
    static boolean isOpen(int fd) { return OpenFds.isOpen(fd); }

    /** A fake version-1 server's first step: reads the client's HELLO and answers HELLO_OK version 1. */
    static void answerHelloV1(FdSocket s) throws IOException {
        try (Frame hello = FrameIO.read(s)) {
            FrameIO.write(s, new Messages.HelloOk(1, Protocol.MAX_FDS_PER_FRAME), hello.requestId, null);
        }
    }

    /** A fake version-2 server's first step: reads the client's HELLO and answers HELLO_OK version 2. */
    static void answerHelloV2(FdSocket s) throws IOException {
        try (Frame hello = FrameIO.read(s)) {
            FrameIO.write(s, new Messages.HelloOk(2, Protocol.MAX_FDS_PER_FRAME), hello.requestId, null, 2);
        }
    }

    /**
     * A raw version-1 client's first two steps on {@code s}: HELLO (request 1, as {@code
     * clientName}), then ATTACH {@code name} (request 2). Returns the DESCRIPTOR's lease id;
     * its fds are closed.
     */
    static long helloAndAttachV1(FdSocket s, String clientName, String name) throws IOException {
        s.send(frame(1, 1, str(clientName)), null);
        try (Frame f = FrameIO.read(s)) {
            org.junit.jupiter.api.Assertions.assertSame(FrameType.HELLO_OK, f.type, "got " + f);
        }
        s.send(frame(3, 2, str(name)), null);
        try (Frame f = FrameIO.read(s)) {
            org.junit.jupiter.api.Assertions.assertSame(FrameType.DESCRIPTOR, f.type, "got " + f);
            return ((Messages.Descriptor) f.message).leaseId();
        }
    }

    /** What a fake server does with the one connection it accepts. */
    @FunctionalInterface
    interface FakeConnection {
        void serve(FdSocket s) throws IOException;
    }

    /** What a fake version-2 server does with each frame it reads (the frame is closed after). */
    @FunctionalInterface
    interface FrameHandler {
        void onFrame(FdSocket s, Frame f) throws IOException;
    }

    /**
     * Starts thread {@code name}: accepts one connection on {@code listen} and runs {@code serve} on
     * it; an IOException or RuntimeException (the client closed) ends it quietly, closing the socket.
     */
    static Thread startFakeServer(String name, FdServerSocket listen, FakeConnection serve) {
        Thread t = new Thread(() -> {
            try (FdSocket s = listen.accept()) {
                serve.serve(s);
            } catch (IOException | RuntimeException end) {
                // the client closed
            }
        }, name);
        t.start();
        return t;
    }

    /**
     * A fake version-2 server ({@link #startFakeServer}): answers the HELLO ({@link #answerHelloV2}),
     * then hands each frame it reads to {@code onFrame} until the client closes.
     */
    static Thread startFakeV2Server(String name, FdServerSocket listen, FrameHandler onFrame) {
        return startFakeServer(name, listen, s -> {
            answerHelloV2(s);
            for (;;) {
                try (Frame f = FrameIO.read(s)) {
                    onFrame.onFrame(s, f);
                }
            }
        });
    }

    /** A version-2 DESCRIPTOR of one chunk of {@code size} bytes, new id {@code id} (its fd flag set). */
    static Messages.DescriptorV2 oneFreshChunk(long lease, long size, long id) {
        return new Messages.DescriptorV2(lease, Protocol.HANDLE_TYPE_POSIX_FD, size, new long[] {size}, new long[] {id},
                new int[] {Protocol.CHUNK_FLAG_FD});
    }

    /** A fresh short socket path in its own temporary directory. */
    static Path socketPath() throws IOException {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm");
        dir.toFile().deleteOnExit();
        return dir.resolve("s.sock");
    }

    static void deleteTree(Path dir) {
        if (dir == null || !Files.exists(dir)) return;
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }

    /** A header with every field chosen by the test. */
    static byte[] header(int magic, int version, int type, int requestId, long length) {
        return ByteBuffer.allocate(16).putInt(magic).putShort((short) version).putShort((short) type)
                .putInt(requestId).putInt((int) length).array();
    }

    static byte[] frame(int type, int requestId, byte[] payload) {
        return concat(header(Protocol.MAGIC, Protocol.VERSION, type, requestId, payload.length), payload);
    }

    /**
     * The next frame of a version-2 connection (a raw client's read), failing the test after
     * {@code seconds}, at the end of the stream, or on a frame the protocol forbids; {@code
     * waitingFor} names what the test waits for.
     */
    static Frame nextFrame2(FdSocket s, int seconds, String waitingFor) throws IOException {
        Frame f;
        try {
            f = FrameIO.readBefore(s, 2, 2, System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds));
        } catch (FrameIO.Stalled e) {
            throw new AssertionError("no frame within " + seconds + " s waiting for " + waitingFor + ": "
                    + e.getMessage(), e);
        } catch (ProtocolException e) {
            throw new AssertionError("waiting for " + waitingFor + ", the server sent a frame the protocol forbids "
                    + "(an EVICT of more than 8190 ids, or naming an id twice, is one): " + e.getMessage(), e);
        }
        assertNotNull(f, "end of stream waiting for " + waitingFor);
        return f;
    }

    /** A raw client's version-2 HELLO as request {@code requestId}; the reply must be HELLO_OK for version 2. */
    static void hello2(FdSocket s, int requestId, String clientName, int seconds) throws IOException {
        s.send(frame2(1, requestId, str(clientName)), null);
        try (Frame f = nextFrame2(s, seconds, "HELLO_OK")) {
            assertSame(FrameType.HELLO_OK, f.type, "got " + f);
            assertEquals(2, ((Messages.HelloOk) f.message).version(), "a version-2 connection");
        }
    }

    /** A frame whose header says version 2 (the version of a version-2 connection's frames). */
    static byte[] frame2(int type, int requestId, byte[] payload) {
        return concat(header(Protocol.MAGIC, 2, type, requestId, payload.length), payload);
    }

    static byte[] concat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) n += p.length;
        ByteBuffer b = ByteBuffer.allocate(n);
        for (byte[] p : parts) b.put(p);
        return b.array();
    }

    /** A u16-length UTF-8 string. */
    static byte[] str(String s) {
        byte[] u = s.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(2 + u.length).putShort((short) u.length).put(u).array();
    }

    /** A DESCRIPTOR payload with every field chosen by the test. */
    static byte[] descriptorPayload(long lease, int handleType, long size, long... chunkSizes) {
        ByteBuffer b = ByteBuffer.allocate(24 + 8 * chunkSizes.length).putLong(lease).putInt(handleType).putLong(size)
                .putInt(chunkSizes.length);
        for (long c : chunkSizes) b.putLong(c);
        return b.array();
    }

    /** A resource and a 3-chunk buffer whose last chunk was placed by a forced move (as in GrowTest). */
    static final class ThreeChunks implements AutoCloseable {
        final VirtualMemoryResource resource;
        final VirtualMemoryBuffer buffer;

        ThreeChunks() {
            long g;
            long hint;
            try (VirtualMemoryResource probe = VirtualMemoryResource.create(0)) {
                g = probe.granularity();
                try (VirtualMemoryBuffer b = probe.allocate(32 * g)) {
                    hint = b.address();
                }
            }
            resource = resourceAt(hint);
            VirtualMemoryBuffer a = resource.allocate(g);
            VirtualMemoryBuffer b = resource.modifyAllocation(a, 2 * g);
            VirtualMemoryResource decoyResource = resourceAt(b.address() + 2 * g);
            VirtualMemoryBuffer decoy = decoyResource.allocate(g);
            VirtualMemoryBuffer c = resource.modifyAllocation(b, 3 * g - 4096 + 100);
            a.close();
            b.close();
            decoy.close();
            decoyResource.close();
            buffer = c;
            assertEquals(3, c.chunkCount(), "chunks of " + c);
            assertEquals(BufferOrigin.MOVED, c.origin(), "the last chunk was placed by a forced move");
        }

        private static VirtualMemoryResource resourceAt(long hint) {
            return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().addressHint(hint).build());
        }

        @Override
        public void close() {
            buffer.close();
            resource.close();
        }
    }

    /** The work of a child JVM's main ({@link #runChildMain}). */
    @FunctionalInterface
    interface ChildBody {
        void run() throws Exception;
    }

    /**
     * A child JVM's main: runs {@code body} and exits 0; a failure prints {@code "FAILED: "}
     * with its stack trace on stdout (which the parent reads) and exits 2.
     */
    static void runChildMain(ChildBody body) {
        try {
            body.run();
        } catch (Throwable t) {
            System.out.println("FAILED: " + t);
            t.printStackTrace(System.out);
            System.out.flush();
            System.exit(2);
        }
        System.out.flush();
        System.exit(0);
    }

    /** Starts {@code main} in a child JVM with this JVM's class path and environment; output goes to {@code log}. */
    static Process startChild(Class<?> main, File log, List<String> prefix, List<String> jvmArgs, String... args)
            throws IOException {
        return ChildJvm.start(main, log, prefix, jvmArgs, args);
    }

    static String read(File f) { return ChildJvm.read(f); }

    /** Waits up to {@code seconds} for {@code condition}. */
    static void await(String what, int seconds, java.util.function.BooleanSupplier condition) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (!condition.getAsBoolean()) {
            assertTrue(System.nanoTime() < until, "timed out after " + seconds + " s waiting for: " + what);
            Thread.sleep(10);
        }
    }

    /** One racer's work: {@code me} is its number, 0 to threads - 1. */
    @FunctionalInterface
    interface RaceBody {
        void run(int me) throws Exception;
    }

    /** One racer's work and its result: {@code me} is its number, 0 to threads - 1. */
    @FunctionalInterface
    interface RaceCall<T> {
        T call(int me) throws Exception;
    }

    /**
     * Runs {@code body} on {@code threads} threads of a pool of their own, all released at once by one
     * latch; waits up to {@code timeoutSeconds} for each in turn (a failure is rethrown by
     * {@link Future#get}); the pool is shut down however it ends.
     */
    static void race(int threads, int timeoutSeconds, RaceBody body) throws Exception {
        raceFor(threads, timeoutSeconds, me -> {
            body.run(me);
            return null;
        });
    }

    /** {@link #race}, returning each racer's result in the order of their numbers. */
    static <T> List<T> raceFor(int threads, int timeoutSeconds, RaceCall<T> body) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            return raceFor(pool, threads, timeoutSeconds, body);
        } finally {
            pool.shutdownNow();
        }
    }

    /** {@link #raceFor(int, int, RaceCall)} on the caller's {@code pool} (left running). */
    static <T> List<T> raceFor(ExecutorService pool, int threads, int timeoutSeconds, RaceCall<T> body) throws Exception {
        CountDownLatch go = new CountDownLatch(1);
        List<Future<T>> done = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int me = t;
            done.add(pool.submit(() -> {
                go.await();
                return body.call(me);
            }));
        }
        go.countDown();
        List<T> results = new ArrayList<>();
        for (Future<T> f : done) results.add(f.get(timeoutSeconds, TimeUnit.SECONDS));
        return results;
    }
}
