package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Independent probe (frame fuzzer), client side: the fake server that answers a real
 * SharingClient by hand, and the checks after each case (no fd, mapping or client thread left).
 */
abstract class FakeServerSupport {
    static VirtualMemoryResource producer;
    static VirtualMemoryBuffer real; // the memory a fake server exports (one chunk of 2G)
    static VirtualMemoryBuffer partA; // two one-chunk buffers of G: a fake 2-chunk buffer
    static VirtualMemoryBuffer partB;
    static long G;
    Path sock;
    VirtualMemoryResource resource;
    FdServerSocket listen;
    final List<Frame> seen = new CopyOnWriteArrayList<>();
    Map<String, Integer> fdBase;
    long mapsBase;

    @BeforeAll
    static void allocate() {
        producer = VirtualMemoryResource.create(0);
        G = producer.granularity();
        real = producer.allocate(2 * G);
        BytePattern.fill(real, 9);
        partA = producer.allocate(G);
        partB = producer.allocate(G);
    }

    /** Sends {@code frame} with the first {@code n} of the fds of partA and partB. */
    static void sendTwoChunk(FdSocket s, byte[] frame, int n) throws IOException {
        try (BufferDescriptor a = partA.exportDescriptor(); BufferDescriptor b = partB.exportDescriptor()) {
            int[] fds = {a.fds()[0], b.fds()[0]};
            s.send(frame, java.util.Arrays.copyOf(fds, n));
        }
    }

    @AfterAll
    static void release() {
        real.close();
        partA.close();
        partB.close();
        producer.close();
    }

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
        fdBase = IpcTestSupport.fdSnapshot();
        listen = FdServerSocket.bind(sock);
        mapsBase = OpenFds.cuvmmMemfdMappings();
    }

    @AfterEach
    void tearDown() throws Exception {
        listen.close();
        IpcTestSupport.await("the client's threads for " + sock + " ended", 10, () -> clientThreads() == 0);
        IpcTestSupport.assertFdsBack(fdBase, "after the client's close");
        long maps = OpenFds.cuvmmMemfdMappings();
        assertEquals(mapsBase, maps, "memfd mappings left in /proc/self/maps");
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    int clientThreads() {
        int n = 0;
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith("cuvmm-ipc-client") && t.getName().endsWith(sock.toString())) n++;
        }
        return n;
    }

    interface Script {
        void run(FdSocket s, int version) throws Exception;
    }

    /** A fake server: HELLO answered with HELLO_OK of {@code version}, then the script, then reads until the end. */
    CompletableFuture<Void> fake(int version, Script script) {
        return CompletableFuture.runAsync(() -> {
            try (FdSocket s = listen.accept()) {
                Frame hello = next(s, version, FrameType.HELLO);
                FrameIO.write(s, new Messages.HelloOk(version, 253), hello.requestId, null, version);
                script.run(s, version);
                while (next(s, version, null) != null) { /* drain */ }
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
    }

    /**
     * Reads frames, recording each (fds closed), answering RELEASE and FORGET, until one of
     * {@code type} (returned) or the end of stream (null).
     */
    Frame next(FdSocket s, int version, FrameType type) throws IOException {
        for (;;) {
            Frame f;
            try {
                f = FrameIO.read(s);
            } catch (IOException e) {
                return null;
            }
            if (f == null) return null;
            f.close();
            seen.add(f);
            try {
                if (f.type == FrameType.RELEASE) {
                    FrameIO.write(s, new Messages.Released(((Messages.Release) f.message).leaseId()), f.requestId, null,
                            version);
                } else if (f.type == FrameType.FORGET) {
                    FrameIO.write(s, new Messages.Forgotten(((Messages.Forget) f.message).ids().length), f.requestId,
                            null, version);
                }
            } catch (IOException gone) {
                // the client has gone: keep reading what it sent
            }
            if (type != null && f.type == type) return f;
        }
    }

    SharingClient client(int version) throws IOException {
        return SharingClient.builder(sock).clientName("victim").protocolVersion(version).timeout(Duration.ofSeconds(5))
                .build();
    }

    static byte[] raw(int version, FrameType type, int requestId, byte[] payload) {
        return concat(IpcTestSupport.header(Protocol.MAGIC, version, type.code(), requestId, payload.length), payload);
    }

    static byte[] v2desc(long lease, long size, long[] sizes, long[] ids, int[] flags) {
        return new Messages.DescriptorV2(lease, 1, size, sizes, ids, flags).encode();
    }

    List<FrameType> seenTypes() {
        List<FrameType> t = new ArrayList<>();
        for (Frame f : seen) t.add(f.type);
        return t;
    }

    List<Messages.Error> seenErrors() {
        List<Messages.Error> t = new ArrayList<>();
        for (Frame f : seen) if (f.message instanceof Messages.Error e) t.add(e);
        return t;
    }

    long[] forgotten() {
        List<Long> ids = new ArrayList<>();
        for (Frame f : seen) if (f.message instanceof Messages.Forget g) for (long id : g.ids()) ids.add(id);
        return ids.stream().mapToLong(Long::longValue).sorted().toArray();
    }
}
