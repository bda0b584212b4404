package org.cuvmm.bench.sharing;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.FdSocket;
import org.cuvmm.ipc.ReceivedMessage;

/**
 * One descriptor round trip per {@link #round()} over a connected pair of Unix sockets
 * ({@link FdSocket#pair()}), the exporter on the calling thread and the importer on a peer
 * thread of this fixture:
 *
 * <ol>
 * <li>caller: {@code source.exportDescriptor()}, a frame of the descriptor's sizes, {@code send(frame, fds)},
 *     close the descriptor, then wait for the 1-byte ack;</li>
 * <li>peer: {@code receive(frame)}, {@code BufferDescriptor.adoptFds}, {@code importBuffer}, close the
 *     imported buffer and the descriptor, send the ack.</li>
 * </ol>
 *
 * <p>The frame is the one the C++ baseline ({@code bench/native/transport_baseline.cpp}) sends:
 * int32 flags (0), int32 chunk count, int64 size, one int64 per chunk, little-endian. The
 * source buffer has {@code chunks} physical allocations of one granularity each, built by
 * growing a one-chunk buffer (setup, not timed). Used by {@link TransportBenchmark} and, for
 * counting driver calls outside JMH, by {@link SharingPoolReport}. Not thread-safe.
 */
public final class TransportFixture implements AutoCloseable {
    private static final byte[] ACK = {1};

    private final VirtualMemoryResource exporter;
    private final VirtualMemoryResource importer;
    private final List<VirtualMemoryBuffer> parts = new ArrayList<>();
    private final VirtualMemoryBuffer source;
    private final int chunks;
    private final int frameBytes;
    private final FdSocket sender;
    private final FdSocket receiver;
    private final Thread peer;
    private volatile Throwable peerFailure;

    public TransportFixture(int chunks) throws IOException {
        if (chunks < 1 || chunks > 16) throw new IllegalArgumentException("chunks: " + chunks + " (expected: 1 to 16)");
        this.chunks = chunks;
        this.frameBytes = 16 + 8 * chunks;
        this.exporter = VirtualMemoryResource.create(0);
        this.importer = VirtualMemoryResource.create(0);
        long g = exporter.granularity();
        VirtualMemoryBuffer b = exporter.allocate(g);
        parts.add(b);
        for (int i = 2; i <= chunks; i++) {
            b = exporter.modifyAllocation(b, i * g);
            parts.add(b);
        }
        this.source = b;
        if (source.chunkCount() != chunks) {
            close();
            throw new IllegalStateException("source buffer has " + source.chunkCount() + " chunks (expected " + chunks + ")");
        }
        FdSocket[] pair = FdSocket.pair();
        this.sender = pair[0];
        this.receiver = pair[1];
        this.peer = new Thread(this::peerLoop, "transport-importer");
        peer.setDaemon(true);
        peer.start();
    }

    public int chunks() { return chunks; }

    /** One round trip; returns the size the peer imported (for the blackhole). */
    public long round() throws IOException {
        try (BufferDescriptor d = source.exportDescriptor()) {
            long[] sizes = d.sizes();
            ByteBuffer f = ByteBuffer.allocate(16 + 8 * sizes.length).order(ByteOrder.LITTLE_ENDIAN);
            f.putInt(0).putInt(sizes.length).putLong(d.size());
            for (long s : sizes) f.putLong(s);
            sender.send(f.array(), d.fds());
        }
        try (ReceivedMessage ack = sender.receive(1, 0)) {
            if (ack.length() != 1) {
                throw new IOException("no ack from the importer" + (peerFailure != null ? ": " + peerFailure : ""),
                        peerFailure);
            }
        }
        return source.size();
    }

    private void peerLoop() {
        try {
            for (;;) {
                long[] sizes;
                long size;
                int[] fds;
                try (ReceivedMessage m = receiver.receive(frameBytes, chunks)) {
                    if (m.endOfStream()) return;
                    ByteBuffer f = ByteBuffer.wrap(m.data()).order(ByteOrder.LITTLE_ENDIAN);
                    f.getInt();
                    int n = f.getInt();
                    size = f.getLong();
                    sizes = new long[n];
                    for (int i = 0; i < n; i++) sizes[i] = f.getLong();
                    fds = m.takeFds();
                }
                try (BufferDescriptor d = BufferDescriptor.adoptFds(fds, sizes, HandleType.POSIX_FD, size);
                     VirtualMemoryBuffer view = importer.importBuffer(d)) {
                    if (view.size() != size) throw new IllegalStateException("imported " + view.size() + " of " + size);
                }
                receiver.send(ACK, null);
            }
        } catch (Throwable t) {
            peerFailure = t;
            receiver.close(); // the sender's receive sees end of stream and reports this
        }
    }

    /** Stops the peer, closes the sockets, buffers and resources. Idempotent enough for teardown. */
    @Override
    public void close() {
        try {
            if (sender != null) {
                sender.shutdownOutput();
                peer.join(10_000);
            }
        } catch (IOException | InterruptedException e) {
            throw new IllegalStateException("stopping the importer thread", e);
        } finally {
            if (sender != null) sender.close();
            if (receiver != null) receiver.close();
            for (int i = parts.size() - 1; i >= 0; i--) parts.get(i).close();
            exporter.close();
            importer.close();
        }
        if (peerFailure != null) throw new IllegalStateException("the importer thread failed", peerFailure);
    }
}
