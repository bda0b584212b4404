package org.cuvmm.examples;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.SharingClient;

/**
 * The using half of a producer/consumer pair: attaches to the buffer a {@link SharedProducer}
 * serves, checks every byte, and lets go.
 *
 * <p>Arguments: {@code [SOCKET] [--hold]}. SOCKET defaults to {@link
 * SharedProducer#defaultSocket()}. With {@code --hold} the consumer keeps the buffer mapped
 * until Enter (or end of input), or until the producer withdraws it: stop the producer with
 * Ctrl-C meanwhile to see that the memory outlives the producer's hold on it.
 *
 * <p>Exit status: 0 when every byte matched, 1 when one did not, 2 when attaching failed or
 * an argument is wrong.
 */
public final class SharedConsumer {
    private SharedConsumer() {}

    public static void main(String[] args) {
        String usage = "SharedConsumer [SOCKET] [--hold]";
        if (ExampleArgs.wantsHelp(args)) {
            ExampleArgs.printUsage(usage);
            return;
        }
        Path socket = SharedProducer.defaultSocket();
        boolean hold = false;
        try {
            for (String a : args) {
                if (a.equals("--hold")) hold = true;
                else socket = ExampleArgs.socketPath(a);
            }
        } catch (IllegalArgumentException e) {
            ExampleArgs.exitWithUsage("SharedConsumer", e, usage);
            return;
        }
        int status = run(socket, hold, System.in, System.out);
        if (status != 0) System.exit(status);
    }

    /**
     * Attaches to {@link SharedProducer#NAME} on {@code socket}, verifies it, and releases it.
     * With {@code hold}, waits for a line (or the end) of {@code in}, or for the producer's
     * DROP notice, before releasing. Returns the exit status.
     */
    public static int run(Path socket, boolean hold, InputStream in, PrintStream out) {
        CountDownLatch letGo = new CountDownLatch(1);
        // A consumer imports into a resource of its own. It must be able to import POSIX fds,
        // which the default options can (HandleType.POSIX_FD), and be on the same device as
        // the producer's memory: importBuffer checks that and refuses otherwise.
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(socket, "SharedConsumer pid " + ProcessHandle.current().pid())) {
            // The producer may withdraw the buffer at any time (it is shutting down). The DROP
            // notice is a request, not a revocation: our mapping stays valid until we close it.
            client.addDropListener(notice -> {
                out.println("DROP: the producer withdrew '" + notice.name() + "'; releasing it");
                letGo.countDown();
            });

            // attach() receives one fd per physical allocation (SCM_RIGHTS), imports them into
            // this process's address space, and closes the fds: the mapping keeps the memory
            // alive, not the fds, so an attachment holds no fd. The server counts a lease for
            // us from now until we release it.
            try (Attachment attachment = client.attach(SharedProducer.NAME, resource)) {
                VirtualMemoryBuffer buffer = attachment.buffer();
                out.printf("attached '%s': %d bytes in %d chunk(s) at 0x%x (lease %d)%n", attachment.name(),
                        buffer.size(), buffer.chunkCount(), buffer.address(), attachment.leaseId());

                // The same memory the producer wrote, not a copy of it.
                if (!verify(buffer, out, "verified")) return 1;

                if (hold) {
                    out.println("holding it; Enter releases it");
                    startReader(in, letGo);
                    letGo.await();
                    // Withdrawn or not, the producer's shutdown cannot unmap our view: it is still
                    // readable here, even if the producer has closed its buffer and exited.
                    if (!verify(buffer, out, "still readable")) return 1;
                }

                // What if we never get here? If this process crashes or is killed while
                // attached, the kernel closes its socket and unmaps its memory; the server
                // sees the connection end and frees the lease (reason DISCONNECTED). Nothing
                // leaks on either side, and the producer's shutdown is not held up.
            }
            // Attachment.close() unmapped the buffer, then sent RELEASE and waited for the
            // server's RELEASED: the producer no longer counts us.
            out.println("released");
            return 0;
        } catch (IOException e) {
            // Nothing listens on the socket, the name is not published, or this uid is not allowed.
            out.println("cannot attach: " + e.getMessage());
            return 2;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return 2;
        }
    }

    private static boolean verify(VirtualMemoryBuffer buffer, PrintStream out, String what) {
        long bad = SeededPattern.firstMismatch(buffer, SharedProducer.SEED);
        if (bad >= 0) {
            out.println("MISMATCH at byte " + bad + " (pattern seed " + SharedProducer.SEED + ")");
            return false;
        }
        out.println(what + ": all " + buffer.size() + " bytes hold pattern seed " + SharedProducer.SEED);
        return true;
    }

    /** Counts {@code letGo} down at the first line or end of {@code in}. */
    private static void startReader(InputStream in, CountDownLatch letGo) {
        Thread t = new Thread(() -> {
            try {
                int c;
                do {
                    c = in.read();
                } while (c != -1 && c != '\n');
            } catch (IOException ignored) {
                // treat like the end of input
            }
            letGo.countDown();
        }, "SharedConsumer stdin");
        t.setDaemon(true);
        t.start();
    }
}
