package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;

import org.junit.jupiter.api.Test;

/** Protocol version 2's payloads byte by byte, as docs/PROTOCOL.md section 13 gives them. */
class MessagesV2Test {
    @Test
    void descriptorV2LayoutIs24Plus20BytesPerChunk() throws Exception {
        Messages.DescriptorV2 d = new Messages.DescriptorV2(7, 1, 5000, new long[] {4096, 2048}, new long[] {3, 9},
                new int[] {1, 0});
        byte[] p = d.encode();
        assertEquals(24 + 20 * 2, p.length);
        ByteBuffer b = ByteBuffer.wrap(p);
        assertEquals(7, b.getLong(0), "lease id at 0");
        assertEquals(1, b.getInt(8), "handle type at 8");
        assertEquals(5000, b.getLong(12), "buffer size at 12");
        assertEquals(2, b.getInt(20), "chunk count at 20");
        assertEquals(4096, b.getLong(24), "chunk 0 size at 24");
        assertEquals(3, b.getLong(32), "chunk 0 id at 32");
        assertEquals(1, b.getInt(40), "chunk 0 flags at 40");
        assertEquals(2048, b.getLong(44), "chunk 1 size at 44");
        assertEquals(9, b.getLong(52), "chunk 1 id at 52");
        assertEquals(0, b.getInt(60), "chunk 1 flags at 60");
        assertEquals(1, d.fdCount(), "one chunk with FD");
        Messages.Message back = Messages.decode(FrameType.DESCRIPTOR, 2, p);
        assertEquals(d, back);
        // The same type in version 1 has the version-1 layout: these bytes do not parse there.
        assertThrows(ProtocolException.class, () -> Messages.decode(FrameType.DESCRIPTOR, 1, p));
    }

    @Test
    void descriptorV2ZeroFdsIsAllowed() throws Exception {
        byte[] p = new Messages.DescriptorV2(7, 1, 10, new long[] {4096}, new long[] {1}, new int[] {0}).encode();
        Messages.DescriptorV2 d = (Messages.DescriptorV2) Messages.decode(FrameType.DESCRIPTOR, 2, p);
        assertEquals(0, d.fdCount());
    }

    @Test
    void descriptorV2RejectsIdZeroUnknownFlagsAndRepeatedIds() {
        assertBad(v2(new long[] {0}, new int[] {1}), "allocation id 0");
        assertBad(v2(new long[] {5}, new int[] {2}), "flags 0x2");
        assertBad(v2(new long[] {5}, new int[] {0x80000001}), "flags 0x80000001");
        assertBad(v2(new long[] {5, 5}, new int[] {1, 0}), "appears twice");
        byte[] p = v2(new long[] {5}, new int[] {1});
        assertBad(java.util.Arrays.copyOf(p, p.length - 1), "needs 20 bytes of chunks");
        assertBad(java.util.Arrays.copyOf(p, p.length + 8), "needs 20 bytes of chunks");
    }

    @Test
    void forgetAndEvictAreACountAndIds() throws Exception {
        byte[] p = new Messages.Forget(new long[] {1, 0xFFFFFFFFFFL}).encode();
        assertEquals(4 + 16, p.length);
        ByteBuffer b = ByteBuffer.wrap(p);
        assertEquals(2, b.getInt(0));
        assertEquals(1, b.getLong(4));
        assertEquals(0xFFFFFFFFFFL, b.getLong(12));
        assertEquals(new Messages.Forget(new long[] {1, 0xFFFFFFFFFFL}), Messages.decode(FrameType.FORGET, 2, p));
        assertEquals(new Messages.Evict(new long[] {1, 0xFFFFFFFFFFL}), Messages.decode(FrameType.EVICT, 2, p));
        assertArrayEquals(new byte[] {0, 0, 0, 3}, new Messages.Forgotten(3).encode());
        assertEquals(new Messages.Forgotten(3), Messages.decode(FrameType.FORGOTTEN, 2, new byte[] {0, 0, 0, 3}));

        assertBad(FrameType.FORGET, ByteBuffer.allocate(4).putInt(0).array(), "id count 0");
        assertBad(FrameType.EVICT, ByteBuffer.allocate(4).putInt(8191).array(), "id count 8191");
        assertBad(FrameType.FORGET, ByteBuffer.allocate(12).putInt(1).putLong(0).array(), "is 0");
        assertBad(FrameType.FORGET, ByteBuffer.allocate(20).putInt(2).putLong(4).putLong(4).array(), "appears twice");
        assertBad(FrameType.FORGET, ByteBuffer.allocate(13).putInt(1).putLong(4).array(), "needs 8 bytes of ids");
        // The most ids a frame may name fit in a payload.
        long[] max = new long[Protocol.MAX_IDS_PER_FRAME];
        for (int i = 0; i < max.length; i++) max[i] = i + 1;
        assertTrue(new Messages.Forget(max).encode().length <= Protocol.MAX_PAYLOAD);
        assertThrows(IllegalArgumentException.class, () -> new Messages.Evict(new long[0]).encode());
    }

    @Test
    void typesNineToElevenExistOnlyInVersionTwo() {
        assertNull(FrameType.of(9, 1));
        assertNull(FrameType.of(11, 1));
        assertSame(FrameType.FORGET, FrameType.of(9, 2));
        assertSame(FrameType.FORGOTTEN, FrameType.of(10, 2));
        assertSame(FrameType.EVICT, FrameType.of(11, 2));
        assertNull(FrameType.of(12, 2));
        assertEquals(8, FrameType.maxCode(1));
        assertEquals(11, FrameType.maxCode(2));
        assertEquals(18, ErrorCode.UNKNOWN_ID.code());
        assertEquals(19, ErrorCode.TOO_MANY_IDS.code());
    }

    @Test
    void headerCarriesTheVersion() {
        byte[] f = Frame.encode(new Messages.Forgotten(1), 5, 2);
        assertEquals(2, ByteBuffer.wrap(f).getShort(4));
        assertEquals(1, ByteBuffer.wrap(Frame.encode(new Messages.Forgotten(1), 5)).getShort(4));
    }

    private static byte[] v2(long[] ids, int[] flags) {
        ByteBuffer b = ByteBuffer.allocate(24 + 20 * ids.length).putLong(7).putInt(1).putLong(10).putInt(ids.length);
        for (int i = 0; i < ids.length; i++) b.putLong(4096).putLong(ids[i]).putInt(flags[i]);
        return b.array();
    }

    private static void assertBad(byte[] descriptor, String text) {
        assertBad(FrameType.DESCRIPTOR, descriptor, text);
    }

    private static void assertBad(FrameType type, byte[] payload, String text) {
        ProtocolException e = assertThrows(ProtocolException.class, () -> Messages.decode(type, 2, payload));
        assertSame(ErrorCode.BAD_PAYLOAD, e.code());
        assertTrue(e.getMessage().contains(text), e.getMessage());
        assertInstanceOf(ProtocolException.class, e);
    }
}
