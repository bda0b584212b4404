package org.cuvmm.examples;

import java.io.EOFException;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.FdSocket;
import org.cuvmm.ipc.ReceivedMessage;

/**
 * Sharing a buffer with nothing but the descriptor API and a socket of your own: no server,
 * no names, no leases. For applications that already have a channel to the other process
 * and a protocol on it.
 *
 * <p>The sender exports a {@link BufferDescriptor} (one fd per physical allocation, their
 * sizes, the buffer's size, the handle type), sends the fds with {@code SCM_RIGHTS} and the
 * numbers as bytes, in one message, over {@link FdSocket} (the raw-fd transport of
 * cuvmm-ipc), inside {@link BufferDescriptor#useFds}: raw fds are valid only while their
 * descriptor is open and reachable. The receiver rebuilds the descriptor and imports it. To keep the example in one
 * program, "the other side" is a second thread with its own resource on the other end of a
 * socket pair; the fds cross exactly as they would between processes (the kernel installs
 * new fd numbers for the receiver). For two processes, one side does {@code
 * FdServerSocket.bind(path).accept()} and the other {@code FdSocket.connect(path)}; nothing
 * else changes.
 *
 * <p>The message (big-endian): {@code int chunks, int handleType (1 = POSIX fd), long size,
 * long[chunks] sizes}, with the chunks' fds attached. The receiver answers one byte when done.
 *
 * <p>Run it with {@code mvn -q -pl examples exec:java -Dexec.mainClass=org.cuvmm.examples.RawFdExample}.
 */
public final class RawFdExample {
    private static final int HEADER = 16;
    private static final int POSIX_FD = 1; // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, as docs/PROTOCOL.md
    private static final long SEED = 7;
    private static final byte[] REPLY = "written by the other side".getBytes(StandardCharsets.US_ASCII);

    private RawFdExample() {}

    public static void main(String[] args) throws Exception {
        if (!run(System.out)) System.exit(1);
    }

    /** The whole example. Returns true when the other side saw our bytes and we saw its write. */
    public static boolean run(PrintStream out) throws Exception {
        FdSocket[] pair = FdSocket.pair();
        try (FdSocket mine = pair[0];
             FdSocket theirs = pair[1];
             VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            // The other side runs concurrently, as another process would.
            FutureTask<String> otherSide = new FutureTask<>(() -> receiveAndImport(theirs, out));
            Thread t = new Thread(otherSide, "the other side");
            t.setDaemon(true);
            t.start();

            // A buffer of two physical allocations (a grow adds one), so two fds travel.
            long g = resource.granularity();
            VirtualMemoryBuffer buffer;
            try (VirtualMemoryBuffer first = resource.allocate(g)) {
                buffer = resource.modifyAllocation(first, 2 * g + 12345);
            } // `first` is closed; `buffer` still maps its memory
            try (buffer) {
                byte[] bytes = pattern((int) buffer.size()); // a few MiB: one array is fine here
                buffer.copyFrom(0, bytes, 0, bytes.length);
                out.printf("sender: %d bytes in %d chunk(s)%n", buffer.size(), buffer.chunkCount());

                // exportDescriptor() makes fresh fds on every call, and the descriptor owns
                // them. They are plain ints, valid only while the descriptor is open AND
                // reachable: once nothing refers to it, its cleaner closes them, and the kernel
                // may give the numbers to unrelated files. So never write
                // `mine.send(msg, buffer.exportDescriptor().fds())`: the descriptor is garbage
                // during that send, and whatever file then has those numbers would be sent.
                // Safe: hold the descriptor in try-with-resources and hand the ints over inside
                // useFds, which keeps it reachable and open until the action returns (a close()
                // from elsewhere meanwhile takes effect only then). (If the ints must outlive the descriptor, takeFds()
                // makes them yours, to close yourself.)
                // Once send() returns, the kernel holds its own references to the fds until the
                // receiver takes them, so we close ours at once (end of the try). If the
                // receiver dies first, the kernel closes the ones in flight: nothing leaks.
                try (BufferDescriptor d = buffer.exportDescriptor()) {
                    ByteBuffer msg = ByteBuffer.allocate(HEADER + 8 * d.chunkCount());
                    msg.putInt(d.chunkCount()).putInt(code(d.handleType())).putLong(d.size());
                    for (long s : d.sizes()) msg.putLong(s);
                    d.useFds(fds -> {
                        out.println("sender: exported " + d + ", fds " + Arrays.toString(fds));
                        mine.send(msg.array(), fds); // fds ride on the first byte
                    });
                }

                // The buffer must stay open until the other side has imported it: its mapping,
                // not our fds, is what then keeps the memory alive. Wait for its answer.
                try (ReceivedMessage answer = mine.receive(1, 0)) {
                    if (answer.length() != 1 || answer.data()[0] != 1) {
                        out.println("sender: the other side failed: " + otherSide.get(10, TimeUnit.SECONDS));
                        return false;
                    }
                }
                out.println("sender: the other side says: " + otherSide.get(10, TimeUnit.SECONDS));

                // Same memory, not a copy: its write is in our buffer.
                byte[] seen = new byte[REPLY.length];
                buffer.copyTo(buffer.size() - REPLY.length, seen, 0, seen.length);
                boolean ok = Arrays.equals(REPLY, seen);
                out.println("sender: its write is in our buffer: " + ok);
                out.println(ok ? "OK" : "FAILED");
                return ok;
            }
        }
        // Closed here: our buffer (the memory is freed: the other side unmapped its view), the
        // sockets and the resource. No fd is left on either side.
    }

    /** The other side: receive the message, rebuild the descriptor, import, verify, write, close, answer. */
    private static String receiveAndImport(FdSocket socket, PrintStream out) throws IOException {
        String result;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            result = importAndCheck(socket, resource, out);
        } catch (IOException | RuntimeException e) {
            result = "failed: " + e;
        }
        socket.send(new byte[] {(byte) (result.startsWith("verified") ? 1 : 0)}, null);
        return result;
    }

    private static String importAndCheck(FdSocket socket, VirtualMemoryResource resource, PrintStream out)
            throws IOException {
        VirtualMemoryBuffer view;
        // Read exactly the header first: the fds arrive with the message's first byte. The
        // ReceivedMessage owns them from here, and closes them in every error path below.
        try (ReceivedMessage head = socket.receive(HEADER)) {
            if (head.endOfStream()) throw new EOFException("the sender closed the socket");
            ByteBuffer h = ByteBuffer.wrap(head.data());
            int chunks = h.getInt();
            HandleType type = handleType(h.getInt());
            long size = h.getLong();
            if (chunks < 1 || chunks > 253 || head.fdCount() != chunks) {
                throw new IOException("the header says " + chunks + " chunk(s) but " + head.fdCount() + " fd(s) came");
            }
            long[] sizes = new long[chunks];
            // maxFds 0: any fd arriving with the sizes is a protocol error (closed, and thrown).
            try (ReceivedMessage rest = socket.receive(8 * chunks, 0)) {
                if (rest.endOfStream()) throw new EOFException("the sender closed the socket mid-message");
                ByteBuffer.wrap(rest.data()).asLongBuffer().get(sizes);
            }
            // Received fds are new numbers in the receiver's fd table. Here both sides share one
            // table, so they may be the very numbers the sender printed: it closed its own before
            // we received, and the kernel hands out the lowest free numbers.
            out.println("other side: received fds " + Arrays.toString(head.fds()) + ", sizes " + Arrays.toString(sizes)
                    + ", size " + size + ", " + type);

            // adoptFds vs fromFds. fromFds DUPLICATES the ints it is given: the caller keeps its
            // originals and must close them; right for fds you also need elsewhere. adoptFds
            // TAKES the ints: on success the descriptor owns them and closes them; on failure
            // (bad sizes, an fd that is not open) it throws and the caller still owns them.
            // Freshly received fds are ours alone, so adopting saves a dup and a close per fd
            // and never holds two copies (which matters near the open-file limit).
            //
            // One owner at a time: head owns the fds until adoptFds succeeds; takeFds() then
            // tells head to forget them (nothing can throw in between). Had adoptFds thrown,
            // head would still own them and close them when this block exits.
            try (BufferDescriptor d = BufferDescriptor.adoptFds(head.fds(), sizes, type, size)) {
                head.takeFds();
                // Import maps every chunk into a new address range of this resource (checking
                // handle type, sizes and device first, and undoing everything if it fails).
                view = resource.importBuffer(d);
            } // The descriptor closes the fds here: the mapping keeps the memory, not the fds.
        }
        try (view) {
            byte[] seen = new byte[(int) view.size()];
            view.copyTo(0, seen, 0, seen.length);
            int bad = Arrays.mismatch(seen, pattern(seen.length));
            if (bad >= 0) return "byte " + bad + " differs";
            view.copyFrom(view.size() - REPLY.length, REPLY, 0, REPLY.length);
            return "verified " + view.size() + " bytes in " + view.chunkCount() + " chunk(s), wrote "
                    + REPLY.length + " bytes at the end";
        } // Unmapped here: our view is gone; the sender's buffer is untouched.
    }

    /**
     * The bytes the sender writes and the receiver checks: any pattern both sides agree on
     * does; this one is docs/PROTOCOL.md section 9's, byte {@code i} is
     * {@code (i * 131 + seed * 7 + (i >>> 11)) & 0xFF}.
     */
    private static byte[] pattern(int length) {
        byte[] b = new byte[length];
        for (int i = 0; i < length; i++) b[i] = (byte) ((i * 131L + SEED * 7 + (i >>> 11)) & 0xFF);
        return b;
    }

    private static int code(HandleType t) {
        if (t != HandleType.POSIX_FD) throw new IllegalArgumentException("handle type " + t + " does not travel as fds");
        return POSIX_FD;
    }

    private static HandleType handleType(int code) throws IOException {
        if (code != POSIX_FD) throw new IOException("handle type " + code + " (expected: " + POSIX_FD + ", POSIX fd)");
        return HandleType.POSIX_FD;
    }
}
