package org.cuvmm.bench.streams;

import java.nio.ByteBuffer;

import org.cuvmm.PinnedHostBuffer;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;

/**
 * The measured copy ops, shared by the JMH benchmarks ({@link AsyncCopyBenchmark},
 * {@link OverlapBenchmark}) and the report's call counting. Every op returns only when the
 * bytes have arrived (the async ones synchronize their stream), so an op's time is the
 * copy's time. Setup touches every byte of every host and device buffer once, so no op pays
 * first-touch page faults.
 *
 * <p>Host memory of each kind, {@code bytes} long:
 * <ul>
 * <li>pinned: {@link PinnedHostBuffer#allocate(long)} ({@code cuMemHostAlloc});</li>
 * <li>array: a heap {@code byte[]}, copied through cuvmm's pinned staging (1 MiB pieces);</li>
 * <li>pageable: a direct {@link ByteBuffer} that is not registered. The Java API has no
 *     asynchronous copy for a ByteBuffer, so its ops are the synchronous
 *     {@code copyFrom(long, ByteBuffer)} / {@code copyTo(long, ByteBuffer)}: a
 *     {@code cuMemcpyHtoDAsync}/{@code DtoHAsync} on cuvmm's internal stream and a wait for it,
 *     as the driver does for pageable memory anyway.</li>
 * </ul>
 */
final class CopyFixture implements AutoCloseable {
    final long bytes;
    final VirtualMemoryResource resource;
    final VirtualMemoryBuffer device;
    final VirtualMemoryBuffer device2; // the overlap's second destination; null unless asked for
    final PinnedHostBuffer pinned;
    final PinnedHostBuffer pinned2;    // the overlap's second source; null unless asked for
    final byte[] array;
    final ByteBuffer pageable;
    final Stream stream;
    final Stream stream2;              // null unless asked for

    CopyFixture(long bytes, boolean two) {
        this.bytes = bytes;
        resource = VirtualMemoryResource.create(0);
        device = resource.allocate(bytes);
        pinned = PinnedHostBuffer.allocate(bytes);
        array = new byte[Math.toIntExact(bytes)];
        for (int i = 0; i < array.length; i++) array[i] = (byte) (i * 31 + 7);
        pageable = ByteBuffer.allocateDirect(Math.toIntExact(bytes));
        pageable.put(0, array);
        pinned.asByteBuffer().put(0, array);
        stream = Stream.create(0);
        device.copyFrom(0, array, 0, array.length); // touches every device page
        if (two) {
            device2 = resource.allocate(bytes);
            pinned2 = PinnedHostBuffer.allocate(bytes);
            pinned2.asByteBuffer().put(0, array);
            device2.copyFrom(0, array, 0, array.length);
            stream2 = Stream.create(0);
        } else {
            device2 = null;
            pinned2 = null;
            stream2 = null;
        }
    }

    // ---- host to device ----

    void htodPinned() {
        device.copyFromAsync(0, pinned, 0, bytes, stream);
        stream.synchronize();
    }

    /** Pieces per {@link #htodPinnedBatch32()} op. */
    static final int BATCH = 32;

    /**
     * {@value #BATCH} copies of {@code bytes / 32} from pinned memory to successive offsets,
     * then one synchronize ({@code bytes} per op: at 2 MiB, 32 x 64 KiB, the C++ baseline's
     * {@code htod_pinned_batch32x64KiB}). On the host driver each small copy on the idle
     * stream runs inline.
     */
    void htodPinnedBatch32() {
        long piece = bytes / BATCH;
        for (int k = 0; k < BATCH; k++) device.copyFromAsync(k * piece, pinned, k * piece, piece, stream);
        stream.synchronize();
    }

    void htodArray() {
        device.copyFromAsync(0, array, 0, array.length, stream);
        stream.synchronize();
    }

    void htodPageable() {
        device.copyFrom(0, pageable.clear());
    }

    // ---- device to host ----

    void dtohPinned() {
        device.copyToAsync(0, pinned, 0, bytes, stream);
        stream.synchronize();
    }

    /** No asynchronous copy into an array exists: the synchronous one (staged in 1 MiB pieces). */
    void dtohArray() {
        device.copyTo(0, array, 0, array.length);
    }

    void dtohPageable() {
        device.copyTo(0, pageable.clear());
    }

    // ---- overlap: two copies of `bytes` from pinned memory ----

    void oneStream() {
        device.copyFromAsync(0, pinned, 0, bytes, stream);
        device2.copyFromAsync(0, pinned2, 0, bytes, stream);
        stream.synchronize();
    }

    void twoStreams() {
        device.copyFromAsync(0, pinned, 0, bytes, stream);
        device2.copyFromAsync(0, pinned2, 0, bytes, stream2);
        stream.synchronize();
        stream2.synchronize();
    }

    /** The op a benchmark method names ("htodPinned", ...). */
    Runnable op(String name) {
        return switch (name) {
            case "htodPinned" -> this::htodPinned;
            case "htodPinnedBatch32" -> this::htodPinnedBatch32;
            case "htodArray" -> this::htodArray;
            case "htodPageable" -> this::htodPageable;
            case "dtohPinned" -> this::dtohPinned;
            case "dtohArray" -> this::dtohArray;
            case "dtohPageable" -> this::dtohPageable;
            case "oneStream" -> this::oneStream;
            case "twoStreams" -> this::twoStreams;
            default -> throw new IllegalArgumentException("op: " + name + " (expected: htodPinned, htodPinnedBatch32, htodArray, "
                    + "htodPageable, dtohPinned, dtohArray, dtohPageable, oneStream or twoStreams)");
        };
    }

    /** Checks the bytes made the trip (outside any timing): device to a fresh array, compared. */
    void checkContents() {
        byte[] back = new byte[array.length];
        device.copyTo(0, back, 0, back.length);
        for (int i = 0; i < back.length; i += 4093) {
            if (back[i] != (byte) (i * 31 + 7)) {
                throw new IllegalStateException("byte " + i + " of the device buffer is " + back[i] + " (expected: "
                        + (byte) (i * 31 + 7) + "); a copy lost data");
            }
        }
    }

    @Override
    public void close() {
        if (stream2 != null) stream2.close();
        stream.close();
        if (device2 != null) device2.close();
        device.close();
        if (pinned2 != null) pinned2.close();
        pinned.close();
        resource.close();
    }
}
