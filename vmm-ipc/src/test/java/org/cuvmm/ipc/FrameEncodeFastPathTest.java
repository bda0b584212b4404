package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import org.junit.jupiter.api.Test;

/**
 * {@link Frame#encode(Messages.Message, int, int)} builds RELEASE and RELEASED straight into
 * their frame (issue 11): the bytes must be those of the general path (header, then the
 * message's own payload encoding), for ids and request ids across their ranges.
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
}
