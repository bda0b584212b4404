package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Proves the raw-fd example works as published, and that neither side keeps an fd or a mapping. */
class RawFdExampleTest {

    @Test
    void sendsImportsVerifiesAndClosesEverything() throws Exception {
        Leaks.Snapshot baseline = Leaks.baselineAfter(() -> RawFdExample.run(new Leaks.Output().stream));

        Leaks.Output out = new Leaks.Output();
        boolean ok = RawFdExample.run(out.stream);
        String text = out.text();

        assertTrue(ok, text);
        assertTrue(text.matches("(?s)sender: \\d+ bytes in 2 chunk\\(s\\)\n.*"), text);
        assertTrue(text.matches("(?s).*sender: exported BufferDescriptor\\[POSIX_FD, .*, fds \\[\\d+, \\d+]\n.*"), text);
        assertTrue(text.matches("(?s).*other side: received fds \\[\\d+, \\d+], sizes \\[\\d+, \\d+], size \\d+, POSIX_FD\n.*"),
                text);
        assertTrue(text.contains("sender: the other side says: verified "), text);
        assertTrue(text.contains("sender: its write is in our buffer: true"), text);
        assertTrue(text.endsWith("OK\n"), text);
        baseline.assertBack("after RawFdExample");
    }
}
