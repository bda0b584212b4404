package org.cuvmm;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The streams with work queued on one buffer (or one pinned host buffer): one event per
 * (buffer, stream), re-recorded after each use, so that only the first use on a stream creates
 * an event (one driver call), and every later use costs one {@code cuEventRecord}. An operation
 * on two owners (a copy between a buffer and pinned memory) records one event for both
 * ({@link #eventsToRecord}: the tables share it, reference-counted).
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
    /**
     * An event from {@link EventCache} that one or more tables use for the same stream (an
     * operation touching two owners records it once for both, see {@link #eventsToRecord}),
     * counted: each table holding it owns one reference, and the last to let go gives it back
     * (or destroys it, when pruned). A record by any holder only moves it later on the same
     * stream, so a wait on it never ends before the work of any holder it covered.
     */
    private static final class Shared {
        final Event event;
        final java.util.concurrent.atomic.AtomicInteger refs = new java.util.concurrent.atomic.AtomicInteger(1);

        Shared(Event event) { this.event = event; }

        /** Drops one reference; the last gives the event back (pruned: destroys it if idle). */
        void unref(boolean pruned) {
            if (refs.decrementAndGet() != 0) return;
            if (pruned) event.closeIfIdle();
            else EventCache.give(event);
        }
    }

    private static final class Use {
        final Stream stream;
        final Event event;
        // Null for an event this table does not own (a pool slot's free event, see seed()):
        // never recorded, never given back; the first record on its stream replaces it.
        final Shared shared;
        final boolean borrowed;

        Use(Stream stream, Shared shared) {
            this.stream = stream;
            this.event = shared.event;
            this.shared = shared;
            this.borrowed = false;
        }

        Use(Stream stream, Event borrowedEvent) {
            this.stream = stream;
            this.event = borrowedEvent;
            this.shared = null;
            this.borrowed = true;
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
        ownUse(stream, null).event.record(stream);
    }

    /**
     * This table's own (not borrowed) use of {@code stream}, installed if missing: with a
     * reference to {@code adopt} when not null (another table's event for the same stream),
     * else with an event from {@link EventCache}. The caller holds a use of the owner and of
     * {@code stream}; {@code adopt}'s table is held too, so its reference cannot drop meanwhile.
     */
    private Use ownUse(Stream stream, Shared adopt) {
        Object key = stream.useKey();
        Use use = uses.get(key);
        while (use == null || use.borrowed) {
            if (use == null) pruneClosedStreams();
            Shared sh;
            if (adopt != null) {
                adopt.refs.incrementAndGet();
                sh = adopt;
            } else {
                sh = new Shared(EventCache.take(stream.device())); // reused: no cuEventCreate once the cache is warm
            }
            Use mine = new Use(stream, sh);
            // A borrowed event is replaced: the new record on the same stream follows its record.
            boolean won = use == null ? uses.putIfAbsent(key, mine) == null : uses.replace(key, use, mine);
            if (won) {
                use = mine;
            } else {
                sh.unref(false);
                use = uses.get(key);
            }
        }
        return use;
    }

    /**
     * The events that record, on {@code stream}, a use of both tables with as few
     * {@code cuEventRecord} as possible, installing the uses first (an event from
     * {@link EventCache}, which may create one, before anything is queued): a table with no use
     * of {@code stream} yet adopts the other's event (one reference more), and two tables already
     * sharing one need it once. Two tables holding different events for the stream need both
     * (replacing one could hand an event back to the cache while another thread still waits on
     * it). Returns one event, or two. {@code b} may be null or {@code a}. The caller holds uses
     * of both owners and of {@code stream}, records the events right after queueing its op on
     * {@code stream} (AsyncCopies: in the same native call), and holds a use of each event
     * ({@link Event#acquireUse()}) while it does.
     */
    static Event[] eventsToRecord(Stream stream, StreamUses a, StreamUses b) {
        if (b == null || b == a) return new Event[] {a.ownUse(stream, null).event};
        Object key = stream.useKey();
        Use ua = a.uses.get(key);
        Use ub = b.uses.get(key);
        if (ua == null || ua.borrowed) {
            ua = a.ownUse(stream, ub == null || ub.borrowed ? null : ub.shared);
        }
        if (ub == null || ub.borrowed) ub = b.ownUse(stream, ua.shared);
        return ub.shared == ua.shared ? new Event[] {ua.event} : new Event[] {ua.event, ub.event};
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
        uses.putIfAbsent(stream.useKey(), new Use(stream, event));
    }

    /**
     * Forgets the uses of closed streams whose work has completed (one {@code cuEventQuery}
     * each), so that a buffer used with a new stream per task keeps a bounded record. The
     * per-thread stream of a thread that has ended counts as closed: a buffer used through
     * {@link Stream#perThread} from short-lived threads (a thread per task) kept one use, and
     * one event, per thread it ever saw, until its own close. Runs when
     * a stream is used on this buffer for the first time; the caller holds a use of the owner.
     * No use is recorded on a closed stream (recording needs the stream open), nor under the
     * key of an ended thread (only that thread records under it), so only
     * {@link #makeWait} can meet a pruned event at the same time: it skips a closed one (it was
     * complete). An event another thread is using right now is not destroyed here but left to
     * JavaCPP's deallocator, which destroys the native box when the handle is collected.
     */
    private void pruneClosedStreams() {
        for (var entry : uses.entrySet()) {
            Use u = entry.getValue();
            if (!u.stream.useKeyRetired(entry.getKey()) || !u.event.isDoneQuietly()) continue;
            if (uses.remove(entry.getKey(), u) && !u.borrowed) u.shared.unref(true);
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
     * Drops this table's reference to each event; the last holder gives it back to
     * {@link EventCache} (the owner is closed, and its work waited for or ordered before a later
     * record by {@code cuStreamWaitEvent}; another table sharing the event keeps it). Never throws.
     */
    void destroy() {
        for (Use u : uses.values()) {
            if (!u.borrowed) u.shared.unref(false);
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
