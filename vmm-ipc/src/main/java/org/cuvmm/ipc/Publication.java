package org.cuvmm.ipc;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.function.BiConsumer;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.BufferLease;
import org.cuvmm.VirtualMemoryBuffer;

/**
 * A buffer published under a name, and its leases. Its monitor guards only the lease set and
 * the withdrawn flag: no driver call (export) and no teardown (the end of a {@link
 * BufferLease}, which may run the buffer's deferred close) is ever made while it is held, so
 * {@code unpublish} never waits behind one. Package-private.
 */
final class Publication {
    /**
     * One consumer's hold on a publication: (connection, DESCRIPTOR). {@code bufferLease}
     * makes the owner's {@code close()} of the buffer refuse, naming the consumer, until
     * the lease ends. {@link #run()} is the DESCRIPTOR's {@code onSent}: the connection's
     * writer marks the lease sent once the DESCRIPTOR (with its fds) has left; a RELEASE of
     * the lease waits for it ({@link #awaitSent}), so the lease never ends while fds for it
     * can still be sent. (A flag and this object's monitor, not a CountDownLatch and a
     * method reference: three objects fewer per attach, issue 11.)
     */
    static final class Lease implements Runnable {
        private final long id;
        private final Publication publication;
        private final ServerConnection connection;
        private final BufferLease bufferLease;
        /** Set once the DESCRIPTOR has left; read without the monitor in the usual case (issue 11). */
        private volatile boolean sent;
        /** Threads in {@link #awaitSent} (counted under this object's monitor): {@link #run()} notifies only when one waits. */
        private volatile int waiters;
        /**
         * Set by the connection's reader when the client's RELEASE ends this lease, before
         * the RELEASED is queued: a DROP for it not sent by then is skipped, so no DROP ever
         * follows the RELEASED of its lease (PROTOCOL.md section 5). An end of the connection
         * does not set it: the DROPs of an ending connection still go first (section 6).
         */
        private volatile boolean releasedByClient;

        Lease(long id, Publication publication, ServerConnection connection, BufferLease bufferLease) {
            this.id = id;
            this.publication = publication;
            this.connection = connection;
            this.bufferLease = bufferLease;
        }

        long id() { return id; }

        Publication publication() { return publication; }

        ServerConnection connection() { return connection; }

        BufferLease bufferLease() { return bufferLease; }

        /** True once the DESCRIPTOR has left (all its bytes, its fds with them). */
        boolean isSent() { return sent; }

        /** The client's RELEASE ends this lease (the reader, before it queues the RELEASED). */
        void markReleasedByClient() { releasedByClient = true; }

        /** Whether this lease's DROP may go now: its DESCRIPTOR left and the client has not released it. */
        boolean dropWanted() { return sent && !releasedByClient; }

        /** The DESCRIPTOR has left (the writer's onSent): wakes a RELEASE waiting for it. */
        @Override
        public void run() {
            sent = true;
            // Both fields volatile: a waiter counted after this read sees `sent` before it waits.
            if (waiters == 0) return; // the usual case: no monitor and no notify per DESCRIPTOR (issue 11)
            synchronized (this) {
                notifyAll();
            }
        }

        /** Waits at most {@code millis} for {@link #run()}; true when the DESCRIPTOR has left. */
        boolean awaitSent(long millis) throws InterruptedException {
            if (sent) return true; // the usual case (a RELEASE after its DESCRIPTOR went): no monitor, no clock read
            synchronized (this) {
                waiters++;
                try {
                    long until = System.nanoTime() + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(millis);
                    while (!sent) {
                        long left = until - System.nanoTime();
                        if (left <= 0) return false;
                        wait(Math.max(1, java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(left)));
                    }
                    return true;
                } finally {
                    waiters--;
                }
            }
        }

        /** Identity: each lease is its own. */
        @Override
        public boolean equals(Object o) { return this == o; }

        @Override
        public int hashCode() { return Long.hashCode(id); }

        @Override
        public String toString() { return "Lease[" + id + " of '" + publication.name + "', " + connection + "]"; }
    }

    /**
     * Test seam: called on the calling thread just before each driver call ("export") and
     * each teardown ("end lease") made for a publication, so tests can check that no monitor
     * is held there. Does nothing by default.
     */
    static volatile BiConsumer<String, Publication> beforeDriverCall = (what, p) -> {};

    final String name;
    final VirtualMemoryBuffer buffer;
    private final Set<Lease> leases = new LinkedHashSet<>();
    private boolean withdrawn;

    /**
     * The published buffer's exported chunks as version 2 names them, read from the buffer at
     * the first version-2 ATTACH (under that ATTACH's lease, so the buffer is open) and kept:
     * a buffer's range never changes (a grown buffer is another buffer, published anew), so
     * later ATTACHes make no native call for them (issue 11: three to five per round before).
     */
    private volatile ChunkLayout layout;

    /** Sizes and allocation ids of a buffer's exported chunks, in address order. Never written after construction. */
    record ChunkLayout(long[] sizes, long[] allocationIds) {}

    Publication(String name, VirtualMemoryBuffer buffer) {
        this.name = name;
        this.buffer = buffer;
    }

    /**
     * The exported chunks' sizes and allocation ids (callers must not write the arrays). The
     * caller holds a lease on the buffer (it is open). Computed once; two threads racing the
     * first call compute the same values.
     */
    ChunkLayout layout() {
        ChunkLayout l = layout;
        if (l != null) return l;
        // The chunks that hold the buffer's bytes, as version 1 exports them (an alias
        // smaller than its mapping keeps more chunks mapped; those are not sent).
        int n = buffer.exportedChunkCount();
        long[] sizes = new long[n];
        for (int i = 0; i < n; i++) sizes[i] = buffer.chunkSize(i);
        long[] allocations = CoreSupport.allocationIds(buffer);
        if (allocations.length != n) allocations = java.util.Arrays.copyOf(allocations, n);
        l = new ChunkLayout(sizes, allocations);
        layout = l;
        return l;
    }

    synchronized boolean isWithdrawn() { return withdrawn; }

    synchronized int leaseCount() { return leases.size(); }

    /** Exports a fresh descriptor of the buffer (a driver call: never under this monitor). */
    BufferDescriptor export() {
        beforeDriverCall.accept("export", this);
        return buffer.exportDescriptor();
    }

    /** Exports only the chunks named (protocol version 2; a driver call per chunk: never under this monitor). */
    BufferDescriptor exportChunks(int[] chunks) {
        beforeDriverCall.accept("export", this);
        return CoreSupport.exportChunks(buffer, chunks);
    }

    /** Called with this monitor held; false (nothing added) when the publication was withdrawn. */
    boolean addLeaseUnlessWithdrawn(Lease l) {
        assert Thread.holdsLock(this);
        if (withdrawn) return false;
        leases.add(l);
        return true;
    }

    /** Called with this monitor held: forgets {@code l} without ending its hold (the caller ends it after unlocking). */
    void forgetLease(Lease l) {
        assert Thread.holdsLock(this);
        leases.remove(l);
    }

    /**
     * Ends {@code l}'s hold on the buffer (outside this monitor: it may close the buffer,
     * {@code closeWhenUnused}), then removes it; returns the leases left. In that order so that
     * once {@link #leaseCount()} (and the server's counts) no longer count the lease, the
     * buffer holds no use of it: the producer's {@code close()} on a count of 0 is not refused.
     */
    int removeLease(Lease l) {
        int left;
        try {
            endHold(l.bufferLease());
        } finally { // a hold that failed to end (it is released exactly once anyway) is not counted either
            synchronized (this) {
                leases.remove(l);
                left = leases.size();
            }
        }
        return left;
    }

    /** Ends a {@link BufferLease} (may tear the buffer down: never under this monitor). */
    void endHold(BufferLease held) {
        beforeDriverCall.accept("end lease", this);
        held.close();
    }

    /** Marks withdrawn; returns the leases held at that moment. */
    synchronized List<Lease> withdraw() {
        withdrawn = true;
        return new ArrayList<>(leases);
    }
}
