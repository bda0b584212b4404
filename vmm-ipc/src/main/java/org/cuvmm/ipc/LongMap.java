package org.cuvmm.ipc;

import java.util.ArrayList;
import java.util.List;

/**
 * A map from non-zero {@code long} keys to values, without boxing: the per-round tables of
 * the sharing path (a client's pending requests and leases, a connection's leases, the import
 * cache's ids) are keyed by ids, and a boxed key plus a hash node per entry was a good part of
 * a cached round's allocation (issue 11). Open addressing with linear probing and
 * backward-shift deletion: a put of a new key allocates nothing until the table grows. The
 * table grows at half full and shrinks (halves, never below its initial size) when a removal
 * leaves it less than an eighth full, so a burst (thousands of requests in flight) does not
 * keep its memory for the life of the connection; the gap between the two thresholds keeps a
 * size that hovers near one from resizing back and forth.
 *
 * <p>Thread-safe: every method holds this object's monitor for a few array operations, never
 * across anything else. Key 0 is reserved (the protocol's ids and request ids are never 0).
 * Package-private.
 */
final class LongMap<V> {
    private long[] keys;
    private Object[] values;
    private int size;
    /** The capacity made at construction: the table never shrinks below it. */
    private final int minCapacity;

    LongMap() {
        this(16);
    }

    /** Room for {@code expected} entries before the first growth. */
    LongMap(int expected) {
        int cap = 8;
        while (cap < expected * 2) cap <<= 1;
        keys = new long[cap];
        values = new Object[cap];
        minCapacity = cap;
    }

    private static int hash(long key, int mask) {
        long h = key * 0x9E3779B97F4A7C15L;
        return (int) (h ^ (h >>> 32)) & mask;
    }

    private static void checkKey(long key) {
        if (key == 0) throw new IllegalArgumentException("key: 0 (expected: non-zero)");
    }

    private int slot(long key) {
        int mask = keys.length - 1;
        for (int i = hash(key, mask); ; i = (i + 1) & mask) {
            long k = keys[i];
            if (k == key) return i;
            if (k == 0) return -1;
        }
    }

    @SuppressWarnings("unchecked")
    synchronized V get(long key) {
        if (key == 0) return null;
        int i = slot(key);
        return i < 0 ? null : (V) values[i];
    }

    synchronized boolean containsKey(long key) {
        return key != 0 && slot(key) >= 0;
    }

    /** Maps {@code key} to {@code value} (non-null); returns the previous value or null. */
    @SuppressWarnings("unchecked")
    synchronized V put(long key, V value) {
        checkKey(key);
        if (value == null) throw new NullPointerException("value");
        if ((size + 1) * 2 > keys.length) resize(keys.length * 2);
        int mask = keys.length - 1;
        for (int i = hash(key, mask); ; i = (i + 1) & mask) {
            long k = keys[i];
            if (k == key) {
                V old = (V) values[i];
                values[i] = value;
                return old;
            }
            if (k == 0) {
                keys[i] = key;
                values[i] = value;
                size++;
                return null;
            }
        }
    }

    /** Removes {@code key}; returns its value or null. */
    @SuppressWarnings("unchecked")
    synchronized V remove(long key) {
        if (key == 0) return null;
        int i = slot(key);
        if (i < 0) return null;
        V old = (V) values[i];
        // Backward-shift deletion: no tombstones, so a lookup stops at the first empty slot.
        int mask = keys.length - 1;
        int hole = i;
        for (int j = (hole + 1) & mask; keys[j] != 0; j = (j + 1) & mask) {
            int home = hash(keys[j], mask);
            // Move j's entry into the hole unless its home lies cyclically in (hole, j].
            boolean stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
            if (!stays) {
                keys[hole] = keys[j];
                values[hole] = values[j];
                hole = j;
            }
        }
        keys[hole] = 0;
        values[hole] = null;
        size--;
        if (keys.length > minCapacity && size * 8 < keys.length) resize(keys.length / 2);
        return old;
    }

    synchronized int size() { return size; }

    synchronized boolean isEmpty() { return size == 0; }

    /** A snapshot of the values (any order). */
    @SuppressWarnings("unchecked")
    synchronized List<V> values() {
        List<V> out = new ArrayList<>(size);
        for (int i = 0; i < keys.length; i++) if (keys[i] != 0) out.add((V) values[i]);
        return out;
    }

    /** A snapshot of the keys (any order). */
    synchronized long[] keys() {
        long[] out = new long[size];
        int n = 0;
        for (long k : keys) if (k != 0) out[n++] = k;
        return out;
    }

    synchronized void clear() {
        long[] k = new long[minCapacity];
        Object[] v = new Object[minCapacity]; // both made before either is installed: an OutOfMemoryError leaves the map as it was
        keys = k;
        values = v;
        size = 0;
    }

    /** The table's length now (tests: it grows and shrinks back). */
    synchronized int capacity() { return keys.length; }

    /** Rehashes every entry into a table of {@code capacity} slots (a power of two, above twice the size). */
    private void resize(int capacity) {
        long[] oldKeys = keys;
        Object[] oldValues = values;
        long[] newKeys = new long[capacity];
        Object[] newValues = new Object[capacity]; // both made first: an OutOfMemoryError leaves the map as it was
        keys = newKeys;
        values = newValues;
        int mask = keys.length - 1;
        for (int i = 0; i < oldKeys.length; i++) {
            long k = oldKeys[i];
            if (k == 0) continue;
            int j = hash(k, mask);
            while (keys[j] != 0) j = (j + 1) & mask;
            keys[j] = k;
            values[j] = oldValues[i];
        }
    }
}
