package org.cuvmm.internal;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileNotFoundException;
import java.io.IOException;

/**
 * Counts file descriptors the process could still open, up to a small number, by opening
 * {@code /dev/null} that many times and closing each again. Used before a native library's
 * first load ({@link NativeFirstLoad}; vmm-ipc's jnr layer): such a load opens files while a
 * class initializes, and a class whose initializer failed stays broken until the JVM restarts,
 * where a refusal before the load can be retried. Plain Java I/O only: nothing here loads
 * native code or initializes a class that could fail at the limit.
 */
public final class FreeFds {
    private FreeFds() {}

    /**
     * How many of {@code wanted} fds could be opened now: {@code wanted} when all could, or
     * when {@code /dev/null} cannot be opened for a reason other than the fd limit (then this
     * cannot tell, and says so by not refusing). Every fd opened here is closed before it
     * returns. Another thread may take the fds just counted.
     */
    public static int openable(int wanted) {
        FileInputStream[] held = new FileInputStream[wanted];
        int n = 0;
        try {
            for (; n < wanted; n++) held[n] = new FileInputStream("/dev/null");
            return n;
        } catch (FileNotFoundException e) {
            // /dev/null is there, so the open failed for want of an fd (EMFILE, or ENFILE system-
            // wide): told by that, not by the message, whose strerror text follows the locale.
            return new File("/dev/null").exists() ? n : wanted;
        } finally {
            for (int i = 0; i < n; i++) {
                try {
                    held[i].close();
                } catch (IOException ignored) {
                    // closing /dev/null does not fail; the fd is released either way
                }
            }
        }
    }
}
