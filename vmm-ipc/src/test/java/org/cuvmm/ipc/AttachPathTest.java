package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

import org.junit.jupiter.api.Test;

/**
 * The server's per-ATTACH work made cheaper for issue 11 (CPU per exchange), with the same
 * results: names decoded with an ASCII fast path (non-ASCII and malformed UTF-8 still go
 * through the strict decoder), frame types looked up by code, and {@link ConnectionIds#assign}
 * finding repeated allocations by a scan for a few chunks and a set for many.
 */
class AttachPathTest {
    private static byte[] attachPayload(byte[] name) {
        return ByteBuffer.allocate(2 + name.length).putShort((short) name.length).put(name).array();
    }

    @Test
    void namesDecodeAsBeforeAsciiOrNot() throws Exception {
        for (String name : new String[] {"frame", "a", "cam-0/frames", "caméra", "日本語", "x".repeat(255)}) {
            Messages.Attach a = (Messages.Attach) Messages.decode(FrameType.ATTACH, 2,
                    attachPayload(name.getBytes(StandardCharsets.UTF_8)));
            assertEquals(name, a.name());
        }
        ProtocolException bad = assertThrows(ProtocolException.class, () -> Messages.decode(FrameType.ATTACH, 2,
                attachPayload(new byte[] {'a', (byte) 0xC3})));
        assertTrue(bad.getMessage().contains("not valid UTF-8"), bad.getMessage());
        assertThrows(ProtocolException.class, () -> Messages.decode(FrameType.ATTACH, 2,
                attachPayload(new byte[] {(byte) 0xFF, 'a'})));
    }

    @Test
    void repeatedIdsAreFoundWithFewOrManyIds() throws Exception {
        for (int n : new int[] {2, 16, 17, 300}) {
            int count = Math.min(n, Protocol.MAX_IDS_PER_FRAME);
            ByteBuffer ok = ByteBuffer.allocate(4 + 8 * count).putInt(count);
            for (int i = 0; i < count; i++) ok.putLong(1000 + i);
            assertEquals(count, ((Messages.Forget) Messages.decode(FrameType.FORGET, 2, ok.array())).ids().length);
            ByteBuffer twice = ByteBuffer.allocate(4 + 8 * count).putInt(count);
            for (int i = 0; i < count - 1; i++) twice.putLong(1000 + i);
            twice.putLong(1000 + (count - 2) / 2); // the last repeats an earlier one
            ProtocolException e = assertThrows(ProtocolException.class,
                    () -> Messages.decode(FrameType.FORGET, 2, twice.array()), count + " ids");
            assertTrue(e.getMessage().contains("appears twice"), e.getMessage());
        }
    }

    @Test
    void typesByCode() {
        for (FrameType t : FrameType.values()) assertSame(t, FrameType.of(t.code()));
        assertEquals(null, FrameType.of(0));
        assertEquals(null, FrameType.of(12));
        assertEquals(null, FrameType.of(-1));
        assertEquals(null, FrameType.of(65535));
        assertEquals(null, FrameType.of(FrameType.EVICT.code(), 1));
        assertSame(FrameType.EVICT, FrameType.of(FrameType.EVICT.code(), 2));
    }

    @Test
    void repeatsGetFreshIdsWithFewOrManyChunks() {
        for (int n : new int[] {3, 16, 17, 40}) {
            ConnectionIds ids = new ConnectionIds(1000);
            long[] alloc = new long[n];
            long[] sizes = new long[n];
            for (int i = 0; i < n; i++) {
                alloc[i] = 100 + (i % 2 == 0 ? i : i - 1); // each odd chunk repeats the one before it
                sizes[i] = 4096;
            }
            alloc[n - 1] = 0; // unknown: always fresh
            ConnectionIds.Assignment a = ids.assign(alloc, sizes);
            assertEquals(n, a.fdCount(), n + " chunks: every chunk fresh the first time");
            for (int i = 1; i < n; i++) assertFalse(a.ids()[i] == a.ids()[i - 1], n + " chunks: distinct ids");
            ConnectionIds.Assignment again = ids.assign(alloc, sizes);
            for (int i = 0; i < n; i++) {
                boolean kept = alloc[i] != 0 && (i % 2 == 0);
                assertEquals(!kept, again.sendFd()[i], n + " chunks, chunk " + i);
                if (kept) assertEquals(a.ids()[i], again.ids()[i]);
            }
            // The third time, nothing changes for the kept ones; the others get fresh ids again.
            ConnectionIds.Assignment held = ids.assign(new long[] {alloc[0]}, new long[] {4096});
            assertArrayEquals(new long[] {a.ids()[0]}, held.ids());
            assertEquals(0, held.fdCount());
        }
    }
}
