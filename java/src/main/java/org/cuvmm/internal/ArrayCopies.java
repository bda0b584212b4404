package org.cuvmm.internal;

import java.nio.ByteBuffer;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.bytedeco.javacpp.Pointer;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeRangeHandle;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * Copies between Java heap memory ({@code byte[]}, heap {@code ByteBuffer}) and a buffer's
 * range through a bounded native staging piece, {@link #PIECE_BYTES} at a time.
 *
 * <p>Why: a driver copy may block (the NVIDIA driver waits for the device, the host driver
 * waits for its registry lock behind a structural call). Passing a Java array to native code
 * without copying it means a JNI critical region ({@code GetPrimitiveArrayCritical}), and
 * while one is open the GC cannot move objects: young collections wait and other threads'
 * allocations stall (the GC locker). So no array is ever handed to native code. Each piece is
 * moved between the array and a direct staging buffer by Java (a bounded bulk copy with
 * safepoint polls between pieces), and between the staging buffer and the range by one
 * driver call ({@code write_address} / {@code read_address}) that touches no Java object.
 * A GC can therefore run between any two pieces and during every driver call.
 *
 * <p>Cost: one extra host memcpy per byte (array to staging or back), and one driver call
 * (plus its stream synchronize) per piece instead of per copy.
 *
 * <p>Failure contract: a driver error throws {@link org.cuvmm.CudaException} from the piece
 * that failed; the pieces before it have been copied (the window was checked first, so on
 * cuvmm's own rules nothing is copied; a driver failure in the middle of a copy leaves a
 * prefix copied). The caller holds a use of the buffer for the whole copy and has checked
 * both windows.
 *
 * <p>Staging pieces are kept in a small lock-free pool ({@link #POOLED} slots): a copy takes
 * one, returns it when done; a copy that finds the pool empty allocates a piece, and a piece
 * returned to a full pool is dropped (its memory is freed with it by the GC). So at most
 * {@code POOLED * PIECE_BYTES} bytes stay allocated when no copy runs.
 */
public final class ArrayCopies {
    /**
     * Bytes moved per driver call of an array copy (1 MiB): large enough that the per-call
     * overhead (JNI, context check, synchronize) is small against the memcpy, small enough
     * that a pause between pieces comes often.
     */
    public static final int PIECE_BYTES = 1 << 20;

    /** Pieces kept for reuse. */
    static final int POOLED = Math.min(16, Math.max(2, Runtime.getRuntime().availableProcessors()));

    private static final AtomicReferenceArray<Piece> POOL = new AtomicReferenceArray<>(POOLED);

    private ArrayCopies() {}

    /** A direct staging buffer and its native address (fixed for its life). */
    private static final class Piece {
        final ByteBuffer buffer = ByteBuffer.allocateDirect(PIECE_BYTES);
        final long address;

        Piece() {
            try (Pointer p = new Pointer(buffer)) {
                address = p.address();
            }
        }
    }

    private static Piece take() {
        int start = ThreadLocalRandom.current().nextInt(POOLED);
        for (int i = 0; i < POOLED; i++) {
            int slot = (start + i) % POOLED;
            if (POOL.get(slot) != null) {
                Piece p = POOL.getAndSet(slot, null);
                if (p != null) return p;
            }
        }
        return new Piece();
    }

    private static void give(Piece piece) {
        int start = ThreadLocalRandom.current().nextInt(POOLED);
        for (int i = 0; i < POOLED; i++) {
            int slot = (start + i) % POOLED;
            if (POOL.get(slot) == null && POOL.compareAndSet(slot, null, piece)) return;
        }
        // Pool full: drop it; the GC frees its memory.
    }

    /** Copies {@code src[srcOffset, srcOffset + length)} into {@code range} at {@code offset}. */
    public static void write(NativeRangeHandle range, long offset, byte[] src, int srcOffset, int length) {
        if (length == 0) return;
        Piece piece = take();
        try {
            NativeStatus st = NativeCalls.status();
            for (int done = 0; done < length; ) {
                int n = Math.min(PIECE_BYTES, length - done);
                piece.buffer.put(0, src, srcOffset + done, n);
                NativeApi.write_address(range, offset + done, piece.address, n, st);
                NativeCalls.check(st);
                done += n;
            }
        } finally {
            give(piece);
        }
    }

    /**
     * Copies {@code length} bytes of the heap buffer {@code src} from its index
     * {@code srcIndex} (read-only buffers included; its position is not touched) into
     * {@code range} at {@code offset}.
     */
    public static void write(NativeRangeHandle range, long offset, ByteBuffer src, int srcIndex, int length) {
        if (length == 0) return;
        Piece piece = take();
        try {
            NativeStatus st = NativeCalls.status();
            for (int done = 0; done < length; ) {
                int n = Math.min(PIECE_BYTES, length - done);
                piece.buffer.put(0, src, srcIndex + done, n);
                NativeApi.write_address(range, offset + done, piece.address, n, st);
                NativeCalls.check(st);
                done += n;
            }
        } finally {
            give(piece);
        }
    }

    /** Copies {@code length} bytes of {@code range} at {@code offset} into {@code dst} from {@code dstOffset}. */
    public static void read(NativeRangeHandle range, long offset, byte[] dst, int dstOffset, int length) {
        if (length == 0) return;
        Piece piece = take();
        try {
            NativeStatus st = NativeCalls.status();
            for (int done = 0; done < length; ) {
                int n = Math.min(PIECE_BYTES, length - done);
                NativeApi.read_address(range, offset + done, piece.address, n, st);
                NativeCalls.check(st);
                piece.buffer.get(0, dst, dstOffset + done, n);
                done += n;
            }
        } finally {
            give(piece);
        }
    }
}
