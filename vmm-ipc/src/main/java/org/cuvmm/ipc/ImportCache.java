package org.cuvmm.ipc;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;

/**
 * A {@link SharingClient}'s import cache (protocol version 2, docs/PROTOCOL.md section 13 and
 * docs/VMM_DESIGN.md "Import cache"): the allocations the server sent on this connection,
 * by id, and the buffers imported from them, kept mapped between attaches.
 *
 * <ul>
 * <li><b>Ids.</b> For each id the client holds it keeps the one fd it received (so a
 *     DESCRIPTOR naming held ids in a new shape, such as a grown buffer, is imported from the
 *     kept fds with no fd over the socket) and counts what uses it: entries and attachments
 *     that map it, and DESCRIPTORs read but not yet turned into an attachment ("pins").</li>
 * <li><b>Entries</b>, keyed by (resource, ordered id list, buffer size): an imported buffer
 *     kept mapped. The same key again is a <em>hit</em>: the attachment gets a shared view of
 *     the entry's buffer ({@code VirtualMemoryBuffer.share}), no driver call and no fd. Entries
 *     with a live view (a lease) are never evicted by the bounds (an EVICT or the connection's
 *     end takes them out, and they are unmapped once their last view goes).</li>
 * <li><b>Bounded, LRU</b>: while more than {@code maxEntries} entries or {@code maxBytes}
 *     mapped bytes are kept (as {@link Stats} counts them), the least recently used idle
 *     entry is evicted: it stops counting at once and is closed (unmapped) afterwards, on the
 *     event thread ({@link Stats} says when each kind goes). Entries in use are not evicted,
 *     so they can hold the counts over a bound until their last view goes. A cap of 0
 *     disables caching: every attachment imports and unmaps as in version 1.</li>
 * <li><b>FORGET.</b> An id nothing uses any more (no entry, no attachment, no pin) is
 *     forgotten: FORGET is sent (from the client's event thread) and its kept fd is closed
 *     when FORGOTTEN arrives, not before: a DESCRIPTOR answering an earlier ATTACH may still
 *     name it without its fd (the race rule). Such a late DESCRIPTOR is imported from the
 *     kept fd but not cached.</li>
 * <li><b>EVICT.</b> The producer released the allocation: no later DESCRIPTOR names the id.
 *     Idle entries that map it are closed at once (on the event thread), leased ones when
 *     their last view goes; the kept fd is closed once no DESCRIPTOR being imported needs
 *     it; when nothing maps it any more FORGET acknowledges the EVICT.</li>
 * </ul>
 *
 * <p>One monitor guards the tables; it is never held across a driver call (import, unmap),
 * an fd close or a send. Thread-safe.
 */
public final class ImportCache {
    /** Default of {@code SharingClient.Builder.cacheMaxEntries}. */
    public static final int DEFAULT_MAX_ENTRIES = 64;
    /** Default of {@code SharingClient.Builder.cacheMaxBytes}: 1 GiB. */
    public static final long DEFAULT_MAX_BYTES = 1L << 30;

    /**
     * A snapshot of the cache.
     *
     * <p>{@code entries} and {@code bytes} count what the cache keeps for reuse, not what is
     * mapped: an entry leaves both counts the moment it is evicted (the LRU bound, an EVICT,
     * or the idle entries given back after {@code TOO_MANY_IDS} or at this process's fd limit)
     * or the connection ends, and its buffer is unmapped afterwards:
     * <ul>
     * <li>an idle entry evicted by the LRU bound or an EVICT: by a close queued on the client's
     *     event thread, or by the thread that ends the connection if that comes first (once the
     *     connection has ended there is no event thread: the evicting thread closes it);</li>
     * <li>an idle entry given back after {@code TOO_MANY_IDS} or at the fd limit: by the
     *     attaching thread, before it asks again;</li>
     * <li>an idle entry at the connection's end: by the thread that ends the connection (the
     *     client's close, or whoever reads the end of the stream), there and then;</li>
     * <li>an entry an attachment still uses when it is evicted (by an EVICT or the connection's
     *     end; the LRU bound never takes one): not until its last view (the attachment's buffer
     *     and everything derived from it) is closed, or released by the cleaner if leaked;
     *     then by a close queued on the event thread, or, once the connection has ended, by
     *     the thread that dropped that last view (the closing thread, the cleaner thread, or
     *     cuvmm's stream-release thread after a {@code close(Stream)}: see
     *     {@code VirtualMemoryBuffer.share}).</li>
     * </ul>
     * Imports never kept are never counted: caching off, a DESCRIPTOR naming ids being
     * forgotten or evicted, a key another attach cached meanwhile, or a connection that ended
     * during the import. So {@code entries() == 0} does not mean that nothing is mapped.
     *
     * <p>Only version-2 DESCRIPTORs pass through the cache. On a version-1 connection every
     * count stays 0, though each attach imports from the fds it received: those imports and
     * fds are neither hits, misses nor {@code fdsReceived}.
     *
     * @param hits attaches served by a kept mapping (a shared view: no driver call, no fd)
     * @param misses attaches that imported (from fds just received, kept fds, or both)
     * @param entries imported buffers kept now for later attaches of the same key, including
     *     those an attachment is using (entries with a live view); evicted ones not counted
     *     even while still mapped (above)
     * @param bytes the mapped bytes of the entries counted in {@code entries} (each its
     *     import's mapped size, whole chunks)
     * @param idsHeld ids the client holds (the server sends no fd for them)
     * @param fdsKept fds kept open: one per held id whose fd is kept, and those of ids already
     *     let go whose close has not finished (counted until the fd is really closed)
     * @param evictions entries evicted by the LRU bound, an EVICT, or the giving back of idle
     *     entries after {@code TOO_MANY_IDS} or at the fd limit: counted when evicted, before
     *     their buffers are unmapped (not the entries the connection's end lets go)
     * @param forgets ids sent in FORGET frames
     * @param fdsReceived fds received in DESCRIPTORs
     */
    public record Stats(long hits, long misses, int entries, long bytes, int idsHeld, int fdsKept, long evictions,
                        long forgets, long fdsReceived) {}

    /** What the cache needs from its client: sends and closes that must not block the caller. */
    interface Hooks {
        /** Sends FORGET for {@code ids} without blocking; {@link #forgotten} must follow (FORGOTTEN or the end). */
        void forgetLater(long[] ids);

        /** Runs {@code r} (a buffer close: driver calls) on the event thread, or here if there is none. */
        void runLater(Runnable r);
    }

    private enum State { HELD, FORGETTING, EVICTED }

    private static final class Id {
        final long id;
        final long size;
        int fd;
        int refs;
        int pins;
        State state = State.HELD;
        /** FORGOTTEN arrived (or the connection ended): the fd closes once no pin needs it. */
        boolean gone;

        Id(long id, long size, int fd) {
            this.id = id;
            this.size = size;
            this.fd = fd;
        }
    }

    /** The ids as a primitive array (its own copy, never changed): no boxed list per attach. */
    private record Key(VirtualMemoryResource resource, long[] ids, long size) {
        @Override
        public boolean equals(Object o) {
            return o instanceof Key k && k.resource == resource && java.util.Arrays.equals(k.ids, ids) && k.size == size;
        }

        @Override
        public int hashCode() {
            return System.identityHashCode(resource) * 31 + java.util.Arrays.hashCode(ids) * 7 + Long.hashCode(size);
        }
    }

    private static final class Entry {
        final Key key;
        final long[] ids;
        final long bytes;
        VirtualMemoryBuffer buffer;
        int views;
        boolean evicted;

        Entry(Key key, long[] ids, long bytes) {
            this.key = key;
            this.ids = ids;
            this.bytes = bytes;
        }
    }

    private final int maxEntries;
    private final long maxBytes;
    private final Hooks hooks;
    private final Object lock = new Object();
    /** Guarded by {@link #lock} (a {@link LongMap}: no boxed id per look-up). */
    private final LongMap<Id> ids = new LongMap<>();
    /** Access order: the first is the least recently used. */
    private final LinkedHashMap<Key, Entry> entries = new LinkedHashMap<>(16, 0.75f, true);
    private long bytes;
    private long hits;
    private long misses;
    private long evictions;
    private long forgets;
    private long fdsReceived;
    private boolean ended;
    /**
     * Kept fds taken out of their ids to be closed and not closed yet ({@link #closeKeptFds}):
     * still open, so still counted in {@link Stats#fdsKept()}. Guarded by {@link #lock}.
     */
    private int fdsClosing;
    /** Buffers of evicted entries whose close is queued on the event thread ({@link #closeLater}). */
    private final java.util.Set<VirtualMemoryBuffer> closingLater = new java.util.HashSet<>();
    /** Threads closing such a buffer right now (taken out of closingLater); connectionEnded waits for them. */
    private final java.util.Set<Thread> closers = new java.util.HashSet<>();

    ImportCache(int maxEntries, long maxBytes, Hooks hooks) {
        if (maxEntries < 0) throw new IllegalArgumentException("cacheMaxEntries: " + maxEntries + " (expected: >= 0)");
        if (maxBytes < 0) throw new IllegalArgumentException("cacheMaxBytes: " + maxBytes + " (expected: >= 0)");
        this.maxEntries = maxEntries;
        this.maxBytes = maxBytes;
        this.hooks = hooks;
    }

    /** The most entries kept (0: caching disabled). */
    public int maxEntries() { return maxEntries; }

    /** The most mapped bytes kept (0: caching disabled). */
    public long maxBytes() { return maxBytes; }

    /**
     * True when attachments may be served from kept mappings: both bounds above 0, the core
     * can share a mapping, and the connection does not speak protocol version 1 (a version-1
     * connection never uses the cache: false from its HELLO_OK on).
     */
    public boolean isEnabled() { return !versionOne && maxEntries > 0 && maxBytes > 0 && CoreSupport.canShare(); }

    /** Set by the client when its connection turned out to speak version 1 (the cache then stays unused). */
    private volatile boolean versionOne;

    /** The connection speaks version 1: {@link #isEnabled()} is false from now on. */
    void versionOne() { versionOne = true; }

    /** A consistent snapshot of the cache's counts and bounds, taken under its lock ({@link Stats} says what each counts). */
    public Stats stats() {
        synchronized (lock) {
            int kept = 0;
            for (Id r : ids.values()) if (r.fd >= 0) kept++;
            kept += fdsClosing; // open until closeKeptFds closed them
            int held = 0;
            // Not one the server let go of: FORGOTTEN read, or the connection ended (a probe:
            // still counted after the end while a lease mapped it).
            for (Id r : ids.values()) if (r.state != State.FORGETTING && !r.gone) held++;
            return new Stats(hits, misses, entries.size(), bytes, held, kept, evictions, forgets, fdsReceived);
        }
    }

    /**
     * On the reader, as a DESCRIPTOR arrives (before the next frame is read): checks it
     * against the held ids, takes ownership of its fds (one per chunk with the FD flag, in
     * chunk order) as the kept fds of its new ids, and pins every id it names until {@link
     * #open} or {@link #unpin}.
     *
     * @throws ProtocolException {@code UNKNOWN_ID} (a chunk without fd names an id not held
     *     or one the server evicted; a chunk with fd names an id already given), {@code BAD_PAYLOAD} (a held id's size
     *     differs); nothing is taken: the caller closes the fds
     */
    void received(Messages.DescriptorV2 d, int[] fds) throws ProtocolException {
        synchronized (lock) {
            for (int i = 0; i < d.ids().length; i++) {
                Id r = ids.get(d.ids()[i]);
                if (d.hasFd(i) && r != null) {
                    String id = Long.toUnsignedString(d.ids()[i]); // built only for a message
                    throw new ProtocolException(ErrorCode.UNKNOWN_ID, 0, "DESCRIPTOR chunk " + i + " sends the fd of id "
                            + id + ", which this connection already holds (ids are never reused)");
                }
                if (!d.hasFd(i) && (r == null || r.gone)) {
                    String id = Long.toUnsignedString(d.ids()[i]); // built only for a message
                    throw new ProtocolException(ErrorCode.UNKNOWN_ID, 0, "DESCRIPTOR chunk " + i + " names id " + id
                            + " without its fd, but this client does not hold it");
                }
                if (!d.hasFd(i) && r.state == State.EVICTED) {
                    String id = Long.toUnsignedString(d.ids()[i]); // built only for a message
                    // The server said no later DESCRIPTOR names it (PROTOCOL.md 13.6); its fd may be closed.
                    throw new ProtocolException(ErrorCode.UNKNOWN_ID, 0, "DESCRIPTOR chunk " + i + " names id " + id
                            + " without its fd, but the server evicted it (EVICT read before this DESCRIPTOR)");
                }
                if (!d.hasFd(i) && r.size != d.chunkSizes()[i]) {
                    String id = Long.toUnsignedString(d.ids()[i]); // built only for a message
                    throw new ProtocolException(ErrorCode.BAD_PAYLOAD, 0, "DESCRIPTOR chunk " + i + " gives id " + id
                            + " size " + d.chunkSizes()[i] + ", but it was received with size " + r.size);
                }
            }
            int k = 0;
            for (int i = 0; i < d.ids().length; i++) {
                Id r;
                if (d.hasFd(i)) {
                    r = new Id(d.ids()[i], d.chunkSizes()[i], fds[k++]);
                    ids.put(r.id, r);
                    fdsReceived++;
                    if (ended) r.gone = true;
                } else {
                    r = ids.get(d.ids()[i]);
                }
                r.pins++;
            }
        }
    }

    /**
     * On the reader: {@code d} was rejected (its fds are closed, nothing was taken). The ids
     * of its chunks with the FD flag that this client did not hold are held by the server
     * from the moment it sent them: FORGET them (docs/PROTOCOL.md 13.3), else no later
     * DESCRIPTOR on this connection could send their fds again.
     */
    void rejected(Messages.DescriptorV2 d) {
        List<Long> forget = new ArrayList<>();
        synchronized (lock) {
            for (int i = 0; i < d.ids().length; i++) {
                long id = d.ids()[i];
                Id r = ids.get(id);
                if (d.hasFd(i) && (r == null || r.gone) && !forget.contains(id) && !ended) {
                    forget.add(id);
                    forgets++;
                }
            }
        }
        finish(List.of(), forget);
    }

    /**
     * The buffer for an attachment of {@code d} (pinned by {@link #received}), always
     * unpinning it. A hit: a shared view of the kept buffer (no driver call). A miss: an
     * import from the kept fds, cached when caching is enabled and every id is held; the
     * attachment then gets a view of it too. Otherwise the import itself (as in version 1).
     * {@code whenUnmapped} runs once the returned buffer and everything derived from it are
     * gone (the lease's rule).
     */
    VirtualMemoryBuffer open(Messages.DescriptorV2 d, VirtualMemoryResource resource, Runnable whenUnmapped) {
        long[] idList = d.ids();
        // A look-up key over the DESCRIPTOR's own array (never changed); an entry gets a copy.
        Key key = new Key(resource, idList, d.size());
        boolean cache = isEnabled();
        Entry hit = null;
        VirtualMemoryBuffer kept = null;
        int[] fds = null; // a miss only
        boolean cacheable;
        synchronized (lock) {
            if (cache) {
                Entry e = entries.get(key);
                if (e != null && !e.evicted && e.buffer != null) {
                    e.views++;
                    hits++;
                    hit = e;
                    kept = e.buffer;
                }
            }
            cacheable = cache && hit == null;
            if (hit == null) {
                misses++;
                fds = new int[idList.length];
                for (int i = 0; i < idList.length; i++) {
                    Id r = ids.get(idList[i]);
                    fds[i] = r.fd;
                    if (r.state != State.HELD) cacheable = false;
                    r.refs++; // the mapping about to be made
                }
            }
        }
        if (hit != null) {
            try {
                Entry e = hit;
                return CoreSupport.share(kept, () -> {
                    whenUnmapped.run();
                    viewGone(e);
                });
            } catch (RuntimeException | Error x) {
                viewGone(hit);
                throw x;
            } finally {
                unpin(idList);
            }
        }
        VirtualMemoryBuffer imported;
        try (BufferDescriptor desc = BufferDescriptor.fromFds(fds, d.chunkSizes(), HandleType.POSIX_FD, d.size())) {
            imported = cacheable ? resource.importBuffer(desc, () -> mappingGone(idList))
                    : resource.importBuffer(desc, () -> {
                        whenUnmapped.run();
                        mappingGone(idList);
                    });
        } catch (RuntimeException | Error x) {
            mappingGone(idList); // no mapping was made
            throw x;
        } finally {
            unpin(idList);
        }
        if (!cacheable) return imported;
        key = new Key(resource, idList.clone(), d.size());
        Entry e = new Entry(key, idList, imported.mappedSize());
        e.buffer = imported;
        boolean inserted;
        synchronized (lock) {
            // Re-checked: an EVICT or FORGET read while this imported must keep it out.
            inserted = !ended && !entries.containsKey(key) && allHeld(idList);
            if (inserted) {
                entries.put(key, e);
                bytes += e.bytes;
            }
            e.views++;
        }
        VirtualMemoryBuffer view;
        try {
            view = CoreSupport.share(imported, () -> {
                whenUnmapped.run();
                viewGone(e);
            });
        } catch (RuntimeException | Error x) {
            viewGone(e);
            if (!inserted) imported.close();
            throw x;
        }
        if (!inserted) {
            // Another attach cached the same key meanwhile (or the connection ended): this
            // import serves only its view, which keeps the mapping until it goes.
            synchronized (lock) {
                e.evicted = true;
                e.buffer = null;
            }
            imported.close();
        }
        trim();
        return view;
    }

    /** A DESCRIPTOR that will not be opened (its request gave up, the import was never tried). */
    void unpin(long[] idList) {
        decrement(idList, true);
    }

    /** The mapping of {@code idList} made by an import is gone (the import's whenUnmapped). */
    private void mappingGone(long[] idList) {
        decrement(idList, false);
    }

    /** Takes one pin ({@code pin}) or one mapping reference off each known id of {@code idList}, then settles it. */
    private void decrement(long[] idList, boolean pin) {
        List<Integer> close = null;
        List<Long> forget = null;
        synchronized (lock) {
            for (long id : idList) {
                Id r = ids.get(id);
                if (r == null) continue;
                if (pin) r.pins--;
                else r.refs--;
                // The lists only when something is to be closed or forgotten (not on a hit's unpin).
                if (!settles(r)) continue;
                if (close == null) {
                    close = new ArrayList<>();
                    forget = new ArrayList<>();
                }
                settle(r, close, forget);
            }
        }
        if (close != null) finish(close, forget);
    }

    /** Under the lock: whether {@link #settle} would change anything for {@code r}. */
    private boolean settles(Id r) {
        return fdToClose(r) || unused(r) || toForget(r);
    }

    /** Under the lock: a forgotten or evicted id's fd, no pin needing it any more. */
    private static boolean fdToClose(Id r) {
        return r.pins == 0 && (r.gone || r.state == State.EVICTED) && r.fd >= 0;
    }

    /** Under the lock: a gone id that nothing pins or maps: its entry can go. */
    private static boolean unused(Id r) {
        return r.gone && r.pins == 0 && r.refs <= 0;
    }

    /** Under the lock: a held id that nothing pins or maps, not yet being forgotten. */
    private boolean toForget(Id r) {
        return r.refs == 0 && r.pins == 0 && r.state != State.FORGETTING && !r.gone && !ended;
    }

    /**
     * Under the lock: an id nothing uses is forgotten (HELD or EVICTED: FORGET); a forgotten
     * or evicted id's fd is closed once no pin needs it.
     */
    private void settle(Id r, List<Integer> close, List<Long> forget) {
        if (fdToClose(r)) {
            close.add(r.fd);
            r.fd = -1;
            fdsClosing++; // still open: counted until closeKeptFds closed it
        }
        if (unused(r)) ids.remove(r.id);
        if (toForget(r)) {
            r.state = State.FORGETTING;
            forget.add(r.id);
            forgets++;
        }
    }

    private void finish(List<Integer> close, List<Long> forget) {
        closeKeptFds(close);
        if (!forget.isEmpty()) {
            long[] all = forget.stream().mapToLong(Long::longValue).toArray();
            for (int from = 0; from < all.length; from += Protocol.MAX_IDS_PER_FRAME) {
                hooks.forgetLater(Arrays.copyOfRange(all, from, Math.min(all.length, from + Protocol.MAX_IDS_PER_FRAME)));
            }
        }
    }

    /**
     * Closes kept fds that {@link #settle} took out of their ids (never under the lock), and
     * only then stops counting them in {@code fdsKept}: a caller that waits for the count to
     * drop finds the fds closed (the count used to drop at {@code settle}, before the close).
     */
    private void closeKeptFds(List<Integer> close) {
        if (close.isEmpty()) return;
        RuntimeException seamFailure = null;
        for (int fd : close) { // every fd closed, whatever the (test) seam threw
            java.util.function.IntConsumer seam = beforeFdCloseForTest;
            if (seam != null) {
                try {
                    seam.accept(fd);
                } catch (RuntimeException e) {
                    if (seamFailure == null) seamFailure = e;
                }
            }
            NativeIo.closeQuietly(fd); // never throws
        }
        synchronized (lock) {
            fdsClosing -= close.size(); // all closed now
        }
        if (seamFailure != null) throw seamFailure;
    }

    /** Test seam: run right before each kept fd is closed, on the closing thread, outside the lock. Null: nothing. */
    static volatile java.util.function.IntConsumer beforeFdCloseForTest;

    /** A view of {@code e} is gone: an evicted entry with no view left is closed; then the bounds. */
    private void viewGone(Entry e) {
        boolean close;
        synchronized (lock) {
            e.views--;
            close = e.views == 0 && e.evicted && e.buffer != null;
        }
        if (close) closeLater(e);
        trim();
    }

    /** Closes idle entries, least recently used first, while over a bound. */
    private void trim() {
        synchronized (lock) {
            if (entries.size() <= maxEntries && bytes <= maxBytes) return; // within bounds (every hit): nothing made
        }
        List<Entry> out = new ArrayList<>();
        synchronized (lock) {
            if (entries.size() <= maxEntries && bytes <= maxBytes) return;
            var it = entries.values().iterator();
            while ((entries.size() > maxEntries || bytes > maxBytes) && it.hasNext()) {
                Entry e = it.next();
                if (e.views > 0) continue; // leased: never evicted
                it.remove();
                bytes -= e.bytes;
                e.evicted = true;
                evictions++;
                out.add(e);
            }
        }
        for (Entry e : out) closeLater(e);
    }

    /**
     * Closes {@code e}'s buffer on the event thread (driver calls); its import's whenUnmapped
     * then forgets the ids. Until that runs the buffer is in {@link #closingLater}, so that
     * {@link #connectionEnded} (a client's close) closes it itself if the event thread has not
     * yet: a close must return with nothing of the cache mapped (an independent probe: 15-19%
     * of closes returned with such an entry still mapped), and waiting for the event thread
     * instead could wait on a drop listener that waits on the closing thread (a review).
     */
    private void closeLater(Entry e) {
        VirtualMemoryBuffer b;
        synchronized (lock) {
            b = e.buffer;
            e.buffer = null;
            if (b != null) closingLater.add(b);
        }
        if (b == null) return;
        hooks.runLater(() -> {
            synchronized (lock) {
                if (!closingLater.remove(b)) return; // connectionEnded closed it
                closers.add(Thread.currentThread());
            }
            try {
                closeQuietly(b);
            } finally {
                synchronized (lock) {
                    closers.remove(Thread.currentThread());
                    lock.notifyAll();
                }
            }
        });
    }

    private static void closeQuietly(VirtualMemoryBuffer b) {
        try {
            b.close();
        } catch (RuntimeException x) {
            System.getLogger(ImportCache.class.getName()).log(System.Logger.Level.WARNING,
                    "closing a cached import failed: " + x, x);
        }
    }

    /**
     * On the reader: EVICT. Each id held becomes evicted (a FORGET of its own in flight makes
     * it moot: ignored, as are ids not held); idle entries mapping it are closed, leased ones
     * when their last view goes.
     */
    void evicted(long[] idList) {
        List<Entry> out = new ArrayList<>();
        List<Integer> close = new ArrayList<>();
        List<Long> forget = new ArrayList<>();
        synchronized (lock) {
            for (long id : idList) {
                Id r = ids.get(id);
                if (r == null || r.state != State.HELD || r.gone) continue;
                r.state = State.EVICTED;
                var it = entries.values().iterator();
                while (it.hasNext()) {
                    Entry e = it.next();
                    if (!contains(e.ids, id)) continue;
                    it.remove();
                    bytes -= e.bytes;
                    e.evicted = true;
                    evictions++;
                    if (e.views == 0) out.add(e);
                }
                settle(r, close, forget); // nothing maps it: FORGET now; else when its last mapping goes
            }
        }
        for (Entry e : out) closeLater(e);
        finish(close, forget);
    }

    /** On the reader (or when the request fails): FORGOTTEN for {@code idList}; kept fds close once unpinned. */
    void forgotten(long[] idList) {
        List<Integer> close = new ArrayList<>();
        List<Long> forget = new ArrayList<>();
        synchronized (lock) {
            for (long id : idList) {
                Id r = ids.get(id);
                if (r == null) continue;
                r.gone = true;
                settle(r, close, forget);
            }
            lock.notifyAll(); // dropIdle waits for this
        }
        finish(close, forget);
    }

    /**
     * The server refused an ATTACH with TOO_MANY_IDS: closes every idle entry (on this
     * thread: the caller is attaching, driver calls are expected) and waits, at most {@code
     * timeoutMillis}, until the ids that forgets are acknowledged (FORGOTTEN), so that an
     * ATTACH sent after this return finds them gone on the server. False when there was
     * nothing to drop or the wait ran out.
     */
    boolean dropIdle(long timeoutMillis) throws InterruptedException {
        List<Entry> out = new ArrayList<>();
        synchronized (lock) {
            var it = entries.values().iterator();
            while (it.hasNext()) {
                Entry e = it.next();
                if (e.views > 0) continue;
                it.remove();
                bytes -= e.bytes;
                e.evicted = true;
                evictions++;
                out.add(e);
            }
        }
        if (out.isEmpty()) return false;
        List<Long> dropped = new ArrayList<>();
        for (Entry e : out) {
            for (long id : e.ids) dropped.add(id);
            VirtualMemoryBuffer b;
            synchronized (lock) {
                b = e.buffer;
                e.buffer = null;
            }
            if (b != null) b.close(); // its import's whenUnmapped queues the FORGETs
        }
        long until = System.nanoTime() + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
        synchronized (lock) {
            for (;;) {
                boolean pending = false;
                for (long id : dropped) {
                    Id r = ids.get(id);
                    if (r != null && r.state == State.FORGETTING && !r.gone) pending = true;
                }
                if (!pending) return true;
                long left = until - System.nanoTime();
                if (left <= 0) return false;
                lock.wait(Math.max(1, java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(left)));
            }
        }
    }

    /**
     * The connection ended: ids mean nothing any more. Every idle entry is closed now; an entry
     * with views (or a hit making one right now) is closed when its last view goes, as an
     * evicted one is; every fd no pin needs is closed.
     *
     * <p>Not closed under a view being made: a hit counts its view under the lock and then
     * shares the kept import, and a close racing that share was refused ("in use") and the
     * import, already dropped from the entry, stayed mapped until the garbage collector found
     * it (an independent probe: about one leak per 13 to 212 closes racing hits).
     */
    void connectionEnded() {
        List<Entry> out = new ArrayList<>();
        List<Integer> close = new ArrayList<>();
        synchronized (lock) {
            ended = true;
            for (Entry e : entries.values()) {
                e.evicted = true; // a leased one: its last viewGone closes it
                if (e.views == 0) out.add(e);
            }
            entries.clear();
            bytes = 0;
            for (Id r : ids.values()) {
                r.gone = true;
                settle(r, close, new ArrayList<>());
            }
        }
        closeKeptFds(close);
        // Closes still queued on the event thread: done here, before the client's close returns.
        List<VirtualMemoryBuffer> queued;
        synchronized (lock) {
            queued = new ArrayList<>(closingLater);
            closingLater.clear();
        }
        for (VirtualMemoryBuffer b : queued) closeQuietly(b);
        // And one the event thread is closing right now: its close (driver calls only, no
        // listener) ends soon. Not when this thread is that closer (its close ended the client).
        synchronized (lock) {
            long until = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
            while (!closers.isEmpty() && !closers.contains(Thread.currentThread())) {
                long left = until - System.nanoTime();
                if (left <= 0) break;
                try {
                    lock.wait(Math.max(1, java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(left)));
                } catch (InterruptedException x) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        for (Entry e : out) {
            VirtualMemoryBuffer b;
            synchronized (lock) {
                b = e.buffer;
                e.buffer = null;
            }
            if (b == null) continue;
            try {
                b.close();
            } catch (RuntimeException x) {
                System.getLogger(ImportCache.class.getName()).log(System.Logger.Level.WARNING,
                        "closing a cached import at the end failed (the garbage collector will release it): " + x, x);
            }
        }
    }

    /** Under the lock: every id is held (not evicted, not being forgotten). */
    private boolean allHeld(long[] idList) {
        for (long id : idList) {
            Id r = ids.get(id);
            if (r == null || r.state != State.HELD || r.gone) return false;
        }
        return true;
    }

    private static boolean contains(long[] a, long v) {
        for (long x : a) if (x == v) return true;
        return false;
    }

    @Override
    public String toString() {
        Stats s = stats();
        return "ImportCache[" + s.entries() + " entries, " + s.bytes() + " bytes, " + s.hits() + " hits, " + s.misses()
                + " misses, " + s.idsHeld() + " ids, " + s.fdsKept() + " fds kept]";
    }
}
