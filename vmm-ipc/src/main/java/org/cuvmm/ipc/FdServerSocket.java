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
import java.nio.file.attribute.GroupPrincipal;
import java.nio.file.attribute.PosixFileAttributeView;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.nio.file.attribute.UserPrincipalNotFoundException;
import java.security.SecureRandom;
import java.util.Map;

import jnr.unixsocket.UnixServerSocketChannel;
import jnr.unixsocket.UnixSocketAddress;
import jnr.unixsocket.UnixSocketChannel;

/**
 * A listening Unix-domain socket whose file has mode {@code 0600} (or the mode the caller
 * chose, see {@link #checkFileMode(int)}), and optionally a chosen group.
 *
 * <p>The file mode is the first gate: Linux lets a process {@code connect} only if it may
 * write the socket file (and search its directory). A server that admits other users (by
 * uid, checked afterwards with {@code SO_PEERCRED}) must therefore also open the file to
 * them: mode {@code 0660} with a group they are in, or {@code 0666}.
 *
 * <p>Binding never exposes the socket with a wider mode than the one asked for: it is bound
 * inside a fresh private directory (mode {@code 0700}) next to the target, given its group
 * and mode, then hard-linked to the target path (which fails, rather than replacing, if a
 * file appeared there meanwhile) and the private directory removed. Only if the private path
 * would be too long for a socket address is the process umask set to {@code 0177} around
 * {@code bind} instead (the file is then widened to the mode asked for). The umask is
 * process-wide: while it is set (the length of one {@code bind}), files any other thread of
 * the process creates get at most mode {@code 0600}; cuvmm's own binds are serialized by a
 * lock, other code is not. The mode and group are verified afterwards.
 *
 * <p>An existing socket file is replaced only when nothing answers on it (a dead server's
 * leftover: {@code connect} fails with errno {@code ECONNREFUSED}); a live server's socket is
 * never touched (nor one whose backlog is full: {@code EAGAIN}), nor is a file that is not a
 * socket, nor one whose state cannot be told (any other errno). The probe is a real
 * {@code connect}: a live server there sees one connection that ends before it sends a byte
 * (a {@link SharingServer} ends it as it ends any client that leaves before {@code HELLO}).
 *
 * <p>The listen backlog (connections the kernel queues before {@code accept}) defaults to
 * {@value #DEFAULT_BACKLOG}; the kernel caps it at {@code net.core.somaxconn}. A client whose
 * non-blocking {@code connect} finds the backlog full gets {@code EAGAIN}.
 */
public final class FdServerSocket implements Closeable {
    /** Default listen backlog: Linux's {@code SOMAXCONN} since 5.4 (the kernel caps it at net.core.somaxconn). */
    public static final int DEFAULT_BACKLOG = 4096;
    /** Default mode of the socket file: only its owner can connect. */
    public static final int DEFAULT_FILE_MODE = 0600;
    private static final int S_IFMT = 0170000;
    private static final int S_IFSOCK = 0140000;
    private static final Object UMASK_LOCK = new Object();
    /**
     * The private directories' names: made by {@link NativeIo#load} (after the first-use
     * check), not as this class initializes. A {@code SecureRandom} made at the fd limit broke
     * the JDK's security providers for the JVM (a review: {@code FdServerSocket.bind} can be a
     * process's first call), and its first draw opens {@code /dev/urandom}.
     */
    static final class Names {
        static final SecureRandom RANDOM = new SecureRandom();

        static {
            RANDOM.nextInt(); // the seed source opened now, while fds are free
        }

        private Names() {}
    }
    /** What to do after a refusal by the file system (a bind's messages end with one). */
    private static final String WRITE_HINT = " (expected: a directory this process may write to; choose another "
            + "path, or run as a user who may)";
    private static final String SEARCH_HINT = " (expected: a path whose directories this process may search; "
            + "choose another path, or run as a user who may)";

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
     * Binds and listens at {@code path} with file mode {@code 0600}, the file's group
     * unchanged and the default backlog.
     *
     * @throws IllegalArgumentException when the path is too long for a socket address
     * @throws IOException when a live server answers at {@code path}, the path exists and is
     *     not a socket, its directory does not exist or is not a directory, this process may
     *     not create a file there ("Permission denied"), or binding fails (each message names
     *     the path, says which and what to do); also as {@link FdSocket#connect} for the
     *     first socket of this JVM at the open-file limit
     */
    public static FdServerSocket bind(Path path) throws IOException {
        return bind(path, DEFAULT_FILE_MODE, null, DEFAULT_BACKLOG);
    }

    /**
     * Binds and listens at {@code path}; the socket file gets {@code fileMode} (checked by
     * {@link #checkFileMode(int)}) and, when {@code group} is not null, that group (the
     * process must be allowed to chown to it: a member of it, or root).
     *
     * @param backlog connections the kernel queues before they are accepted (at least 1)
     * @throws IllegalArgumentException for a path too long for a socket address, a bad mode
     *     or a backlog below 1
     * @throws IOException as {@link #bind(Path)}, and for a group that does not exist or that
     *     the file cannot be given (the message names it)
     */
    public static FdServerSocket bind(Path path, int fileMode, String group, int backlog) throws IOException {
        checkFileMode(fileMode);
        checkBacklog(backlog);
        Path target = FdSocket.checkPath(path).toAbsolutePath().normalize();
        FdSocket.checkPath(target);
        NativeIo.load();
        Path dir = target.getParent();
        java.nio.file.attribute.BasicFileAttributes dirAttributes;
        try {
            // Not Files.exists: it answers false for a directory it may not look at (a review).
            dirAttributes = dir == null ? null : Files.readAttributes(dir,
                    java.nio.file.attribute.BasicFileAttributes.class);
        } catch (NoSuchFileException e) {
            dirAttributes = null;
        } catch (java.nio.file.FileSystemException e) {
            throw explained(target, "cannot look at " + dir, e, hintFor(e, SEARCH_HINT));
        }
        if (dirAttributes == null) {
            throw new IOException("cannot bind " + target + ": directory " + dir + " does not exist (create it first, "
                    + "or choose another path)");
        }
        if (!dirAttributes.isDirectory()) {
            throw new IOException("cannot bind " + target + ": " + dir + " is not a directory (choose another path)");
        }
        removeStale(target);
        UnixServerSocketChannel ch;
        try {
            ch = UnixServerSocketChannel.open();
        } catch (IOException e) {
            throw NativeIo.explainedFdShortage("cannot bind " + target + ": no socket could be made", e);
        }
        try {
            Path privateDir = dir.resolve(String.format(".cuvmm-%08x", Names.RANDOM.nextInt()));
            Path privatePath = privateDir.resolve("s");
            if (privatePath.toString().getBytes(StandardCharsets.UTF_8).length <= FdSocket.MAX_PATH_BYTES) {
                bindViaPrivateDirectory(ch, privateDir, privatePath, target, fileMode, group, backlog);
            } else {
                bindWithUmask(ch, target, fileMode, group, backlog);
            }
            Object inode = verifyMode(target, fileMode, group);
            return new FdServerSocket(ch, target, inode);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /**
     * Checks a socket file mode: the owner's read and write bits ({@code 0600}) plus, for the
     * group and for others, nothing or read and write ({@code 0660}, {@code 0606}, {@code 0666}:
     * {@code connect} needs write permission, and half a permission is a mistake). No execute,
     * setuid, setgid or sticky bits.
     *
     * @throws IllegalArgumentException naming the mode (in octal) and what is expected
     */
    public static int checkFileMode(int mode) {
        int group = (mode >> 3) & 7;
        int other = mode & 7;
        if ((mode & ~0777) != 0 || (mode & 0700) != 0600 || (group != 0 && group != 6) || (other != 0 && other != 6)) {
            // A negative mode in decimal: its octal form is its 32-bit pattern (037777777777 for -1).
            throw new IllegalArgumentException("socketFileMode: " + (mode < 0 ? Integer.toString(mode)
                    : "0" + Integer.toOctalString(mode)) + " (expected: 0600, "
                    + "0660, 0606 or 0666: the owner reads and writes; the group and others may be given read and "
                    + "write, which connect needs, or nothing; no execute, setuid, setgid or sticky bits)");
        }
        return mode;
    }

    /** Checks a listen backlog (at least 1; the kernel caps it at net.core.somaxconn). */
    public static int checkBacklog(int backlog) {
        if (backlog < 1) {
            throw new IllegalArgumentException("backlog: " + backlog + " (expected: at least 1; default "
                    + DEFAULT_BACKLOG + ", capped by the kernel at net.core.somaxconn)");
        }
        return backlog;
    }

    private static void bindViaPrivateDirectory(UnixServerSocketChannel ch, Path privateDir, Path privatePath,
                                                Path target, int fileMode, String group, int backlog)
            throws IOException {
        try {
            Files.createDirectory(privateDir, PosixFilePermissions.asFileAttribute(
                    PosixFilePermissions.fromString("rwx------")));
        } catch (java.nio.file.FileSystemException e) {
            // The message named only the private directory (an independent probe: "cuvmm serve:
            // /tmp/ro/.cuvmm-fde00ad6" for a directory this user cannot write).
            throw explained(target, "cannot create a file in " + target.getParent() + " (its private directory "
                    + privateDir.getFileName() + ")", e, hintFor(e, WRITE_HINT));
        }
        try {
            ch.socket().bind(new UnixSocketAddress(privatePath.toFile()), backlog);
            Files.setPosixFilePermissions(privatePath, PosixFilePermissions.fromString("rw-------"));
            setGroup(privatePath, group);
            Files.setPosixFilePermissions(privatePath, permissions(fileMode));
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
            // Ours already names the path (it said "cannot bind X: cannot bind X: ..." before).
            if (e.getMessage() != null && e.getMessage().startsWith("cannot bind " + target + ": ")) throw e;
            throw new IOException("cannot bind " + target + ": " + e.getMessage(), e);
        } finally {
            Files.deleteIfExists(privatePath);
            Files.deleteIfExists(privateDir);
        }
    }

    private static void bindWithUmask(UnixServerSocketChannel ch, Path target, int fileMode, String group,
                                      int backlog) throws IOException {
        synchronized (UMASK_LOCK) {
            int old = NativeIo.posix().umask(0177);
            try {
                ch.socket().bind(new UnixSocketAddress(target.toFile()), backlog);
            } catch (IOException e) {
                // The hint by access(2), not by the words of the message (strerror may be localized).
                throw new IOException("cannot bind " + target + ": " + e.getMessage()
                        + (Files.isWritable(target.getParent()) ? "" : WRITE_HINT), e);
            } finally {
                NativeIo.posix().umask(old);
            }
        }
        try {
            Files.setPosixFilePermissions(target, PosixFilePermissions.fromString("rw-------"));
            setGroup(target, group);
            Files.setPosixFilePermissions(target, permissions(fileMode));
        } catch (IOException e) {
            Files.deleteIfExists(target);
            throw new IOException("cannot bind " + target + ": " + e.getMessage(), e);
        }
    }

    private static java.util.Set<PosixFilePermission> permissions(int mode) {
        java.util.Set<PosixFilePermission> s = java.util.EnumSet.noneOf(PosixFilePermission.class);
        PosixFilePermission[] bits = PosixFilePermission.values(); // OWNER_READ .. OTHERS_EXECUTE, 0400 .. 0001
        for (int i = 0; i < bits.length; i++) {
            if ((mode & (0400 >> i)) != 0) s.add(bits[i]);
        }
        return s;
    }

    private static void setGroup(Path file, String group) throws IOException {
        if (group == null) return;
        GroupPrincipal g;
        try {
            g = file.getFileSystem().getUserPrincipalLookupService().lookupPrincipalByGroupName(group);
        } catch (UserPrincipalNotFoundException e) {
            throw new IOException("socketFileGroup: " + group + " (expected: an existing group name)", e);
        }
        try {
            Files.getFileAttributeView(file, PosixFileAttributeView.class, LinkOption.NOFOLLOW_LINKS).setGroup(g);
        } catch (IOException e) {
            throw new IOException("socketFileGroup: cannot give the socket file group " + group + " (" + e
                    + "; expected: a group this process is a member of)", e);
        }
    }

    private static Object verifyMode(Path target, int fileMode, String group) throws IOException {
        Map<String, Object> a = Files.readAttributes(target, "unix:mode,ino,dev,gid", LinkOption.NOFOLLOW_LINKS);
        int mode = (Integer) a.get("mode");
        if ((mode & S_IFMT) != S_IFSOCK || (mode & 07777) != fileMode) {
            Files.deleteIfExists(target);
            throw new IOException("socket " + target + " has mode " + Integer.toOctalString(mode)
                    + " after binding (expected: a socket with mode " + Integer.toOctalString(fileMode) + "); removed it");
        }
        if (group != null) {
            GroupPrincipal got = Files.readAttributes(target, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS).group();
            if (!got.getName().equals(group)) {
                Files.deleteIfExists(target);
                throw new IOException("socket " + target + " has group " + got.getName() + " after binding (expected: "
                        + group + "); removed it");
            }
        }
        return a.get("dev") + ":" + a.get("ino");
    }

    /**
     * A file-system failure while binding {@code target}, said in words: what was being done,
     * the reason ("Permission denied" rather than a bare path, which is all an
     * AccessDeniedException's message holds) and {@code hint} (what to do).
     */
    private static IOException explained(Path target, String what, java.nio.file.FileSystemException e, String hint) {
        String reason = e.getReason() != null ? e.getReason()
                : e instanceof java.nio.file.AccessDeniedException ? "Permission denied"
                : e instanceof NoSuchFileException ? "No such file or directory"
                : e.getClass().getSimpleName();
        return new IOException("cannot bind " + target + ": " + what + ": " + reason + hint, e);
    }

    /** {@code permissionHint} for a refusal by permission (the exception's type, not its words), else another path. */
    private static String hintFor(java.nio.file.FileSystemException e, String permissionHint) {
        return e instanceof java.nio.file.AccessDeniedException ? permissionHint : " (choose another path)";
    }

    /** Unlinks a dead server's socket at {@code target}; refuses a live one or a non-socket. */
    private static void removeStale(Path target) throws IOException {
        Map<String, Object> a;
        try {
            a = Files.readAttributes(target, "unix:mode", LinkOption.NOFOLLOW_LINKS);
        } catch (NoSuchFileException e) {
            return;
        } catch (java.nio.file.FileSystemException e) {
            throw explained(target, "cannot look at " + target, e, hintFor(e, SEARCH_HINT));
        }
        int mode = (Integer) a.get("mode");
        if ((mode & S_IFMT) != S_IFSOCK) {
            throw new IOException("cannot bind " + target + ": it exists and is not a socket; not replacing it "
                    + "(remove it, or choose another path)");
        }
        // Decided by connect's errno, never by the words of a (possibly localized) message.
        int errno = SocketProbe.connectErrno(target);
        if (errno == SocketProbe.ECONNREFUSED) {
            try {
                Files.deleteIfExists(target);
            } catch (java.nio.file.FileSystemException e) {
                throw explained(target, "cannot remove the dead server's socket there", e, " (remove it as its owner "
                        + "or as root, or choose another path)");
            }
            return;
        }
        if (errno == SocketProbe.ENOENT) return;
        if (errno == 0 || errno == SocketProbe.EAGAIN) {
            throw new IOException("cannot bind " + target + ": a live server is listening there; stop it first or "
                    + "choose another path");
        }
        throw new IOException("cannot bind " + target + ": cannot tell whether a server listens there (connect: "
                + NativeIo.strerror(errno) + "); not replacing it");
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
    /** The socket file's path, as bound. */
    public Path path() { return path; }

    /** False once {@link #close()} has begun. */
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
