package org.cuvmm.ipc;

import java.nio.file.Path;
import java.util.Map;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;

/** What the tests run in a second JVM. Prints its result; exit 0 means it did what it was asked. */
public final class ChildMain {
    private static final int RLIMIT_NOFILE = 7;

    private ChildMain() {}

    public static void main(String[] args) {
        IpcTestSupport.runChildMain(() -> {
            switch (args[0]) {
                case "ctrunc" -> ctrunc(Path.of(args[1]));
                case "ctruncAhead" -> ctruncAhead(Path.of(args[1]));
                case "attach" -> attach(Path.of(args[1]), args[2], Long.parseLong(args[3]), Integer.parseInt(args[4]),
                        Long.parseLong(args[5]));
                case "hold" -> hold(Path.of(args[1]), args[2]);
                case "hello" -> hello(Path.of(args[1]));
                case "exportAtLimit" -> exportAtLimit(Path.of(args[1]));
                case "serveAtLimit" -> serveAtLimit(Path.of(args[1]));
                case "attachDropped" -> attachDropped(Path.of(args[1]));
                default -> throw new IllegalArgumentException(args[0]);
            }
        });
    }

    /**
     * Lowers this process's soft RLIMIT_NOFILE to the lowest value that leaves exactly {@code
     * free} unused fd numbers below it; returns {old soft, old hard, the new soft limit} (give
     * the first two back to setrlimit to restore it).
     */
    private static long[] lowerFdLimit(int free) {
        jnr.posix.RLimit r = NativeIo.posix().getrlimit(RLIMIT_NOFILE);
        long[] old = {r.rlimCur(), r.rlimMax(), 0};
        int limit = 0;
        for (int seen = 0; seen < free; limit++) {
            if (!IpcTestSupport.isOpen(limit)) seen++;
        }
        if (free == 0) {
            while (IpcTestSupport.isOpen(limit)) limit++;
        }
        if (NativeIo.posix().setrlimit(RLIMIT_NOFILE, limit, old[1]) != 0) {
            throw new IllegalStateException("setrlimit failed: errno " + NativeIo.posix().errno());
        }
        old[2] = limit;
        return old;
    }

    /** Receives 20 fds with room for only a few: the kernel sets MSG_CTRUNC. */
    private static void ctrunc(Path sock) throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            // Warm up the receive path (class loading may open files) before lowering the limit.
            Class.forName(FdTransferException.Reason.class.getName());
            Class.forName(FdTransferException.class.getName());
            Map<String, Integer> base = IpcTestSupport.fdSnapshot();
            // The lowest limit that leaves exactly 3 free fd numbers below it.
            long[] old = lowerFdLimit(3);
            long limit = old[2];
            FdTransferException.Reason reason = null;
            int closed = -1;
            try {
                s.send(new byte[] {1}, null);
                try (ReceivedMessage m = s.receive(8)) {
                    System.out.println("no error: " + m);
                } catch (FdTransferException e) {
                    reason = e.reason();
                    closed = e.fdsClosed();
                    System.out.println("message: " + e.getMessage());
                }
            } finally {
                NativeIo.posix().setrlimit(RLIMIT_NOFILE, old[0], old[1]);
            }
            System.out.println(reason + ", closed " + closed + " received fds (limit " + limit + ")");
            Map<String, Integer> now = IpcTestSupport.fdSnapshot();
            if (!now.equals(base)) throw new IllegalStateException("fds " + now + " (expected: " + base + ")");
            System.out.println("fds back to baseline");
        }
    }

    /**
     * Reading ahead at the open-file limit: over its first connection the parent has sent a
     * RELEASED, a DESCRIPTOR with 20 fds and another RELEASED before it writes one byte on the
     * second, so one read takes the first two frames and the kernel drops most of the
     * DESCRIPTOR's fds (MSG_CTRUNC). The first RELEASED must read clean, the DESCRIPTOR must be
     * refused with a non-fatal FD_COUNT_MISMATCH (the stream in step), the last RELEASED read
     * clean, and the fds be back to baseline.
     */
    private static void ctruncAhead(Path sock) throws Exception {
        try (FdSocket frames = FdSocket.connect(sock); FdSocket go = FdSocket.connect(sock)) {
            Class.forName(FdTransferException.Reason.class.getName());
            Class.forName(FdTransferException.class.getName());
            Class.forName(ProtocolException.class.getName());
            Class.forName(FrameBuffer.class.getName());
            // Load the frame path's classes (a class file is opened to load it) before the limit
            // is lowered: a clean frame and a refused one, on a pair.
            FdSocket[] warm = FdSocket.pair();
            try (FdSocket a = warm[0]; FdSocket b = warm[1]) {
                a.send(Frame.encode(new Messages.Released(1), 1), null);
                a.send(Frame.encode(new Messages.Descriptor(1, Protocol.HANDLE_TYPE_POSIX_FD, 1, new long[] {1}), 2),
                        null);
                try (Frame f = FrameIO.read(b)) {
                    f.fdCount();
                }
                try (Frame f = FrameIO.read(b)) {
                    throw new IllegalStateException("warm-up: no error for a DESCRIPTOR without its fd: " + f);
                } catch (ProtocolException expected) {
                    expected.code();
                }
            }
            Map<String, Integer> base = IpcTestSupport.fdSnapshot();
            long[] old = lowerFdLimit(3);
            long limit = old[2];
            String result;
            try {
                go.send(new byte[] {1}, null); // ready: the limit is low
                try (ReceivedMessage m = go.receive(1, 0)) { // every frame is queued now
                    if (m.length() != 1) throw new IllegalStateException("no go byte: " + m);
                }
                StringBuilder sb = new StringBuilder();
                try (Frame f = FrameIO.read(frames)) {
                    sb.append("first ").append(f.message).append(" fds ").append(f.fdCount());
                }
                sb.append("; recvmsg ").append(frames.ioCalls()[0] - frames.ioCalls()[2]);
                try (Frame f = FrameIO.read(frames)) {
                    sb.append("; second read: no error ").append(f);
                } catch (ProtocolException e) {
                    sb.append("; second ").append(e.code()).append(e.fatal() ? " fatal" : " not fatal");
                }
                try (Frame f = FrameIO.read(frames)) {
                    sb.append("; third ").append(f.message).append(" fds ").append(f.fdCount());
                }
                result = sb.toString();
            } finally {
                NativeIo.posix().setrlimit(RLIMIT_NOFILE, old[0], old[1]);
            }
            System.out.println(result);
            Map<String, Integer> now = IpcTestSupport.fdSnapshot();
            if (!now.equals(base)) throw new IllegalStateException("fds " + now + " (expected: " + base + ")");
            System.out.println("fds back to baseline");
        }
    }

    /** Attaches, checks every byte of the pattern (every chunk), writes chunk {@code writeChunk} with {@code writeSeed}. */
    private static void attach(Path sock, String name, long seed, int writeChunk, long writeSeed) throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(sock, "child");
             Attachment a = client.attach(name, resource)) {
            VirtualMemoryBuffer b = a.buffer();
            System.out.println("attached " + a + " origin " + b.origin() + " chunks " + b.chunkCount());
            BytePattern.verify(b, seed);
            long offset = 0;
            for (int i = 0; i < writeChunk; i++) offset += b.chunkSize(i);
            long length = Math.min(b.chunkSize(writeChunk), b.size() - offset);
            BytePattern.fill(b, offset, length, writeSeed);
            System.out.println("verified " + b.size() + " bytes; wrote chunk " + writeChunk + " [" + offset + ", +"
                    + length + ")");
        }
        System.out.println("OK");
    }

    /** Attaches and holds the lease until killed. */
    private static void hold(Path sock, String name) throws Exception {
        VirtualMemoryResource resource = VirtualMemoryResource.create(0);
        SharingClient client = SharingClient.connect(sock, "holder");
        Attachment a = client.attach(name, resource);
        System.out.println("ATTACHED lease " + a.leaseId());
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }

    /** Connects and says HELLO; reports the server's refusal. */
    private static void hello(Path sock) throws Exception {
        System.out.println("uid " + NativeIo.posix().geteuid());
        try (SharingClient c = SharingClient.connect(sock, "stranger")) {
            System.out.println("ACCEPTED " + c);
        } catch (SharingException e) {
            System.out.println("REFUSED " + e.code() + ": " + e.getMessage());
        } catch (java.io.IOException e) {
            System.out.println("IOERROR " + e.getMessage());
        }
    }

    /**
     * A server at its open-file limit: an ATTACH whose export cannot get an fd is answered
     * with ERROR INTERNAL naming the export, and the connection stays usable. Nothing on the
     * error path has run in this JVM before the limit is lowered, and the class path is one of
     * class directories (the test's), where loading a class opens its file: the classes the
     * server needs to answer must be loaded already (they were not: the reader failed with
     * NoClassDefFoundError and the client read the end of the stream).
     */
    private static void exportAtLimit(Path sock) throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer buffer = resource.allocate(resource.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("b", buffer);
            try (SharingClient client = SharingClient.builder(sock).protocolVersion(1).build()) {
                client.attach("b", resource).close(); // the attach path's classes, loaded while fds are free
                long[] old = lowerFdLimit(0); // no fd number free below it
                String result;
                try {
                    try (Attachment a = client.attach("b", resource)) {
                        result = "attached at the limit: " + a;
                    } catch (SharingException e) {
                        result = "REFUSED " + e.code() + ": " + e.getMessage();
                    } catch (java.io.IOException e) {
                        result = "IOERROR " + e.getMessage();
                    }
                } finally {
                    NativeIo.posix().setrlimit(RLIMIT_NOFILE, old[0], old[1]);
                }
                System.out.println(result);
                client.attach("b", resource).close(); // still usable once fds are free again
                System.out.println("attached again below the limit");
            }
            server.unpublish("b");
        }
    }

    /**
     * A server at its open-file limit (AcceptAtFdLimitTest): serves at {@code sock}, lowers
     * the limit so that no fd number is free ("AT LIMIT"; an accept already waiting holds the
     * fd number it will give its connection, so one more connection may still be served),
     * waits for a line on stdin while the
     * parent connects, restores it ("BELOW LIMIT"), waits for another line while the parent
     * connects again, and prints the refusals its listener heard.
     */
    private static void serveAtLimit(Path sock) throws Exception {
        java.util.List<String> refusals = new java.util.concurrent.CopyOnWriteArrayList<>();
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0); // the driver loaded while fds are free
             SharingServer server = SharingServer.builder(sock).listener(new SharingListener() {
                @Override
                public void refused(PeerCredentials peer, String reason) {
                    refusals.add(reason);
                    System.out.println("REFUSED " + reason);
                    System.out.flush();
                }
            }).build()) {
            long[] old = lowerFdLimit(0); // no fd number free below it
            long limit = old[2];
            try {
                System.out.println("AT LIMIT " + limit);
                System.out.flush();
                in.readLine();
            } finally {
                NativeIo.posix().setrlimit(RLIMIT_NOFILE, old[0], old[1]);
            }
            System.out.println("BELOW LIMIT");
            System.out.flush();
            in.readLine();
            System.out.println("REFUSALS " + refusals.size() + " " + refusals);
        }
    }

    /**
     * A version-1 client attaches "b" with no fd number free (ClientAtFdLimitTest): the kernel
     * drops the DESCRIPTOR's fd. Prints the failure's code and message ("AT LIMIT"), then
     * attaches again below the limit.
     */
    private static void attachDropped(Path sock) throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.builder(sock).protocolVersion(1).build()) {
            client.attach("b", resource).close(); // the attach path's classes, loaded while fds are free
            long[] old = lowerFdLimit(0);
            String result;
            try {
                try (Attachment a = client.attach("b", resource)) {
                    result = "attached at the limit: " + a;
                } catch (SharingException e) {
                    result = "code=" + e.code() + " " + e.getMessage();
                }
            } finally {
                NativeIo.posix().setrlimit(RLIMIT_NOFILE, old[0], old[1]);
            }
            System.out.println("AT LIMIT " + result);
            client.attach("b", resource).close();
            System.out.println("BELOW LIMIT attached, connected " + client.isConnected());
        }
    }
}
