package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;

import org.junit.jupiter.api.Test;

/**
 * {@link SharingServer#utf8Length} counts a name's UTF-8 bytes without encoding it (a
 * publication name is checked on every publish and attach): it must agree with
 * {@code getBytes(UTF_8).length} everywhere, surrogates included (a pair is 4 bytes; a lone
 * surrogate is encoded as '?', 1 byte), and at the 255/256-byte edge of the name limit.
 * From the independent review of the allocation cuts.
 */
class Utf8LengthTest {
    @Test
    void agreesWithTheEncoderOnEveryKindOfCharacter() {
        String[] names = {"", "frame", "caméra", "日本語", "\uD83D\uDE00", "a\uD83D\uDE00b", "\uD83D", "\uDE00",
            "x\uD83Dy", "\uDE00\uD83D", "\u007F\u0080\u07FF\u0800\uFFFF", "a".repeat(255), "a".repeat(256),
            "é".repeat(127) + "a", "é".repeat(128), "\uD83D\uDE00".repeat(63) + "abc", "\uD83D\uDE00".repeat(64)};
        for (String n : names) {
            assertEquals(n.getBytes(StandardCharsets.UTF_8).length, SharingServer.utf8Length(n), "name: " + n);
        }
    }
}
