package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

import jnr.unixsocket.UnixServerSocketChannel;
import jnr.unixsocket.UnixSocketAddress;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The socket file: mode 0600, stale files replaced, live servers and other files left alone. */
class SocketFileTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    private static int mode(Path p) throws IOException {
        return (Integer) Files.getAttribute(p, "unix:mode", LinkOption.NOFOLLOW_LINKS);
    }

    private static void assertSocket0600(Path p) throws IOException {
        int mode = mode(p);
        assertEquals(0140000, mode & 0170000, "a socket: mode " + Integer.toOctalString(mode));
        assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(p, LinkOption.NOFOLLOW_LINKS)));
    }

    @Test
    void socketFileHasMode0600AndIsRemovedOnClose() throws Exception {
        try (SharingServer server = SharingServer.builder(sock).build()) {
            assertSocket0600(sock);
            assertEquals(sock.toAbsolutePath(), server.socketPath());
            try (Stream s = new Stream(sock)) {
                assertTrue(s.ok);
            }
            // No private binding directory is left behind.
            try (var files = Files.list(sock.getParent())) {
                assertEquals(1, files.count());
            }
        }
        assertFalse(Files.exists(sock), "close() deletes the socket file");
    }

    @Test
    void aPathTooLongForThePrivateDirectoryStillGetsMode0600() throws Exception {
        int room = FdSocket.MAX_PATH_BYTES - sock.getParent().toString().length() - 1;
        Path dir = Files.createDirectory(sock.getParent().resolve("d".repeat(room - 10)));
        Path longSock = dir.resolve("s.sock");
        assertTrue(longSock.toString().length() > FdSocket.MAX_PATH_BYTES - 15);
        try (SharingServer server = SharingServer.builder(longSock).build()) {
            assertEquals(longSock, server.socketPath());
            assertSocket0600(longSock);
            try (Stream s = new Stream(longSock)) {
                assertTrue(s.ok);
            }
        }
    }

    @Test
    void aStaleSocketIsReplaced() throws Exception {
        UnixServerSocketChannel dead = UnixServerSocketChannel.open();
        dead.socket().bind(new UnixSocketAddress(sock.toFile()));
        dead.close(); // a crashed server: the file stays, nothing listens
        assertTrue(Files.exists(sock));
        try (SharingServer server = SharingServer.builder(sock).build()) {
            assertEquals(0, server.connectionCount());
            assertSocket0600(sock);
            try (Stream s = new Stream(sock)) {
                assertTrue(s.ok, "the new server answers");
            }
        }
    }

    @Test
    void aLiveServerIsNotReplaced() throws Exception {
        try (SharingServer first = SharingServer.builder(sock).build()) {
            assertFalse(first.isClosed());
            IOException e = assertThrows(IOException.class, () -> SharingServer.builder(sock).build());
            assertTrue(e.getMessage().contains("a live server is listening"), e.getMessage());
            try (Stream s = new Stream(sock)) {
                assertTrue(s.ok, "the first server still answers");
            }
        }
    }

    @Test
    void aFileThatIsNotASocketIsNotReplaced() throws Exception {
        Files.writeString(sock, "precious");
        IOException e = assertThrows(IOException.class, () -> SharingServer.builder(sock).build());
        assertTrue(e.getMessage().contains("is not a socket"), e.getMessage());
        assertEquals("precious", Files.readString(sock));
    }

    @Test
    void aMissingDirectoryIsReported() {
        Path nowhere = sock.getParent().resolve("no/such/dir/s.sock");
        IOException e = assertThrows(IOException.class, () -> SharingServer.builder(nowhere).build());
        assertTrue(e.getMessage().contains("does not exist"), e.getMessage());
    }

    /**
     * A directory where no socket can be made (an independent probe: the message was only the
     * private directory's path, "/proc/.cuvmm-087db014", for /proc and for a directory the
     * user may not write), and a path under a regular file ("does not exist" before).
     */
    @Test
    void aDirectoryWhereNothingCanBeCreatedIsExplained() throws Exception {
        Path inProc = Path.of("/proc/cuvmm-test.sock");
        IOException e = assertThrows(IOException.class, () -> SharingServer.builder(inProc).build());
        assertTrue(e.getMessage().startsWith("cannot bind /proc/cuvmm-test.sock: cannot create a file in /proc (its "
                + "private directory .cuvmm-"), e.getMessage());
        assertTrue(e.getMessage().endsWith("(choose another path)") || e.getMessage().contains("(expected: a directory "
                + "this process may write to"), e.getMessage());
        Path file = sock.getParent().resolve("plain-file");
        Files.writeString(file, "x");
        IOException under = assertThrows(IOException.class,
                () -> SharingServer.builder(file.resolve("s.sock")).build());
        assertEquals("cannot bind " + file.resolve("s.sock") + ": " + file + " is not a directory (choose another path)",
                under.getMessage());
    }

    /** Says HELLO; ok when HELLO_OK comes back. */
    private static final class Stream implements AutoCloseable {
        final boolean ok;

        Stream(Path p) throws IOException {
            try (SharingClient c = SharingClient.connect(p)) {
                ok = c.serverVersion() == Protocol.LATEST_VERSION; // a v2 server answers the default client in v2
            }
        }

        @Override
        public void close() {}
    }
}
