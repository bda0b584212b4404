package org.cuvmm.cli;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;

import org.cuvmm.CudaException;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.LeaseEvent;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.ipc.SharingListener;
import org.cuvmm.ipc.SharingServer;

/**
 * {@code cuvmm serve --socket PATH --name NAME --size BYTES [--seed N]}: allocates a buffer,
 * fills it with the documented pattern (docs/PROTOCOL.md) and serves it until interrupted,
 * printing each attach and release.
 */
final class ServeCommand implements Command {
    /** Released by tests (and by the shutdown hook) to stop serving. */
    private final CountDownLatch stop;

    ServeCommand() { this(new CountDownLatch(1)); }

    ServeCommand(CountDownLatch stop) { this.stop = stop; }

    @Override
    public String name() { return "serve"; }

    @Override
    public String summary() {
        return "serve a patterned buffer to other processes: --socket PATH --name NAME --size BYTES [--seed N]";
    }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        Arguments a;
        long size;
        try {
            a = Arguments.parse(args, Set.of("socket", "name", "size", "seed"), Set.of());
            size = a.bytes("size");
            a.required("socket");
            a.required("name");
        } catch (IllegalArgumentException e) {
            err.println("cuvmm serve: " + e.getMessage());
            return USAGE;
        }
        long seed = a.longValue("seed", 1);
        String name = a.required("name");
        Path socket = Path.of(a.required("socket"));
        SharingListener printer = new SharingListener() {
            @Override
            public void attached(LeaseEvent e) { out.println("attach  " + e); out.flush(); }

            @Override
            public void released(LeaseEvent e) { out.println("release " + e); out.flush(); }
        };
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer buffer = resource.allocate(size);
             SharingServer server = SharingServer.builder(socket).listener(printer).build()) {
            BytePattern.fill(buffer, seed);
            server.publish(name, buffer);
            Thread hook = new Thread(stop::countDown, "cuvmm-serve-stop");
            Runtime.getRuntime().addShutdownHook(hook);
            out.println("serving '" + name + "' (" + ByteSize.format(size) + ", " + buffer.chunkCount()
                    + " chunk(s), pattern seed " + seed + ") on " + socket + " with the " + resource.driver().kind()
                    + " driver; Ctrl-C to stop");
            out.flush();
            stop.await();
            server.unpublish(name);
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException shuttingDown) {
                // the hook is what woke us
            }
            out.println("stopped");
            return OK;
        } catch (IOException | CudaException | IllegalArgumentException | IllegalStateException e) {
            err.println("cuvmm serve: " + e.getMessage());
            return FAILED;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return FAILED;
        }
    }
}
