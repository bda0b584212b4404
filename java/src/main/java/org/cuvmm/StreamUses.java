package org.cuvmm;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The streams with work queued on one buffer (or one pinned host buffer): one event per
 * (buffer, stream), re-recorded after each use, so that only the first use on a stream creates
 * an event (one driver call), and every later use costs one {@code cuEventRecord}.
 *
 * <p>Callers hold a use of the owner (its AcquireState) around {@link #record} and
 * {@link #makeWait}, and the owner is closed (no use possible) before {@link #awaitAll} and
 * {@link #destroy}: so no event is destroyed while another thread records or waits on it. The
 * map is concurrent and no lock is held across a driver call: two threads recording the first
 * use of one stream at once each create an event, and the loser of {@code putIfAbsent} destroys
 * its own.
 *
 * <p>Why a record after a use covers it: the event is recorded on the same stream after the
 * use was queued, and while the caller still holds its use, so a close (which needs the owner
 * idle) sees a record that follows every use queued so far. Uses on the per-thread stream are
 * kept per thread ({@link Stream#useKey()}): it is a different stream on each thread.
 */
final class StreamUses {
    private static final class Use {
        final Stream stream;
        final Event event;
        // True for an event this table does not own (a pool slot's free event, see seed()):
        // never recorded, never given back; the first record on its stream replaces it.
        final boolean borrowed;

        Use(Stream stream, Event event, boolean borrowed) {
            this.stream = stream;
            this.event = event;
            this.borrowed = borrowed;
        }
    }

    private final ConcurrentHashMap<Object, Use> uses = new ConcurrentHashMap<>(4);

    /**
     * Records that work queued on {@code stream} so far uses the owner. The caller holds a use
     * of the owner and of {@code stream}.
     *
     * @throws CudaException when the driver cannot create or record the event
     */
    void record(Stream stream) {
        Object key = stream.useKey();
        Use use = uses.get(key);
        while (use == null || use.borrowed) {
            if (use == null) pruneClosedStreams();
            Event e = EventCache.take(stream.device()); // reused: no cuEventCreate once the cache is warm
            Use mine = new Use(stream, e, false);
            // A borrowed event is replaced: the new record on the same stream follows its record.
            boolean won = use == null ? uses.putIfAbsent(key, mine) == null : uses.replace(key, use, mine);
            if (won) {
                use = mine;
            } else {
                EventCache.give(e);
                use = uses.get(key);
            }
        }
        use.event.record(stream);
    }

    /**
     * Records that work queued on {@code stream} before now may still use the owner, as covered
     * by {@code event}'s last record (on {@code stream}), without a driver call: a pool hands
     * out memory whose previous owner's stream-ordered free is pending on {@code stream}, and
     * the synchronous operations (on cuvmm's own stream) and {@code close()} must wait for that
     * work too. The event stays the caller's: this table never records it nor gives it back
     * (the first {@link #record} on {@code stream} replaces it), and the caller keeps it open
     * until the owner's release. No effect when {@code stream} already has a use.
     */
    void seed(Stream stream, Event event) {
        uses.putIfAbsent(stream.useKey(), new Use(stream, event, true));
    }

    /**
     * Forgets the uses of closed streams whose work has completed (one {@code cuEventQuery}
     * each), so that a buffer used with a new stream per task keeps a bounded record. Runs when
     * a stream is used on this buffer for the first time; the caller holds a use of the owner.
     * No use is recorded on a closed stream (recording needs the stream open), so only
     * {@link #makeWait} can meet a pruned event at the same time: it skips a closed one (it was
     * complete). An event another thread is using right now is not destroyed here but left to
     * JavaCPP's deallocator, which destroys the native box when the handle is collected.
     */
    private void pruneClosedStreams() {
        for (var entry : uses.entrySet()) {
            Use u = entry.getValue();
            if (!u.stream.isClosed() || !u.event.isDoneQuietly()) continue;
            if (uses.remove(entry.getKey(), u) && !u.borrowed) u.event.closeIfIdle();
        }
    }

    /**
     * Makes {@code stream} wait for every recorded use on other streams ({@code cuStreamWaitEvent},
     * one call per other stream; none for its own, which is ordered already). The caller holds a
     * use of the owner and of {@code stream}.
     */
    void makeWait(Stream stream) { makeWait(stream, false); }

    /**
     * {@link #makeWait(Stream)}; {@code skipBorrowed}: not for borrowed events (see {@link #seed}),
     * for a pooled buffer's close(stream), where the pool orders the stream after its own event.
     */
    void makeWait(Stream stream, boolean skipBorrowed) {
        if (uses.isEmpty()) return;
        Object own = stream.useKey();
        for (var entry : uses.entrySet()) {
            Use u = entry.getValue();
            if (entry.getKey() != own && !(skipBorrowed && u.borrowed)) u.event.makeWaitUnlessClosed(stream);
        }
    }

    boolean isEmpty() { return uses.isEmpty(); }

    /** Streams recorded so far (for messages and tests). */
    int size() { return uses.size(); }

    /** The events, for a later wait by the reaper. The owner is closed. */
    List<Event> events() {
        List<Event> list = new ArrayList<>(uses.size());
        for (Use u : uses.values()) list.add(u.event);
        return list;
    }

    /**
     * Waits for every recorded use ({@code cuEventSynchronize} each). Never throws: a failure
     * (a faulted context) is logged and the release goes on. The owner is closed.
     */
    void awaitAll(String what) {
        for (Use u : uses.values()) u.event.synchronizeQuietly(what);
    }

    /**
     * Gives the events back to {@link EventCache} (the owner is closed, and its work waited
     * for or ordered before a later record by {@code cuStreamWaitEvent}). Never throws.
     */
    void destroy() {
        for (Use u : uses.values()) {
            if (!u.borrowed) EventCache.give(u.event);
        }
        uses.clear();
    }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder("uses on ");
        int n = 0;
        for (Use u : uses.values()) sb.append(n++ == 0 ? "" : ", ").append(u.stream);
        return n == 0 ? "no stream uses" : sb.toString();
    }
}
