package org.cuvmm.ipc;

import java.io.Closeable;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.Map;

import jnr.unixsocket.UnixServerSocketChannel;
import jnr.unixsocket.UnixSocketAddress;
import jnr.unixsocket.UnixSocketChannel;

/**
 * A listening Unix-domain socket whose file has mode {@code 0600}.
 *
 * <p>Binding never exposes the socket with a wider mode: it is bound inside a fresh
 * private directory (mode {@code 0700}) next to the target, chmodded to {@code 0600}, then
 * hard-linked to the target path (which fails, rather than replacing, if a file appeared
 * there meanwhile) and the private directory removed. Only if the private path would be too
 * long for a socket address is the process umask set to {@code 0177} around {@code bind}
 * instead. The mode is verified afterwards.
 *
 * <p>An existing socket file is replaced only when nothing answers on it (a dead server's
 * leftover: {@code connect} is refused); a live server's socket is never touched, nor is a
 * file that is not a socket.
 */
public final class FdServerSocket implements Closeable {
    private static final int BACKLOG = 64;
    private static final int S_IFMT = 0170000;
    private static final int S_IFSOCK = 0140000;
    private static final Object UMASK_LOCK = new Object();
    private static final SecureRandom RANDOM = new SecureRandom();

    private final UnixServerSocketChannel channel;
    private final Path path;
    private final Object inode;
    private final FdGuard guard;

    private FdServerSocket(UnixServerSocketChannel channel, Path path, Object inode) {
        this.channel = channel;
        this.path = path;
        this.inode = inode;
        int fd = channel.getFD();
        // shutdown() wakes a thread blocked in accept() (it returns EINVAL); close() does not.
        this.guard = new FdGuard(() -> jnr.enxio.channels.Native.shutdown(fd, NativeIo.SHUT_RDWR),
                () -> NativeIo.closeQuietly(fd));
    }

    /**
     * Binds and listens at {@code path} with file mode {@code 0600}.
     *
     * @throws IllegalArgumentException when the path is too long for a socket address
     * @throws IOException when a live server answers at {@code path}, the path exists and is
     *     not a socket, its directory does not exist, or binding fails (each message says which)
     */
    public static FdServerSocket bind(Path path) throws IOException {
        Path target = FdSocket.checkPath(path).toAbsolutePath().normalize();
        FdSocket.checkPath(target);
        NativeIo.posix();
        Path dir = target.getParent();
        if (dir == null || !Files.isDirectory(dir)) {
            throw new IOException("cannot bind " + target + ": directory " + dir + " does not exist");
        }
        removeStale(target);
        UnixServerSocketChannel ch = UnixServerSocketChannel.open();
        try {
            Path privateDir = dir.resolve(String.format(".cuvmm-%08x", RANDOM.nextInt()));
            Path privatePath = privateDir.resolve("s");
            if (privatePath.toString().getBytes(StandardCharsets.UTF_8).length <= FdSocket.MAX_PATH_BYTES) {
                bindViaPrivateDirectory(ch, privateDir, privatePath, target);
            } else {
                bindWithUmask(ch, target);
            }
            Object inode = verifyMode(target);
            return new FdServerSocket(ch, target, inode);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    private static void bindViaPrivateDirectory(UnixServerSocketChannel ch, Path privateDir, Path privatePath,
                                                Path target) throws IOException {
        Files.createDirectory(privateDir, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
        try {
            ch.socket().bind(new UnixSocketAddress(privatePath.toFile()), BACKLOG);
            Files.setPosixFilePermissions(privatePath, PosixFilePermissions.fromString("rw-------"));
            try {
                Files.createLink(target, privatePath);
            } catch (FileAlreadyExistsException e) {
                throw new IOException("cannot bind " + target + ": a file appeared there while binding (another server "
                        + "starting?); not replacing it", e);
            } catch (UnsupportedOperationException | IOException e) {
                // No hard links on this file system: an atomic rename (replaces a file that
                // appeared in the last microseconds; the stale check just ran).
                Files.move(privatePath, target, StandardCopyOption.ATOMIC_MOVE);
            }
        } catch (IOException e) {
            throw new IOException("cannot bind " + target + ": " + e.getMessage(), e);
        } finally {
            Files.deleteIfExists(privatePath);
            Files.deleteIfExists(privateDir);
        }
    }

    private static void bindWithUmask(UnixServerSocketChannel ch, Path target) throws IOException {
        synchronized (UMASK_LOCK) {
            int old = NativeIo.posix().umask(0177);
            try {
                ch.socket().bind(new UnixSocketAddress(target.toFile()), BACKLOG);
            } catch (IOException e) {
                throw new IOException("cannot bind " + target + ": " + e.getMessage(), e);
            } finally {
                NativeIo.posix().umask(old);
            }
        }
        Files.setPosixFilePermissions(target, PosixFilePermissions.fromString("rw-------"));
    }

    private static Object verifyMode(Path target) throws IOException {
        Map<String, Object> a = Files.readAttributes(target, "unix:mode,ino,dev", LinkOption.NOFOLLOW_LINKS);
        int mode = (Integer) a.get("mode");
        if ((mode & S_IFMT) != S_IFSOCK || (mode & 07777) != 0600) {
            Files.deleteIfExists(target);
            throw new IOException("socket " + target + " has mode " + Integer.toOctalString(mode)
                    + " after binding (expected: a socket with mode 600); removed it");
        }
        return a.get("dev") + ":" + a.get("ino");
    }

    /** Unlinks a dead server's socket at {@code target}; refuses a live one or a non-socket. */
    private static void removeStale(Path target) throws IOException {
        Map<String, Object> a;
        try {
            a = Files.readAttributes(target, "unix:mode", LinkOption.NOFOLLOW_LINKS);
        } catch (NoSuchFileException e) {
            return;
        }
        int mode = (Integer) a.get("mode");
        if ((mode & S_IFMT) != S_IFSOCK) {
            throw new IOException("cannot bind " + target + ": it exists and is not a socket; not replacing it "
                    + "(remove it, or choose another path)");
        }
        UnixSocketChannel probe = UnixSocketChannel.open();
        try {
            probe.connect(new UnixSocketAddress(target.toFile()));
        } catch (IOException e) {
            String why = String.valueOf(e.getMessage()).toLowerCase(java.util.Locale.ROOT);
            if (why.contains("refused")) {
                Files.deleteIfExists(target);
                return;
            }
            if (why.contains("no such file")) return;
            throw new IOException("cannot bind " + target + ": cannot tell whether a server listens there ("
                    + e.getMessage() + "); not replacing it", e);
        } finally {
            probe.close();
        }
        throw new IOException("cannot bind " + target + ": a live server is listening there; stop it first or "
                + "choose another path");
    }

    /**
     * Waits for a connection.
     *
     * @throws ClosedChannelException when this socket is (or gets) closed
     */
    public FdSocket accept() throws IOException {
        if (!guard.enter()) throw new ClosedChannelException();
        try {
            UnixSocketChannel c;
            try {
                c = channel.accept();
            } catch (IOException e) {
                if (guard.isClosed()) throw new ClosedChannelException();
                throw e;
            } catch (RuntimeException e) {
                // jnr reports accept's EINVAL (a shut-down socket) as NotYetBoundException.
                if (guard.isClosed()) throw new ClosedChannelException();
                throw new IOException("accept on " + path + " failed: " + e, e);
            }
            if (c == null) {
                if (guard.isClosed()) throw new ClosedChannelException();
                throw new IOException("accept returned no connection");
            }
            if (guard.isClosed()) {
                c.close();
                throw new ClosedChannelException();
            }
            return new FdSocket(c);
        } finally {
            guard.exit();
        }
    }

    /** The socket file's absolute path. */
    public Path path() { return path; }

    public boolean isOpen() { return !guard.isClosed(); }

    /**
     * Stops listening (a thread blocked in {@link #accept()} wakes) and deletes the socket
     * file if it is still the one this socket created. Idempotent.
     */
    @Override
    public void close() {
        if (guard.isClosed()) return;
        guard.close();
        try {
            Map<String, Object> a = Files.readAttributes(path, "unix:ino,dev", LinkOption.NOFOLLOW_LINKS);
            if (inode.equals(a.get("dev") + ":" + a.get("ino"))) Files.deleteIfExists(path);
        } catch (IOException ignored) {
            // already gone, or not ours any more
        }
    }

    @Override
    public String toString() { return "FdServerSocket[" + path + (guard.isClosed() ? ", closed" : "") + "]"; }
}
