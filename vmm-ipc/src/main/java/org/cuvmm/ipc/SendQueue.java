package org.cuvmm.ipc;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A connection's outgoing frames and the thread that sends them, so that nobody but that
 * thread ever blocks on a slow peer: {@link #offer} never blocks (a best-effort DROP from
 * {@code unpublish}), {@link #put} waits for room (replies, from the connection's reader,
 * which is how a client that stops reading is slowed down). Every queued item's fds are
 * closed exactly once, sent or not. When the writer stops (socket failed, or {@link
 * #finish()}), it closes the socket. After {@link #finish()} no frame that carries fds is
 * sent any more: the connection is ending, and with it the leases those fds are for.
 *
 * <p>One FIFO, one sender at a time (the writer token): the connection's reader sends
 * what it queued itself when nobody else is sending ({@link #flush()}, non-blocking), so a
 * reply wakes no second thread; the sender thread sends what others offer and whatever did
 * not fit in the socket at once (docs/PROTOCOL.md section 12, "Threads").
 * Package-private.
 */
final class SendQueue {
    /**
     * A frame to send and the owner of its fds (closed after the send, or if never sent);
     * {@code onSent} (may be null) runs on the thread that sent the frame (the sender thread
     * or a direct write), once all of it has been sent, never if it was not. {@code sendIf}
     * (may be null: always) is asked by the writer that takes the frame, right before it
     * would send it: false skips it (a DROP whose lease's DESCRIPTOR was discarded, as an
     * ending connection discards frames with fds, must not follow: PROTOCOL.md section 5).
     */
    record Item(byte[] frame, int[] fds, AutoCloseable owner, Runnable onSent, java.util.function.BooleanSupplier sendIf) {
        Item(byte[] frame, int[] fds, AutoCloseable owner) {
            this(frame, fds, owner, null, null);
        }

        Item(byte[] frame, int[] fds, AutoCloseable owner, Runnable onSent) {
            this(frame, fds, owner, onSent, null);
        }

        /** False when the frame must not be sent: it has fds and the queue is finishing, or its {@code sendIf} says so. */
        boolean wanted(boolean finishing) {
            if (finishing && fds != null) return false;
            return sendIf == null || sendIf.getAsBoolean();
        }

        void release() {
            if (owner == null) return;
            try {
                owner.close();
            } catch (Exception ignored) {
                // a descriptor's close does not fail
            }
        }
    }

    private static final System.Logger LOG = System.getLogger(SendQueue.class.getName());

    /**
     * Test seam: called on the sender thread for each item taken, before it is sent (or
     * discarded because the queue is finishing), so tests can stall the sender thread
     * deterministically. Not called by a {@link #flush() direct write}. Does nothing by default.
     */
    static volatile java.util.function.BiConsumer<SendQueue, Item> beforeSend = (q, i) -> {};

    /**
     * Run after each frame a writer (the sender thread, or the reader in {@link #flush()}) takes
     * from the queue (room has freed), if set, with no lock held: must not block (the connection
     * offers its parked EVICTs here; an offer made meanwhile is sent by the token's holder). Null: nothing.
     */
    volatile Runnable afterTake;

    /**
     * Run by {@link #tryOffer} for the item it queued, under the queue's lock, so before any
     * writer can take it: must not block nor call back into this queue. The server counts a
     * granted lease and its fds here, so that no DESCRIPTOR is sent before it is counted
     * ({@link SharingServer#totalLeaseCount()}: "their DESCRIPTOR queued"). Null: nothing.
     */
    volatile java.util.function.Consumer<Item> onQueued;

    /**
     * Test seam: false makes {@link #flush()} leave every frame to the sender thread (the
     * thread model before direct writes), for tests of the sender thread's own paths.
     */
    static volatile boolean directWrites = true;

    /** Test seam: called by a direct write right before its non-blocking send. Does nothing by default. */
    static volatile java.util.function.BiConsumer<SendQueue, Item> beforeDirectSend = (q, i) -> {};

    private final FdSocket socket;
    private final int capacity;
    /** Frames not yet taken by a sender, in sending order; guarded by {@link #lock}. */
    private final ArrayDeque<Item> queue;
    private final ReentrantLock lock = new ReentrantLock();
    /** Signalled when the sender thread may have something to do (an item and no token, finishing, dead). */
    private final Condition work = lock.newCondition();
    /** Signalled when an item leaves the queue (a {@link #put} waits on it). */
    private final Condition room = lock.newCondition();
    /**
     * The writer token: true while one thread (the sender thread, or the reader in {@link
     * #flush()}) has taken an item and is sending it; only its holder takes items, so frames
     * leave in queue order and one at a time. Guarded by {@link #lock}.
     */
    private boolean sending;
    private final Thread writer;
    private volatile boolean dead;
    /** Set by {@link #finish()}: frames with fds still queued are discarded, not sent, and nothing new is queued. */
    private volatile boolean finishing;
    /** Frames sent by {@link #flush()} itself, not by the sender thread (tests, stats). */
    private final java.util.concurrent.atomic.AtomicLong directSends = new java.util.concurrent.atomic.AtomicLong();

    SendQueue(FdSocket socket, int capacity, String threadName) {
        this.socket = socket;
        this.capacity = capacity;
        this.queue = new ArrayDeque<>(Math.min(capacity, 64));
        this.writer = new Thread(this::run, threadName);
        writer.setDaemon(true);
    }

    void start() { writer.start(); }

    /**
     * The sender thread: takes the token and the head item whenever items wait and nobody
     * holds the token; sends with a blocking send. Ends when the socket fails, when the queue
     * is dead, or once finishing with nothing left to send and no direct write in progress.
     */
    private void run() {
        try {
            for (;;) {
                Item item;
                lock.lock();
                try {
                    for (;;) {
                        if (dead) return;
                        if (!sending && !queue.isEmpty()) {
                            item = queue.pollFirst();
                            sending = true;
                            room.signal();
                            break;
                        }
                        if (finishing && !sending) return; // nothing left: done
                        work.await();
                    }
                } finally {
                    lock.unlock();
                }
                Runnable freed = afterTake;
                if (freed != null) freed.run();
                try {
                    // Read after the take: a DESCRIPTOR queued before finish() but not yet
                    // sent is dropped here, its fds closed in finally.
                    beforeSend.accept(this, item);
                    if (!item.wanted(finishing)) continue;
                    socket.send(item.frame(), item.fds() == null ? Frame.NO_FDS : item.fds());
                    if (item.onSent() != null) item.onSent().run();
                } catch (IOException | RuntimeException e) {
                    LOG.log(System.Logger.Level.DEBUG, "send on " + socket + " failed: " + e);
                    dead = true;
                    return;
                } finally {
                    item.release();
                    releaseToken();
                }
            }
        } catch (InterruptedException e) {
            // ends the writer, as a failed send does
        } finally {
            die();
        }
    }

    /** Gives the token back; wakes the sender thread if it has work (or is finishing). */
    private void releaseToken() {
        lock.lock();
        try {
            sending = false;
            if (!queue.isEmpty() || finishing || dead) work.signal();
        } finally {
            lock.unlock();
        }
    }

    /** The writer has stopped for good: wake every waiter, release what is queued, close the socket. */
    private void die() {
        dead = true;
        lock.lock();
        try {
            work.signalAll();
            room.signalAll();
        } finally {
            lock.unlock();
        }
        drain();
        socket.close();
    }

    /**
     * Queues {@code item} if there is room now and the writer lives (then runs {@link
     * #onQueued}: the server queues only DESCRIPTORs this way, and counts each there); never blocks, never sends and closes nothing, so it may be called under a monitor. False: not queued, the
     * caller still owns {@code item}. The caller must call {@link #flush()} afterwards,
     * outside any monitor (it sends the item or hands it to the sender thread).
     */
    boolean tryOffer(Item item) {
        lock.lock();
        try {
            if (dead || finishing || queue.size() >= capacity) return false;
            queue.addLast(item);
            java.util.function.Consumer<Item> counted = onQueued;
            if (counted != null) counted.accept(item);
            return true;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Queues {@code item} if there is room now; never blocks (any thread: unpublish's DROP,
     * a release notice's EVICT, the watchdog's ERROR). The sender thread sends it, or the
     * holder of the token if one is sending. False (item released) otherwise.
     */
    boolean offer(Item item) {
        boolean queued = false;
        lock.lock();
        try {
            if (!dead && !finishing && queue.size() < capacity) {
                queue.addLast(item);
                queued = true;
                if (!sending) work.signal();
            }
        } finally {
            lock.unlock();
        }
        if (!queued) {
            item.release();
            return false;
        }
        if (dead) drain();
        return true;
    }

    /**
     * {@link #offer} of {@code item} and {@link #finish()} under one lock: nothing another
     * thread queues can come after {@code item} (the watchdog's TIMEOUT is the last frame of a
     * connection it cuts: PROTOCOL.md section 8). Queued even when the queue is full (one frame
     * past its capacity, as nothing can follow it), so a client that reads gets it. False
     * (item released) when the writer is dead or the queue was finishing already; the queue is
     * finishing either way. Never blocks.
     */
    boolean offerLast(Item item) {
        return finishAfter(item);
    }

    /**
     * Queues {@code item}, waiting for room while the writer lives, then {@link #flush()}es.
     * Only the connection's reader calls this (it may send). False (item released) if the
     * writer died or the queue is finishing.
     */
    boolean put(Item item) {
        boolean queued = false;
        boolean direct = false;
        lock.lock();
        try {
            while (!dead && !finishing && queue.size() >= capacity) {
                room.awaitNanos(TimeUnit.MILLISECONDS.toNanos(50));
            }
            if (!dead && !finishing) {
                queued = true;
                if (queue.isEmpty() && !sending && directWrites) {
                    // Nothing queued and nobody sending: this thread takes the token and the
                    // item at once, as flush() would take it from the queue's head (one lock
                    // round trip instead of three; issue 11).
                    sending = true;
                    direct = true;
                } else {
                    queue.addLast(item);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            lock.unlock();
        }
        if (!queued) {
            item.release();
            return false;
        }
        if (direct) sendHeld(item);
        else flush();
        return true;
    }

    /**
     * Sends what is queued on the calling thread when nobody else is sending (the direct
     * write: the reader answers without waking the sender thread), else leaves it to the
     * token's holder. Only the connection's reader calls this, outside any monitor. Each
     * frame goes with one non-blocking {@code sendmsg}, or {@code send} without fds ({@link FdSocket#sendNow}): this
     * never blocks on a slow peer. When the socket's buffer is full (nothing or only part of
     * a frame went), the rest of that frame goes back to the head of the queue and the
     * sender thread sends it and what follows, blocking as before. Nothing is written once
     * the queue is finishing: a frame with fds is then never sent, as on the sender thread.
     */
    void flush() {
        if (dead) {
            drain();
            return;
        }
        Item first;
        lock.lock();
        try {
            if (queue.isEmpty() || sending) return;
            if (!directWrites || finishing) {
                work.signal();
                return;
            }
            sending = true;
            // The head taken with the token: one lock round trip fewer per flush (issue 11).
            first = queue.pollFirst();
            room.signal();
        } finally {
            lock.unlock();
        }
        sendHeld(first);
    }

    /**
     * The direct write's loop: this thread holds the token and has taken {@code item} (from
     * the queue's head, whose room it signalled, or straight from {@link #put}); runs {@link
     * #afterTake} and sends it, then whatever was queued meanwhile, as {@link #flush()}
     * describes, and gives the token back.
     */
    private void sendHeld(Item item) {
        try {
            for (boolean taken = true;; taken = false) {
                if (!taken) {
                    lock.lock();
                    try {
                        item = finishing ? null : queue.pollFirst();
                        if (item == null) {
                            sending = false;
                            if (!queue.isEmpty() || finishing) work.signal();
                            return;
                        }
                        room.signal();
                    } finally {
                        lock.unlock();
                    }
                }
                Runnable freed = afterTake;
                if (freed != null) freed.run();
                beforeDirectSend.accept(this, item);
                if (!item.wanted(finishing)) { // finish() came meanwhile, say: as the sender thread does
                    item.release();
                    item = null;
                    continue;
                }
                byte[] frame = item.frame();
                int n = socket.sendNow(frame, item.fds());
                if (n == frame.length) {
                    directSends.incrementAndGet();
                    if (item.onSent() != null) item.onSent().run();
                    item.release();
                    item = null;
                    continue;
                }
                // The peer's buffer is full: the sender thread sends the rest, first in line
                // (after a partial send the fds have gone with the first bytes).
                Item rest = n == 0 ? item
                        : new Item(java.util.Arrays.copyOfRange(frame, n, frame.length), null, item.owner(), item.onSent(),
                                null); // its first bytes went: the rest must go whatever sendIf says now
                item = null;
                lock.lock();
                try {
                    queue.addFirst(rest);
                    sending = false;
                    work.signal();
                } finally {
                    lock.unlock();
                }
                return;
            }
        } catch (IOException | RuntimeException | Error e) {
            // An Error too (a review: one thrown by afterTake or onSent kept the token taken, and
            // later puts waited on a queue nobody would send): the queue dies, then it goes on.
            LOG.log(System.Logger.Level.DEBUG, "send on " + socket + " failed: " + e);
            if (item != null) item.release();
            dead = true;
            lock.lock();
            try {
                sending = false;
            } finally {
                lock.unlock();
            }
            die(); // the sender thread wakes and ends too
            if (e instanceof Error) throw (Error) e;
        }
    }

    /**
     * Waits (30 s at most) until the queue has room for {@code n} more items, or the writer
     * died. Woken by each take ({@code room}, signalled by the sender thread and by a direct
     * write) and by the writer's death; no polling (it slept 5 ms at a time before). Only the
     * connection's reader calls it, as {@link #put}, the other waiter on {@code room}.
     */
    void awaitRoom(int n) {
        long until = 0; // the clock is read only when it has to wait: none per ATTACH (issue 11)
        boolean waited = false;
        lock.lock();
        try {
            // Not once finishing either (as put): nothing more will be queued, so there is no
            // room to wait for (the caller's offer is refused at once).
            while (!dead && !finishing && capacity - queue.size() < n) {
                if (!waited) {
                    until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    waited = true;
                }
                long left = until - System.nanoTime();
                if (left <= 0) return;
                room.awaitNanos(left);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            lock.unlock();
        }
    }

    /** Room left in the queue now (tests; {@link #awaitRoom}). */
    int remainingCapacity() {
        lock.lock();
        try {
            return capacity - queue.size();
        } finally {
            lock.unlock();
        }
    }

    /**
     * The sender thread sends what is queued except frames that carry fds (those it discards,
     * closing their fds), then closes the socket; nothing is queued or written directly any
     * more. A direct write in progress ends after its current frame. A full queue is sent like
     * any other: the caller bounds the time a client that does not read may take (the
     * connection's end, the server's close and the watchdog's cut each close or shut the
     * socket down after a grace). Shutting it down here at once when the queue was full lost
     * what was queued (the DROPs of an unpublish right before the server's close, to a client
     * that reads: PROTOCOL.md section 6). Never blocks.
     */
    void finish() {
        finishAfter(null);
    }

    /**
     * {@link #finish()}, queueing {@code last} first (when not null, whatever the room) under
     * the same lock. True when {@code last} was queued; a {@code last} not queued is released.
     */
    private boolean finishAfter(Item last) {
        boolean queued = false;
        lock.lock();
        try {
            if (last != null && !dead && !finishing) {
                queue.addLast(last);
                queued = true;
            }
            finishing = true;
            work.signal();
            room.signalAll(); // a reader in awaitRoom or put stops waiting: nothing more is queued
        } finally {
            lock.unlock();
        }
        if (last != null && !queued) last.release();
        if (queued && dead) drain();
        return queued;
    }

    /** True when an {@link #offer} made now would be queued (room, writer alive, not finishing). */
    boolean hasRoom() {
        lock.lock();
        try {
            return !dead && !finishing && queue.size() < capacity;
        } finally {
            lock.unlock();
        }
    }

    /** Frames queued and not yet taken by a sender (tests). */
    int size() {
        lock.lock();
        try {
            return queue.size();
        } finally {
            lock.unlock();
        }
    }

    /** True once {@link #finish()} was called (tests). */
    boolean isFinishing() { return finishing; }

    /** True once the writer has stopped: nothing queued will be sent any more. */
    boolean isDead() { return dead; }

    /** True until the writer thread has ended (after its drain closed every unsent item's fds). */
    boolean isAlive() { return writer.isAlive(); }

    void join(long millis) throws InterruptedException { writer.join(millis); }

    /** The sender thread's state (tests: WAITING once it is parked with nothing to send). */
    Thread.State writerState() { return writer.getState(); }

    void joinUntil(long deadline) throws InterruptedException { SharingServer.joinUntil(writer, deadline); }

    /** Frames {@link #flush()} sent itself (tests). */
    long directSends() { return directSends.get(); }

    private void drain() {
        java.util.List<Item> left = new java.util.ArrayList<>();
        lock.lock();
        try {
            Item item;
            while ((item = queue.pollFirst()) != null) left.add(item);
        } finally {
            lock.unlock();
        }
        for (Item item : left) item.release(); // outside the lock: a release closes fds
    }
}
