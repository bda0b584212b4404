package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import jnr.unixsocket.UnixServerSocketChannel;
import jnr.unixsocket.UnixSocketAddress;
import jnr.unixsocket.UnixSocketChannel;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The listening socket's options: the stale check by errno, the file mode and group (the
 * first of the two gates), and the listen backlog.
 */
class SocketOptionsTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    private static int permissionBits(Path p) throws IOException {
        int mode = (Integer) Files.getAttribute(p, "unix:mode", LinkOption.NOFOLLOW_LINKS);
        assertEquals(0140000, mode & 0170000, "a socket: mode " + Integer.toOctalString(mode));
        return mode & 07777;
    }

    // ------------------------------------------------------------ stale check (errno)

    @Test
    void theStaleCheckReadsConnectsErrno() throws Exception {
        assertEquals(SocketProbe.ENOENT, SocketProbe.connectErrno(sock), "no file");
        UnixServerSocketChannel dead = UnixServerSocketChannel.open();
        dead.socket().bind(new UnixSocketAddress(sock.toFile()));
        dead.close(); // a crashed server: the file stays, nothing listens
        assertEquals(SocketProbe.ECONNREFUSED, SocketProbe.connectErrno(sock), "a socket file nobody listens on");
        try (SharingServer server = SharingServer.builder(sock).build()) {
            assertEquals(0, SocketProbe.connectErrno(sock), "a live server accepts");
            assertFalse(server.isClosed());
        }
        assertFalse(Files.exists(sock));
    }

    @Test
    void aStaleSocketIsReplacedAndALiveOneWithAFullBacklogIsNot() throws Exception {
        UnixServerSocketChannel dead = UnixServerSocketChannel.open();
        dead.socket().bind(new UnixSocketAddress(sock.toFile()));
        dead.close();
        // A listener that never accepts, with a backlog of 1: once full, connect says EAGAIN.
        CountDownLatch admit = new CountDownLatch(1);
        CountDownLatch entered = new CountDownLatch(1);
        List<UnixSocketChannel> clients = new ArrayList<>();
        try (SharingServer server = SharingServer.builder(sock).backlog(1).listener(blockAdmission(admit, entered))
                .build()) {
            assertEquals(0, server.connectionCount());
            // The accept thread first takes one connection and blocks in admission; only then is
            // the backlog filled (a late accept would otherwise free a slot after the fill: the
            // probe below then connected, seen under load).
            assertEquals(-1, fillBacklog(clients, 1));
            assertTrue(entered.await(30, TimeUnit.SECONDS), "the accept thread took the first connection");
            int refusedAt = fillBacklog(clients, 10);
            assertTrue(refusedAt > 0, "the backlog filled up");
            assertEquals(SocketProbe.EAGAIN, SocketProbe.connectErrno(sock), "a full backlog");
            IOException e = assertThrows(IOException.class, () -> SharingServer.builder(sock).build());
            assertTrue(e.getMessage().contains("a live server is listening"), e.getMessage());
            admit.countDown();
        } finally {
            admit.countDown();
            for (UnixSocketChannel c : clients) c.close();
        }
    }

    // ------------------------------------------------------------ backlog

    /** Holds the accept thread in admission until {@code admit} opens: connections pile up in the backlog. */
    private static SharingListener blockAdmission(CountDownLatch admit) {
        return blockAdmission(admit, new CountDownLatch(1));
    }

    /** As {@link #blockAdmission(CountDownLatch)}, counting {@code entered} down as each admission starts waiting. */
    private static SharingListener blockAdmission(CountDownLatch admit, CountDownLatch entered) {
        return new SharingListener() {
            @Override
            public void connected(PeerCredentials peer) {
                entered.countDown();
                try {
                    admit.await(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        };
    }

    /** Non-blocking connects, as a burst of clients makes them; returns how many succeeded before the first EAGAIN, or -1. */
    private int fillBacklog(List<UnixSocketChannel> clients, int n) throws IOException {
        for (int i = 0; i < n; i++) {
            UnixSocketChannel c = UnixSocketChannel.open();
            c.configureBlocking(false);
            clients.add(c);
            // jnr returns false for EAGAIN (and EINPROGRESS, which AF_UNIX never gives).
            if (!c.connect(new UnixSocketAddress(sock.toFile()))) return i;
        }
        return -1;
    }

    @Test
    void aBurstOfConnectsBeyond64AllSucceed() throws Exception {
        int n = 100;
        CountDownLatch admit = new CountDownLatch(1);
        List<UnixSocketChannel> clients = new ArrayList<>();
        // No handshake timeout: these clients never send HELLO, and the waits below may outlast it.
        try (SharingServer server = SharingServer.builder(sock).handshakeTimeout(java.time.Duration.ZERO)
                .listener(blockAdmission(admit)).build()) {
            int failedAt = fillBacklog(clients, n);
            assertEquals(-1, failedAt, "connect " + failedAt + " of a burst of " + n + " failed with EAGAIN");
            admit.countDown();
            await("all " + n + " admitted", 30, () -> server.connectionCount() == n);
            for (UnixSocketChannel c : clients) c.close();
            await("all gone", 30, () -> server.connectionCount() == 0);
        } finally {
            admit.countDown();
            for (UnixSocketChannel c : clients) c.close();
        }
    }

    @Test
    void aSmallBacklogIsTheOneAskedFor() throws Exception {
        CountDownLatch admit = new CountDownLatch(1);
        List<UnixSocketChannel> clients = new ArrayList<>();
        try (SharingServer server = SharingServer.builder(sock).backlog(4).listener(blockAdmission(admit)).build()) {
            int failedAt = fillBacklog(clients, 20);
            // One connection is held in admission, and Linux queues backlog + 1 more.
            assertTrue(failedAt >= 4 && failedAt <= 6, "first EAGAIN at connect " + failedAt);
            assertFalse(server.isClosed());
            // Let the held admission go before the server closes (try-with-resources closes it
            // before the finally runs): else close() waited 10 s for its accept thread.
            admit.countDown();
        } finally {
            admit.countDown();
            for (UnixSocketChannel c : clients) c.close();
        }
    }

    @Test
    void aBacklogBelowOneIsRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SharingServer.builder(sock).backlog(0));
        assertTrue(e.getMessage().startsWith("backlog: 0 (expected: at least 1"), e.getMessage());
    }

    // ------------------------------------------------------------ file mode and group

    @Test
    void theFileGetsTheModeAskedFor() throws Exception {
        for (int mode : new int[] {0600, 0660, 0606, 0666}) {
            try (SharingServer server = SharingServer.builder(sock).socketFileMode(mode).build()) {
                assertEquals(Integer.toOctalString(mode), Integer.toOctalString(permissionBits(sock)));
                try (SharingClient c = SharingClient.connect(sock)) {
                    assertEquals(Protocol.LATEST_VERSION, c.serverVersion()); // the default client speaks v2
                }
                assertFalse(server.isClosed());
            }
            assertFalse(Files.exists(sock));
        }
    }

    @Test
    void aPathTooLongForThePrivateDirectoryGetsTheModeToo() throws Exception {
        int room = FdSocket.MAX_PATH_BYTES - sock.getParent().toString().length() - 1;
        Path dir = Files.createDirectory(sock.getParent().resolve("d".repeat(room - 10)));
        Path longSock = dir.resolve("s.sock");
        try (SharingServer server = SharingServer.builder(longSock).socketFileMode(0660).build()) {
            assertEquals("660", Integer.toOctalString(permissionBits(longSock)));
            assertEquals(longSock, server.socketPath());
        }
    }

    @Test
    void aBadModeIsRejectedWithAClearMessage() {
        for (int bad : new int[] {0700, 0755, 0644, 0640, 0620, 0400, 01600, 04600, 0, 010000}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> SharingServer.builder(sock).socketFileMode(bad), "0" + Integer.toOctalString(bad));
            assertTrue(e.getMessage().startsWith("socketFileMode: 0" + Integer.toOctalString(bad) + " (expected: 0600, "
                    + "0660, 0606 or 0666"), e.getMessage());
        }
        // A negative mode reads as the number given, not as its 32-bit octal pattern (037777777777).
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> SharingServer.builder(sock).socketFileMode(-1));
        assertTrue(e.getMessage().startsWith("socketFileMode: -1 (expected: 0600, "), e.getMessage());
    }

    @Test
    void theFileGetsTheGroupAskedFor() throws Exception {
        String mine = Files.readAttributes(sock.getParent(), PosixFileAttributes.class).group().getName();
        try (SharingServer server = SharingServer.builder(sock).socketFileMode(0660).socketFileGroup(mine).build()) {
            PosixFileAttributes a = Files.readAttributes(sock, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
            assertEquals(mine, a.group().getName());
            assertEquals("rw-rw----", PosixFilePermissions.toString(a.permissions()));
            assertFalse(server.isClosed());
        }
        IOException e = assertThrows(IOException.class,
                () -> SharingServer.builder(sock).socketFileMode(0660).socketFileGroup("no-such-group-cvmm").build());
        assertTrue(e.getMessage().contains("socketFileGroup: no-such-group-cvmm (expected: an existing group name)"),
                e.getMessage());
        assertFalse(Files.exists(sock), "a failed bind leaves no file");
        // A group with a mode that gives it no access admits nobody: refused, not ignored.
        IllegalArgumentException g = assertThrows(IllegalArgumentException.class,
                () -> SharingServer.builder(sock).socketFileGroup(mine).build());
        assertEquals("socketFileGroup: '" + mine + "' with socketFileMode 0600 gives the group no access (expected: "
                + "socketFileMode 0660 or 0666 with a group)", g.getMessage());
        assertFalse(Files.exists(sock), "nothing bound");
    }

    /**
     * The two gates together: uid 65534 on the allow-list gets in only once the file's mode
     * lets it connect (root only: setpriv starts the other uid's JVM).
     */
    @Test
    void anotherAllowedUidConnectsWhenTheFileModeLetsIt() throws Exception {
        Assumptions.assumeTrue(NativeIo.posix().geteuid() == 0, "skipped: not root, cannot start a process of another uid");
        Assumptions.assumeTrue(CrossProcessTest.works("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "true"),
                "skipped: setpriv cannot switch to uid 65534 here");
        Path cpDir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-uid");
        File log = File.createTempFile("cuvmm-child", ".log");
        try {
            String cp = CrossProcessTest.readableClassPath(cpDir);
            Files.setPosixFilePermissions(sock.getParent(), PosixFilePermissions.fromString("rwx--x--x"));
            int me = NativeIo.posix().geteuid();
            try (SharingServer server = SharingServer.builder(sock).allowUids(me, 65534).build()) {
                String out = helloAsNobody(cp, cpDir, log);
                assertTrue(out.contains("IOERROR") && out.contains("Permission denied"), "0600 keeps it out:\n" + out);
                // The hint fits the refusal: the file's mode and group, not whether the server is up.
                assertTrue(out.contains("check the socket file's mode and group") && !out.contains("server is up"),
                        "0600 keeps it out:\n" + out);
                assertFalse(server.isClosed());
            }
            // alsoAllowUids: this process's uid stays on the list (what cuvmm serve --allow-uid uses).
            try (SharingServer server = SharingServer.builder(sock).alsoAllowUids(65534).socketFileMode(0666).build()) {
                assertEquals(new java.util.TreeSet<>(List.of(me, 65534)), server.allowedUids());
                String out = helloAsNobody(cp, cpDir, log);
                assertTrue(out.contains("ACCEPTED"), "allowed and the file open to it:\n" + out);
                assertFalse(server.isClosed());
            }
        } finally {
            log.delete();
            IpcTestSupport.deleteTree(cpDir);
        }
    }

    /** allowUids replaces the list; alsoAllowUids adds to it (to this process's uid by default); negatives are refused. */
    @Test
    void theAllowListIsReplacedOrAddedTo() throws Exception {
        int me = NativeIo.posix().geteuid();
        try (SharingServer server = SharingServer.builder(sock).alsoAllowUids(4242, 4243).build()) {
            assertEquals(new java.util.TreeSet<>(List.of(me, 4242, 4243)), server.allowedUids());
        }
        try (SharingServer server = SharingServer.builder(sock).alsoAllowUids(4242).allowUids(4243).alsoAllowUids(4244)
                .build()) {
            assertEquals(java.util.Set.of(4243, 4244), server.allowedUids(), "allowUids replaced the list, the euid too");
        }
        SharingServer.Builder b = SharingServer.builder(sock);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> b.alsoAllowUids(7, -1));
        assertEquals("alsoAllowUids: uid -1 (expected: uids >= 0)", e.getMessage());
        try (SharingServer server = b.build()) {
            assertEquals(java.util.Set.of(me), server.allowedUids(), "a refused call added nothing");
        }
    }

    private String helloAsNobody(String cp, Path cpDir, File log) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"));
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of("-Djava.io.tmpdir=" + cpDir, "-Duser.home=" + cpDir, "-cp", cp, ChildMain.class.getName(),
                "hello", sock.toString()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log).start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly().waitFor();
            throw new AssertionError("child did not finish in 60 s:\n" + IpcTestSupport.read(log));
        }
        String out = IpcTestSupport.read(log);
        assertEquals(0, p.exitValue(), out);
        return out;
    }
}
