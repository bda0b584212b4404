package org.cuvmm.cli;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.CudaException;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.ConnectionLimits;
import org.cuvmm.ipc.FdServerSocket;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.ipc.Protocol;
import org.cuvmm.ipc.SharingServer;

/**
 * {@code cuvmm serve --socket PATH --name NAME --size BYTES [--seed N] [limits]}: allocates a
 * buffer, fills it with the documented pattern (docs/PROTOCOL.md) and serves it until
 * interrupted, printing each attach and release with the lease count at that moment.
 *
 * <p>Stopped by SIGTERM or Ctrl-C (SIGINT), it closes the server before the JVM exits: the
 * shutdown hook wakes the serving thread, which withdraws the buffer (each lease holder gets
 * a DROP, which the server's close sends before it ends the connection) and closes the
 * server; when that has not happened within 5 s (the thread still
 * filling a large buffer, which looks for the stop every 64 MiB, or not yet serving), the
 * hook closes the server itself. Either
 * way it waits (at most 30 s more) until serving has finished. The exit status is then the
 * signal's, 130 (SIGINT) or 143 (SIGTERM), as for any JVM a signal stops: the status this
 * command returns is not used, since {@code System.exit} cannot change it once the shutdown
 * has begun (only {@code Runtime.halt} could, skipping the other hooks). The help says so.
 */
final class ServeCommand implements Command {
    private static final Set<String> OPTIONS = Set.of("socket", "name", "size", "seed", "socket-mode", "socket-group",
            "backlog", "max-connections", "max-leases", "max-ids", "max-protocol", "handshake-timeout", "idle-timeout",
            "allow-uid");
    private static final Set<String> SWITCHES = Set.of("jmx");
    /** How long the shutdown hook waits for serving to finish (the server's own close takes at most about 10 s). */
    private static final long STOP_WAIT_SECONDS = 30;
    /** How long a stop waits for the serving thread's own orderly close before closing the server itself. */
    private static final long HANDOVER_SECONDS = 5;

    /** The pattern fill's step: a stop is looked for between steps (about 50-100 ms each on this machine). */
    static final long FILL_STEP = 64L << 20;
    /** {@link #serveUntilStopped}'s result after a stop: not an exit status ("stopped" is printed, then {@link #OK}). */
    private static final int STOPPED = -1;
    /** --jmx: the server's bean is registered (build() fails otherwise) and its name printed. */
    private boolean jmx;
    /** Released by tests (and by the shutdown hook) to stop serving. */
    private final CountDownLatch stop;

    ServeCommand() { this(new CountDownLatch(1)); }

    ServeCommand(CountDownLatch stop) { this.stop = stop; }

    @Override
    public String name() { return "serve"; }

    @Override
    public String summary() {
        return "serve a patterned buffer to other processes: --socket PATH --name NAME --size BYTES [--seed N] "
                + "[--socket-mode 0600] [--socket-group NAME] [--backlog N] [--max-connections N] [--max-leases N] "
                + "[--max-ids N] [--max-protocol 1|2] [--handshake-timeout S] [--idle-timeout S] [--allow-uid UID[,UID...]] "
                + "[--jmx]; --allow-uid admits those users besides this one (open the file to them too: --socket-mode); "
                + "--jmx registers the server's MXBean; serves until Ctrl-C "
                + "or SIGTERM, then removes its socket file and exits 130 or 143 (the signal's status)";
    }

    /**
     * --max-protocol: the newest protocol version served (1 or 2; default the newest): 1 makes
     * every client speak version 1 (docs/PROTOCOL.md section 13.1).
     */
    private static int protocolVersion(Arguments a) {
        int v = a.intValue("max-protocol", Protocol.LATEST_VERSION, 1);
        if (v > Protocol.LATEST_VERSION) {
            throw new IllegalArgumentException("--max-protocol: " + v + " (expected: " + Protocol.VERSION + " to "
                    + Protocol.LATEST_VERSION + ")");
        }
        return v;
    }

    /**
     * {@code check}'s value; its IllegalArgumentException comes back naming the option typed,
     * {@code --option}, instead of the builder method ({@code builderMethod: } is dropped from
     * the front of the message: "--socket-mode: socketFileMode: 0640" named both).
     */
    private static <T> T asOption(String option, String builderMethod, java.util.function.Supplier<T> check) {
        try {
            return check.get();
        } catch (IllegalArgumentException e) {
            String why = e.getMessage();
            if (why.startsWith(builderMethod + ": ")) why = why.substring(builderMethod.length() + 2);
            throw new IllegalArgumentException("--" + option + ": " + why, e);
        }
    }

    /**
     * --allow-uid: "1001" or "1001,1002", each a uid >= 0 (the server admits them besides its
     * own user: {@link SharingServer.Builder#alsoAllowUids}).
     */
    static int[] uidList(String v) {
        String[] parts = v.split(",", -1);
        int[] uids = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            try {
                uids[i] = Integer.parseInt(parts[i].trim());
                if (uids[i] < 0) throw new NumberFormatException();
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("--allow-uid: " + v + " (expected: uids >= 0 separated by commas, "
                        + "such as 1001 or 1001,1002; `id -u NAME` prints a user's uid)");
            }
        }
        return uids;
    }

    /** {@code mode}, refused up front (a usage error) when {@code group} is set and the mode gives it no access. */
    private static int checkedMode(int mode, String group) {
        if (group != null && (mode & 0060) == 0) {
            throw new IllegalArgumentException(String.format("0%o", mode) + " with --socket-group " + group
                    + " gives the group no access (expected: --socket-mode 0660 or 0666 with a group)");
        }
        return mode;
    }

    /**
     * {@code group}, refused up front (a usage error) when the system says no such group
     * exists. A lookup that fails otherwise (a name service down, no lookup service) decides
     * nothing here: the server's bind looks the group up again and reports what it meets.
     */
    private static String existingGroup(String group) {
        try {
            java.nio.file.FileSystems.getDefault().getUserPrincipalLookupService().lookupPrincipalByGroupName(group);
        } catch (java.nio.file.attribute.UserPrincipalNotFoundException e) {
            throw new IllegalArgumentException("'" + group + "' (expected: an existing group name; `getent group` "
                    + "lists them)", e);
        } catch (java.io.IOException | UnsupportedOperationException undecided) {
            // left to the bind (see above)
        }
        return group;
    }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        Arguments a;
        long size;
        long seed;
        String name;
        Path socket;
        SharingServer.Builder builder;
        try {
            a = Arguments.parse(args, OPTIONS, SWITCHES);
            size = a.bytes("size");
            seed = a.longValue("seed", 1);
            name = a.bufferName("name");
            socket = a.socketPathToBind("socket");
            int mode = a.octalMode("socket-mode", FdServerSocket.DEFAULT_FILE_MODE);
            String group = a.optional("socket-group");
            SharingServer.Builder b = SharingServer.builder(socket);
            builder = asOption("socket-mode", "socketFileMode", () -> b.socketFileMode(checkedMode(mode, group)))
                    .backlog(a.intValue("backlog", FdServerSocket.DEFAULT_BACKLOG, 1))
                    .maxConnections(a.intValue("max-connections", ConnectionLimits.DEFAULT_MAX_CONNECTIONS, 1))
                    .maxLeasesPerConnection(a.intValue("max-leases", ConnectionLimits.DEFAULT_MAX_LEASES, 1))
                    .maxIdsPerConnection(a.intValue("max-ids", SharingServer.DEFAULT_MAX_IDS_PER_CONNECTION, 1))
                    .maxProtocolVersion(protocolVersion(a))
                    .handshakeTimeout(a.seconds("handshake-timeout", ConnectionLimits.DEFAULT_HANDSHAKE_TIMEOUT))
                    .idleTimeout(a.seconds("idle-timeout", ConnectionLimits.DEFAULT_IDLE_TIMEOUT));
            if (group != null) {
                builder.socketFileGroup(asOption("socket-group", "socketFileGroup", () -> existingGroup(group)));
            }
            String uids = a.optional("allow-uid");
            if (uids != null) builder.alsoAllowUids(uidList(uids));
            jmx = a.has("jmx");
            builder.registerMBean(jmx); // without it the platform MBean server is never touched
        } catch (IllegalArgumentException e) {
            err.println("cuvmm serve: " + e.getMessage());
            return USAGE;
        }
        // Counted down once the server is closed (socket file removed): the shutdown hook waits for it.
        CountDownLatch closed = new CountDownLatch(1);
        // The server, once built. On a stop the serving thread withdraws the buffer (each client
        // holding a lease gets its DROP) and closes the server; the hook gives it HANDOVER_SECONDS
        // for that, then closes the server itself (close is idempotent), so the socket file goes
        // even when the serving thread is slow or not yet serving (filling a large buffer). A hook
        // that closed at once could win the race with the withdrawal: clients then read the end
        // of the stream with no DROP (seen once by an independent client; ServeStopTest). That
        // the DROP queued by the withdrawal goes out before the close ends the connection is
        // SharingServer.close()'s part (it lets each sender thread send what is queued first).
        AtomicReference<SharingServer> running = new AtomicReference<>();
        Thread hook = new Thread(() -> {
            stop.countDown();
            try {
                if (!closed.await(HANDOVER_SECONDS, TimeUnit.SECONDS)) {
                    SharingServer s = running.get();
                    if (s != null) s.close();
                    closed.await(STOP_WAIT_SECONDS, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "cuvmm-serve-stop");
        Runtime.getRuntime().addShutdownHook(hook);
        try {
            return serve(builder, name, size, seed, socket, out, err, running);
        } finally {
            closed.countDown();
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException shuttingDown) {
                // the hook is what stopped us; it is waiting for 'closed'
            }
        }
    }

    /**
     * Serves until stopped; prints "stopped" only once the server is closed and its socket
     * file removed (the try-with-resources of {@link #serveUntilStopped} closes it before
     * returning), so a script that sees the line never finds the socket file still there.
     */
    private int serve(SharingServer.Builder builder, String name, long size, long seed, Path socket, PrintStream out,
                      PrintStream err, AtomicReference<SharingServer> running) {
        int status = serveUntilStopped(builder, name, size, seed, socket, out, err, running);
        return status == STOPPED ? stopped(out) : status;
    }

    /** {@link #serve}'s work: {@link #STOPPED} after a stop (nothing printed for it yet), else an exit status. */
    private int serveUntilStopped(SharingServer.Builder builder, String name, long size, long seed, Path socket,
                                  PrintStream out, PrintStream err, AtomicReference<SharingServer> running) {
        try (LeasePrinter printer = new LeasePrinter(out);
             VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer buffer = allocate(resource, size);
             SharingServer server = builder.listener(printer).build()) {
            printer.countFrom(server::totalLeaseCount);
            // Published before the stop check: a hook that ran before this sees the stop, one
            // that runs after sees the server (one of the two closes it).
            running.set(server);
            // Filled a step at a time, looking for a stop between steps: a stop during the fill of
            // a large buffer ends it within one step (it used to run to the end, about 36 s for 8G
            // here, with nothing printed: an independent probe).
            for (long at = 0; at < buffer.size(); at += FILL_STEP) {
                if (stop.getCount() == 0) return STOPPED;
                BytePattern.fill(buffer, at, Math.min(FILL_STEP, buffer.size() - at), seed);
            }
            if (stop.getCount() == 0) return STOPPED;
            try {
                server.publish(name, buffer);
            } catch (IllegalStateException e) {
                if (server.isClosed() && stop.getCount() == 0) return STOPPED; // the hook closed it
                throw e;
            }
            out.println("serving '" + name + "' (" + ByteSize.format(size) + ", " + buffer.chunkCount()
                    + " chunk(s), pattern seed " + seed + ") on " + socket + " with the " + resource.driver().kind()
                    + " driver to uids " + server.allowedUids() + (jmx ? "; JMX bean "
                    + server.objectName() : "") + "; Ctrl-C to stop");
            out.flush();
            stop.await();
            server.unpublish(name);
        } catch (SizeBeyondMemory e) {
            err.println("cuvmm serve: " + e.getMessage());
            return USAGE;
        } catch (IOException | CudaException | IllegalArgumentException | IllegalStateException e) {
            err.println("cuvmm serve: " + e.getMessage());
            return FAILED;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return FAILED;
        }
        return STOPPED;
    }

    /**
     * The served buffer: every byte is filled with the pattern, so it must fit in the device's
     * memory (on the host driver, this machine's): a larger --size is refused before any
     * driver call, as a usage error (exit 2), and a driver refusal names --size too (exit 1).
     */
    private static VirtualMemoryBuffer allocate(VirtualMemoryResource resource, long size) {
        long total = resource.driver().device(resource.device()).totalMemory();
        if (total > 0 && size > total) {
            throw new SizeBeyondMemory("--size: " + size + " bytes (expected: at most the device's memory, "
                    + total + " bytes: every byte is filled with the pattern)");
        }
        try {
            return resource.allocate(size);
        } catch (CudaException e) {
            throw new IllegalStateException("--size: " + size + " bytes: the allocation failed: " + e.getMessage(), e);
        }
    }

    /** A --size the device cannot hold: a usage error (exit 2), found only once the device is known. */
    private static final class SizeBeyondMemory extends IllegalArgumentException {
        SizeBeyondMemory(String message) {
            super(message);
        }
    }

    private static int stopped(PrintStream out) {
        out.println("stopped");
        out.flush();
        return OK;
    }
}
