package org.cuvmm.ipc;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The allocation ids one protocol-version-2 connection holds (docs/PROTOCOL.md section 13):
 * which physical allocation each id names, and whether the producer has released it since
 * (EVICT sent or pending, FORGET not yet received). Ids come from a per-connection counter,
 * start at 1 and are never reused on the connection. An id is held from the DESCRIPTOR that
 * sent its fd until the client's FORGET of it, or the end of the connection.
 *
 * <p>Written by the connection's reader (assign, forget) and by the release notice
 * (released, on whichever thread released the memory); read by stats. Its monitor guards
 * only these maps: never held across I/O or a driver call. Package-private.
 */
final class ConnectionIds {
    /** One held id. {@code allocationId} is the core's (0: unknown, never matched again). */
    static final class Held {
        final long id;
        final long allocationId;
        final long size;
        boolean released;

        Held(long id, long allocationId, long size) {
            this.id = id;
            this.allocationId = allocationId;
            this.size = size;
        }
    }

    /** What {@link #assign} decided: per chunk its id and whether its fd must be sent. */
    record Assignment(long[] ids, boolean[] sendFd, long[] newIds) {
        int fdCount() { return newIds.length; }
    }

    private final int maxIds;
    private long nextId = 1;
    private final Map<Long, Held> byId = new LinkedHashMap<>();
    /** Allocation id -> held id ({@link LongMap}: no boxed allocation id per chunk per ATTACH). */
    private final LongMap<Held> byAllocation = new LongMap<>();

    ConnectionIds(int maxIds) {
        this.maxIds = maxIds;
    }

    /**
     * Names each chunk: an allocation this connection already holds keeps its id (no fd);
     * any other gets a fresh id and is held from now on (its fd must be sent). An allocation
     * id of 0 (unknown) always gets a fresh id. Returns null, holding nothing new, when the
     * fresh ids would make the connection hold more than its limit.
     */
    synchronized Assignment assign(long[] allocationIds, long[] sizes) {
        int n = sizes.length;
        long[] ids = new long[n];
        boolean[] fd = new boolean[n];
        // An allocation named twice in one buffer (the core gives each chunk its own today,
        // but nothing here relies on it) is treated like id 0 after its first chunk: a second
        // fresh id, since a DESCRIPTOR may not name one id twice (PROTOCOL.md 13.3); so the
        // count below and the assignment agree. One map lookup per chunk (kept in `found`);
        // repeats found by a scan for the few chunks of a typical buffer, a set for many.
        boolean[] repeat = repeats(allocationIds, n);
        Held[] found = new Held[n];
        int fresh = countFresh(allocationIds, repeat, found);
        if (byId.size() + fresh > maxIds) return null;
        long[] newIds = fresh == 0 ? NO_IDS : new long[fresh];
        int k = 0;
        for (int i = 0; i < n; i++) {
            Held h = found[i];
            if (h != null) {
                ids[i] = h.id;
                continue;
            }
            h = new Held(nextId++, allocationIds[i], sizes[i]);
            byId.put(h.id, h);
            if (h.allocationId != 0 && (repeat == null || !repeat[i])) byAllocation.put(h.allocationId, h);
            ids[i] = h.id;
            fd[i] = true;
            newIds[k++] = h.id;
        }
        return new Assignment(ids, fd, newIds);
    }

    /** How many fresh ids {@link #assign} would give {@code allocationIds} now (for a refusal's message). */
    synchronized int freshNeeded(long[] allocationIds) {
        int n = allocationIds.length;
        return countFresh(allocationIds, repeats(allocationIds, n), new Held[n]);
    }

    /** Chunks that need a fresh id; the held entry of each other chunk goes to {@code found}. Under the monitor. */
    private int countFresh(long[] allocationIds, boolean[] repeat, Held[] found) {
        int fresh = 0;
        for (int i = 0; i < allocationIds.length; i++) {
            Held h = allocationIds[i] == 0 || (repeat != null && repeat[i]) ? null : byAllocation.get(allocationIds[i]);
            if (h == null || h.released) fresh++;
            else found[i] = h;
        }
        return fresh;
    }

    private static final long[] NO_IDS = new long[0];
    /** Up to this many chunks, repeats are found by comparing pairs (no set, no boxing). */
    private static final int SCAN_REPEATS_UP_TO = 16;

    /**
     * For each chunk: true when a non-zero allocation id appeared at an earlier chunk; null
     * when none did (the usual case: nothing allocated).
     */
    private static boolean[] repeats(long[] allocationIds, int n) {
        if (n <= SCAN_REPEATS_UP_TO) {
            boolean[] repeat = null;
            for (int i = 1; i < n; i++) {
                long a = allocationIds[i];
                if (a == 0) continue;
                for (int j = 0; j < i; j++) {
                    if (allocationIds[j] == a) {
                        if (repeat == null) repeat = new boolean[n];
                        repeat[i] = true;
                        break;
                    }
                }
            }
            return repeat;
        }
        boolean[] repeat = new boolean[n];
        java.util.Set<Long> seen = new java.util.HashSet<>();
        for (int i = 0; i < n; i++) repeat[i] = allocationIds[i] != 0 && !seen.add(allocationIds[i]);
        return repeat;
    }

    /** Undoes the fresh ids of an {@link #assign} whose DESCRIPTOR was never queued. */
    synchronized void rollback(Assignment a) {
        for (long id : a.newIds()) {
            Held h = byId.remove(id);
            if (h != null && h.allocationId != 0 && byAllocation.get(h.allocationId) == h) {
                byAllocation.remove(h.allocationId);
            }
        }
    }

    /**
     * The client's FORGET: all or nothing. Returns 0 when every id was held (all are
     * forgotten now), else the first id not held (nothing forgotten).
     */
    synchronized long forget(long[] ids) {
        for (long id : ids) if (!byId.containsKey(id)) return id == 0 ? -1 : id;
        for (long id : ids) {
            Held h = byId.remove(id);
            if (h.allocationId != 0 && byAllocation.get(h.allocationId) == h) byAllocation.remove(h.allocationId);
        }
        return 0;
    }

    /**
     * The producer released allocation {@code allocationId}: if this connection holds it, the id
     * is marked released (no later DESCRIPTOR names it: a new allocation gets a new id) and
     * returned, to be sent in an EVICT; else 0.
     */
    synchronized long released(long allocationId) {
        Held h = byAllocation.remove(allocationId);
        if (h == null) return 0;
        h.released = true;
        return h.id;
    }

    /** Ids held now (released ones included, until FORGET). */
    synchronized int held() { return byId.size(); }

    /** The held ids whose allocation the producer released: [allocation id, bytes] each. */
    synchronized List<long[]> releasedHeld() {
        List<long[]> r = new ArrayList<>();
        for (Held h : byId.values()) if (h.released) r.add(new long[] {h.allocationId, h.size});
        return r;
    }

    /** True when {@code id} is held (tests). */
    synchronized boolean holds(long id) { return byId.containsKey(id); }
}
