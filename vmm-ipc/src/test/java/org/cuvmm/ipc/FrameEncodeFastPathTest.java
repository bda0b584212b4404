package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

/**
 * {@link Frame#encode(Messages.Message, int, int)} builds RELEASE, RELEASED and ATTACH (ASCII
 * name) straight into their frame (issue 11): the bytes must be those of the general path
 * (header, then the message's own payload encoding), for ids, names and request ids across
 * their ranges; a name the fast path does not take still encodes (or is refused) as before.
 */
class FrameEncodeFastPathTest {
    private static final long[] IDS = {0, 1, 0xFF, 0x1234_5678_9ABC_DEF0L, Long.MAX_VALUE, Long.MIN_VALUE, -1};
    private static final int[] REQUEST_IDS = {0, 1, 0x7FFF_FFFF, 0x8000_0000, -1};

    @Test
    void releaseAndReleasedMatchTheGeneralEncoding() {
        for (int version = Protocol.VERSION; version <= Protocol.LATEST_VERSION; version++) {
            for (long id : IDS) {
                for (int requestId : REQUEST_IDS) {
                    Messages.Message[] ms = {new Messages.Release(id), new Messages.Released(id)};
                    for (Messages.Message m : ms) {
                        byte[] expected = Frame.encode(m.type(), requestId, m.encode(), version);
                        assertArrayEquals(expected, Frame.encode(m, requestId, version), m + " #" + requestId + " v"
                                + version);
                    }
                }
            }
        }
    }

    @Test
    void attachMatchesTheGeneralEncoding() {
        String[] names = {"a", "frame", "weights/layer-3.bin", "x".repeat(Protocol.MAX_NAME_BYTES), "caf\u00e9",
                "\u00ff", "\u4e2d\u6587", "\ud83d\ude00", "a\u0000b", "\u007f"};
        for (int version = Protocol.VERSION; version <= Protocol.LATEST_VERSION; version++) {
            for (String name : names) {
                for (int requestId : REQUEST_IDS) {
                    Messages.Attach m = new Messages.Attach(name);
                    byte[] expected = Frame.encode(m.type(), requestId, m.encode(), version);
                    assertArrayEquals(expected, Frame.encode(m, requestId, version), "'" + name + "' #" + requestId);
                }
            }
        }
        for (String bad : new String[] {"", "x".repeat(Protocol.MAX_NAME_BYTES + 1)}) {
            assertThrows(IllegalArgumentException.class, () -> Frame.encode(new Messages.Attach(bad), 1, 2), bad);
        }
    }
}
