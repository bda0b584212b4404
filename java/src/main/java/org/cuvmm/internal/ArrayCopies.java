package org.cuvmm.internal;

import java.nio.ByteBuffer;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.Pointer;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeRangeHandle;
import org.cuvmm.internal.jni.NativeStatus;
import org.cuvmm.internal.jni.NativeStreamHandle;

/**
 * Copies between Java heap memory ({@code byte[]}, heap {@code ByteBuffer}) and a buffer's
 * range through a bounded native staging piece, {@link #PIECE_BYTES} at a time; file mappings
 * take the same path, so that only a checked copy touches their pages ({@link FileMappings}).
 *
 * <p>Why: a driver copy may block (the NVIDIA driver waits for the device, the host driver
 * waits for its registry lock behind a structural call). Passing a Java array to native code
 * without copying it means a JNI critical region ({@code GetPrimitiveArrayCritical}), and
 * while one is open the GC cannot move objects: young collections wait and other threads'
 * allocations stall (the GC locker). So no array is ever handed to native code. Each piece is
 * moved between the array and a direct staging buffer by Java (a bounded bulk copy with
 * safepoint polls between pieces), and between the staging buffer and the range by one
 * driver call ({@code write_address_on} / {@code read_address_on}: queued on the caller's
 * stream, cuvmm's own, which is then waited for) that touches no Java object.
 * A GC can therefore run between any two pieces and during every driver call.
 *
 * <p>Cost: one extra host memcpy per byte (array to staging or back), and one driver call
 * (plus its stream synchronize) per piece instead of per copy.
 *
 * <p>The stream is cuvmm's own non-blocking stream of the buffer's device, borrowed by the
 * caller (the buffer), which has made it wait for the buffer's recorded stream uses first.
 *
 * <p>Failure contract: a driver error throws {@link org.cuvmm.CudaException} from the piece
 * that failed; the pieces before it have been copied (the window was checked first, so on
 * cuvmm's own rules nothing is copied; a driver failure in the middle of a copy leaves a
 * prefix copied). The caller holds a use of the buffer for the whole copy and has checked
 * both windows.
 *
 * <p>Staging pieces are native memory ({@code malloc}, wrapped as a direct {@code ByteBuffer}
 * that owns nothing), freed explicitly, never by the GC: with more copies in flight than
 * pooled pieces, each extra copy used to allocate a direct buffer and drop it for the GC,
 * which under {@code -XX:MaxDirectMemorySize} or {@code -XX:+DisableExplicitGC} could fail
 * with "Cannot reserve direct buffer memory". They count against neither that limit nor
 * JavaCPP's {@code maxBytes}. Full-size pieces are kept in a small lock-free pool
 * ({@link #POOLED} slots): a copy takes one and returns it when done. A copy that finds the
 * pool empty allocates a piece of {@code min(length, PIECE_BYTES)} bytes; a piece smaller than
 * {@code PIECE_BYTES}, or one returned to a full pool, is freed at once. So at most
 * {@code POOLED * PIECE_BYTES} bytes stay allocated when no copy runs, and each running copy
 * holds at most one piece.
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

    /**
     * A staging piece: {@code capacity} bytes of malloc'ed memory, its address and a direct
     * buffer over it (which does not own it). Owned by one copy at a time, or by the pool;
     * {@link #free} runs once, by whoever drops it, after its last use.
     */
    private static final class Piece {
        final Pointer memory;
        final long address;
        final int capacity;
        final ByteBuffer buffer;

        Piece(int capacity) {
            Pointer m = Pointer.malloc(capacity);
            if (m == null || m.isNull()) {
                throw new OutOfMemoryError("malloc of a " + capacity + "-byte staging piece for an array copy failed");
            }
            this.memory = m;
            this.address = m.address();
            this.capacity = capacity;
            this.buffer = new BytePointer(m).capacity(capacity).asByteBuffer();
        }

        void free() {
            Pointer.free(memory);
        }
    }

    /** A pooled full-size piece, or a new one of {@code min(length, PIECE_BYTES)} bytes. */
    private static Piece take(int length) {
        int start = ThreadLocalRandom.current().nextInt(POOLED);
        for (int i = 0; i < POOLED; i++) {
            int slot = (start + i) % POOLED;
            if (POOL.get(slot) != null) {
                Piece p = POOL.getAndSet(slot, null);
                if (p != null) return p;
            }
        }
        return new Piece(Math.min(PIECE_BYTES, length));
    }

    /** Pools a full-size piece if a slot is free; frees it otherwise (and every smaller one). */
    private static void give(Piece piece) {
        if (piece.capacity != PIECE_BYTES) {
            piece.free();
            return;
        }
        int start = ThreadLocalRandom.current().nextInt(POOLED);
        for (int i = 0; i < POOLED; i++) {
            int slot = (start + i) % POOLED;
            if (POOL.get(slot) == null && POOL.compareAndSet(slot, null, piece)) return;
        }
        piece.free();  // pool full
    }

    /**
     * Copies {@code src[srcOffset, srcOffset + length)} into {@code range} at {@code offset}, each
     * piece on {@code stream} and waited for.
     */
    public static void write(NativeRangeHandle range, NativeStreamHandle stream, long offset, byte[] src, int srcOffset,
                             int length) {
        writeInPieces(range, stream, offset, length, (piece, done, n) -> piece.buffer.put(0, src, srcOffset + done, n));
    }

    /**
     * Copies {@code length} bytes of the heap buffer {@code src} from its index
     * {@code srcIndex} (read-only buffers included; its position is not touched) into
     * {@code range} at {@code offset}.
     */
    public static void write(NativeRangeHandle range, NativeStreamHandle stream, long offset, ByteBuffer src,
                             int srcIndex, int length) {
        writeInPieces(range, stream, offset, length, (piece, done, n) -> piece.buffer.put(0, src, srcIndex + done, n));
    }

    /**
     * Copies {@code length} bytes of the file mapping {@code src} from its index {@code srcIndex}
     * into {@code range} at {@code offset}, each piece read by {@link FileMappings#read}: a page
     * that is gone stops the copy with {@link FileMappings.LostPage} before that piece reaches
     * the range (the pieces before it have).
     */
    public static void writeFromMapping(NativeRangeHandle range, NativeStreamHandle stream, long offset, ByteBuffer src,
                                        int srcIndex, int length) {
        long base = FileMappings.address(src);
        writeInPieces(range, stream, offset, length,
                (piece, done, n) -> FileMappings.read(src, base, srcIndex + done, piece.buffer, piece.address, n));
    }

    /**
     * One piece {@code [done, done + n)} of a copy and the staging piece {@code piece}: fill its
     * start from the Java source, hand its start to the Java destination, or both ends.
     */
    @FunctionalInterface
    private interface PieceStep {
        void move(Piece piece, int done, int n);
    }

    /** One staging piece at a time: fill it from the Java source, then one driver copy into the range. */
    private static void writeInPieces(NativeRangeHandle range, NativeStreamHandle stream, long offset, int length,
                                      PieceStep source) {
        if (length == 0) return;
        NativeStatus st = NativeCalls.status();
        inPieces(length, (piece, done, n) -> {
            source.move(piece, done, n);
            NativeApi.write_address_on(range, offset + done, piece.address, n, stream, st);
            NativeCalls.check(st);
        });
    }

    /**
     * Runs {@code step} for each piece of at most {@link #PIECE_BYTES} of a {@code length}-byte
     * copy, in order, with one staging piece taken for the whole copy and given back after it.
     */
    private static void inPieces(int length, PieceStep step) {
        Piece piece = take(length);
        try {
            for (int done = 0; done < length; ) {
                int n = Math.min(PIECE_BYTES, length - done);
                step.move(piece, done, n);
                done += n;
            }
        } finally {
            give(piece);
        }
    }

    /**
     * Copies {@code length} bytes of {@code range} at {@code offset} into {@code dst} from
     * {@code dstOffset}, each piece on {@code stream} and waited for.
     */
    public static void read(NativeRangeHandle range, NativeStreamHandle stream, long offset, byte[] dst, int dstOffset,
                            int length) {
        readInPieces(range, stream, offset, length, (piece, done, n) -> piece.buffer.get(0, dst, dstOffset + done, n));
    }

    /**
     * Copies {@code length} bytes of {@code range} at {@code offset} into the file mapping
     * {@code dst} from its index {@code dstIndex} (its position is not touched), each piece
     * written by {@link FileMappings#write}: a page that is gone stops the copy with
     * {@link FileMappings.LostPage} (the bytes before it were written).
     */
    public static void readIntoMapping(NativeRangeHandle range, NativeStreamHandle stream, long offset, ByteBuffer dst,
                                       int dstIndex, int length) {
        long base = FileMappings.address(dst);
        readInPieces(range, stream, offset, length,
                (piece, done, n) -> FileMappings.write(dst, base, dstIndex + done, piece.buffer, piece.address, n));
    }

    /** One staging piece at a time: one driver copy from the range into it, then into the Java destination. */
    private static void readInPieces(NativeRangeHandle range, NativeStreamHandle stream, long offset, int length,
                                     PieceStep destination) {
        if (length == 0) return;
        NativeStatus st = NativeCalls.status();
        inPieces(length, (piece, done, n) -> {
            NativeApi.read_address_on(range, offset + done, piece.address, n, stream, st);
            NativeCalls.check(st);
            destination.move(piece, done, n);
        });
    }
}
