package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import java.util.Random;

import org.junit.jupiter.api.Test;

/** {@link LongMap} against a {@link HashMap}: random puts and removes over a small key range (many collisions and shifts). */
class LongMapTest {
    @Test
    void behavesAsAHashMap() {
        Random r = new Random(42);
        LongMap<Long> m = new LongMap<>(2);
        Map<Long, Long> ref = new HashMap<>();
        for (int i = 0; i < 200_000; i++) {
            long k = 1 + r.nextInt(300) * (r.nextBoolean() ? 1L : 1L << 33);
            switch (r.nextInt(3)) {
                case 0 -> assertEquals(ref.put(k, (long) i), m.put(k, (long) i));
                case 1 -> assertEquals(ref.remove(k), m.remove(k));
                default -> assertEquals(ref.get(k), m.get(k));
            }
            assertEquals(ref.size(), m.size());
        }
        for (Map.Entry<Long, Long> e : ref.entrySet()) assertEquals(e.getValue(), m.get(e.getKey()));
        assertEquals(ref.size(), m.values().size());
        assertEquals(ref.size(), m.keys().length);
        for (long k : m.keys()) assertEquals(ref.get(k), m.get(k));
    }

    @Test
    void keyZeroIsRefused() {
        LongMap<String> m = new LongMap<>();
        assertThrows(IllegalArgumentException.class, () -> m.put(0, "x"));
        assertEquals(null, m.get(0));
        assertEquals(null, m.remove(0));
    }

    /** A burst does not keep its table: removals shrink it back (never below the initial size), entries intact. */
    @Test
    void theTableShrinksBackAfterABurst() {
        LongMap<Long> m = new LongMap<>(16);
        int initial = m.capacity();
        for (long k = 1; k <= 10_000; k++) m.put(k, k);
        int burst = m.capacity();
        assertTrue(burst >= 20_000, "capacity after 10,000 entries: " + burst);
        for (long k = 1; k <= 9_990; k++) {
            assertEquals(k, m.remove(k));
            if (k % 1000 == 0) {
                for (long j = k + 1; j <= 10_000; j += 97) assertEquals(j, m.get(j), "entry " + j + " after removing " + k);
            }
        }
        assertTrue(m.capacity() <= 128, "capacity with 10 entries left: " + m.capacity() + " (was " + burst + ")");
        for (long k = 9_991; k <= 10_000; k++) assertEquals(k, m.get(k));
        for (long k = 9_991; k <= 10_000; k++) m.remove(k);
        assertEquals(initial, m.capacity(), "an empty map is back to its initial size");
        for (long k = 1; k <= 1000; k++) m.put(k, k);
        m.clear();
        assertEquals(initial, m.capacity(), "clear() drops the grown table");
        assertEquals(0, m.size());
        assertEquals(null, m.get(5));
    }
}
