package org.cuvmm.ipc;

import java.io.IOException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A connection's outgoing frames and the thread that sends them, so that nobody but that
 * thread ever blocks on a slow peer: {@link #offer} never blocks (a best-effort DROP from
 * {@code unpublish}), {@link #put} waits for room (replies, from the connection's reader,
 * which is how a client that stops reading is slowed down). Every queued item's fds are
 * closed exactly once, sent or not. When the writer stops (socket failed, or {@link
 * #finish()}), it closes the socket. After {@link #finish()} no frame that carries fds is
 * sent any more: the connection is ending, and with it the leases those fds are for.
 * Package-private.
 */
final class SendQueue {
    /**
     * A frame to send and the owner of its fds (closed after the send, or if never sent);
     * {@code onSent} (may be null) runs on the writer once the frame has been sent, never if
     * it was not.
     */
    record Item(byte[] frame, int[] fds, AutoCloseable owner, Runnable onSent) {
        Item(byte[] frame, int[] fds, AutoCloseable owner) {
            this(frame, fds, owner, null);
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

    private static final Item FINISH = new Item(new byte[0], null, null);
    private static final System.Logger LOG = System.getLogger(SendQueue.class.getName());

    /**
     * Test seam: called on the writer for each item taken, before it is sent (or discarded
     * because the queue is finishing), so tests can stall the writer deterministically.
     * Does nothing by default.
     */
    static volatile java.util.function.BiConsumer<SendQueue, Item> beforeSend = (q, i) -> {};

    /**
     * Run on the writer after each frame it takes from the queue (room has freed), if set:
     * must not block (the connection offers its parked EVICTs here). Null: nothing.
     */
    volatile Runnable afterTake;

    private final FdSocket socket;
    private final BlockingQueue<Item> queue;
    private final Thread writer;
    private volatile boolean dead;
    /** Set by {@link #finish()}: frames with fds still queued are discarded, not sent. */
    private volatile boolean finishing;

    SendQueue(FdSocket socket, int capacity, String threadName) {
        this.socket = socket;
        this.queue = new ArrayBlockingQueue<>(capacity);
        this.writer = new Thread(this::run, threadName);
        writer.setDaemon(true);
    }

    void start() { writer.start(); }

    private void run() {
        try {
            for (;;) {
                Item item;
                try {
                    item = queue.take();
                } catch (InterruptedException e) {
                    break;
                }
                if (item == FINISH) break;
                Runnable room = afterTake;
                if (room != null) room.run();
                try {
                    // Read after the take: a DESCRIPTOR queued before finish() but not yet
                    // sent is dropped here, its fds closed in finally.
                    beforeSend.accept(this, item);
                    if (finishing && item.fds() != null) continue;
                    socket.send(item.frame(), item.fds());
                    if (item.onSent() != null) item.onSent().run();
                } catch (IOException | RuntimeException e) {
                    LOG.log(System.Logger.Level.DEBUG, "send on " + socket + " failed: " + e);
                    break;
                } finally {
                    item.release();
                }
            }
        } finally {
            dead = true;
            drain();
            socket.close();
        }
    }

    /**
     * Queues {@code item} if there is room now and the writer lives; never blocks and closes
     * nothing, so it may be called under a monitor. False: not queued, the caller still owns
     * {@code item}. Call {@link #drainIfDead()} afterwards, outside any monitor.
     */
    boolean tryOffer(Item item) {
        return !dead && queue.offer(item);
    }

    /** Releases what is queued if the writer has died (it may have died just after a {@link #tryOffer}). */
    void drainIfDead() {
        if (dead) drain();
    }

    /** Queues {@code item} if there is room now; never blocks. False (item released) otherwise. */
    boolean offer(Item item) {
        if (dead || !queue.offer(item)) {
            item.release();
            return false;
        }
        if (dead) drain();
        return true;
    }

    /** Queues {@code item}, waiting for room while the writer lives. False (item released) if it died. */
    boolean put(Item item) {
        try {
            while (!dead) {
                if (queue.offer(item, 50, TimeUnit.MILLISECONDS)) {
                    if (dead) drain();
                    return true;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        item.release();
        return false;
    }

    /** Waits (bounded) until the queue has room for {@code n} more items, or the writer died. */
    void awaitRoom(int n) {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!dead && queue.remainingCapacity() < n && System.nanoTime() < until) {
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /**
     * The writer sends what is queued except frames that carry fds (those it discards,
     * closing their fds), then closes the socket. Never blocks.
     */
    void finish() {
        finishing = true;
        if (!queue.offer(FINISH)) socket.shutdown();
    }

    /** True once {@link #finish()} was called (tests). */
    boolean isFinishing() { return finishing; }

    /** True once the writer has stopped: nothing queued will be sent any more. */
    boolean isDead() { return dead; }

    /** True until the writer thread has ended (after its drain closed every unsent item's fds). */
    boolean isAlive() { return writer.isAlive(); }

    void join(long millis) throws InterruptedException { writer.join(millis); }

    void joinUntil(long deadline) throws InterruptedException { SharingServer.joinUntil(writer, deadline); }

    private void drain() {
        Item item;
        while ((item = queue.poll()) != null) item.release();
    }
}
