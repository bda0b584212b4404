package org.cuvmm;

import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * cuvmm's own non-blocking streams, on which the synchronous buffer operations run: a small
 * stack per device, borrowed for one operation and given back. A synchronous copy used to
 * synchronize the legacy stream, which serializes it with every thread's legacy-stream work and
 * breaks CUDA-graph capture in the whole process; on its own non-blocking stream it waits for
 * exactly what it must (the buffer's recorded uses, through {@code cuStreamWaitEvent}) and for
 * its own work.
 *
 * <p>A borrow takes a stream from the device's stack or creates one (a driver call, only while
 * more operations run at once than ever before); a give-back keeps at most {@link #KEPT}
 * streams per device and destroys the rest. A stream whose operation failed is destroyed, not
 * kept (its state is unknown). Lock-free; no lock across a driver call.
 */
final class InternalStreams {
    /** Streams kept per device: enough for the threads of a typical machine copying at once. */
    static final int KEPT = 8;
    private static final AtomicReferenceArray<Stack> STACKS = new AtomicReferenceArray<>(64);

    private InternalStreams() {}

    private static final class Stack {
        final ConcurrentLinkedDeque<Stream> streams = new ConcurrentLinkedDeque<>();
        final AtomicInteger size = new AtomicInteger();
    }

    private static Stack stack(int device) {
        Stack s = STACKS.get(device);
        if (s == null) {
            STACKS.compareAndSet(device, null, new Stack());
            s = STACKS.get(device);
        }
        return s;
    }

    /** A non-blocking stream of {@code device} for one operation; give it back with {@link #giveBack}. */
    static Stream borrow(int device) {
        Stack s = stack(device);
        Stream stream = s.streams.pollFirst();
        if (stream != null) {
            s.size.decrementAndGet();
            return stream;
        }
        return Stream.builder(device).nonBlocking(true).build();
    }

    /**
     * Returns {@code stream} after its operation: kept when it succeeded and the stack has room,
     * destroyed otherwise (its queued work still completes). Never throws.
     */
    static void giveBack(Stream stream, boolean succeeded) {
        Stack s = stack(stream.device());
        if (succeeded && s.size.incrementAndGet() <= KEPT) {
            s.streams.addFirst(stream);
            return;
        }
        if (succeeded) s.size.decrementAndGet();
        try {
            stream.close();
        } catch (RuntimeException e) {
            System.getLogger("org.cuvmm").log(System.Logger.Level.WARNING, "closing cuvmm's internal " + stream
                    + " failed: " + e, e);
        }
    }
}
