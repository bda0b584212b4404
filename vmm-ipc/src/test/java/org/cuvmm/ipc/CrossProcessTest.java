package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Sharing with other processes: a second JVM, a killed consumer, another uid, a Python client. */
class CrossProcessTest {
    private Path sock;
    private File log;
    private final List<LeaseEvent> events = new CopyOnWriteArrayList<>();

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        log = File.createTempFile("cuvmm-child", ".log");
    }

    @AfterEach
    void tearDown() {
        log.delete();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    private SharingServer server() throws IOException {
        return SharingServer.builder(sock).listener(new SharingListener() {
            @Override
            public void attached(LeaseEvent e) { events.add(e); }

            @Override
            public void released(LeaseEvent e) { events.add(e); }
        }).build();
    }

    private String run(Process p, int seconds) throws InterruptedException {
        if (!p.waitFor(seconds, TimeUnit.SECONDS)) {
            p.destroyForcibly().waitFor();
            throw new AssertionError("child did not finish in " + seconds + " s:\n" + IpcTestSupport.read(log));
        }
        return IpcTestSupport.read(log);
    }

    @Test
    void aSecondJvmReadsEveryChunkAndWritesOne() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks(); SharingServer server = server()) {
            long g = owner.buffer.chunkSize(0);
            BytePattern.fill(owner.buffer, 21);
            server.publish("three", owner.buffer);
            Process child = IpcTestSupport.startChild(ChildMain.class, log, List.of(), List.of(),
                    "attach", sock.toString(), "three", "21", "2", "22");
            String out = run(child, 60);
            assertEquals(0, child.exitValue(), out);
            // Version 2: the attachment's buffer is a view of the import the child's cache keeps.
            assertTrue(out.contains("origin SHARED_VIEW chunks 3") && out.contains("OK"), out);
            // The child's write landed in the owner's third chunk; the first two are untouched.
            assertEquals(-1, BytePattern.firstMismatch(owner.buffer, 0, 2 * g, 21), "chunks 0 and 1 unchanged");
            assertEquals(-1, BytePattern.firstMismatch(owner.buffer, 2 * g, owner.buffer.size() - 2 * g, 22),
                    "chunk 2 holds the child's write");
            await("lease released", 5, () -> server.leaseCount("three") == 0);
            await("both events", 5, () -> events.size() == 2);
            assertEquals(List.of(LeaseEvent.Reason.ATTACHED, LeaseEvent.Reason.RELEASED),
                    events.stream().map(LeaseEvent::reason).toList());
            assertEquals(child.pid(), events.get(0).peer().pid(), "SO_PEERCRED names the child");
        }
        assertFdsBack(base, "after sharing with a second JVM");
    }

    @Test
    void aKilledConsumerFreesItsLease() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks(); SharingServer server = server()) {
            server.publish("held", owner.buffer);
            Process child = IpcTestSupport.startChild(ChildMain.class, log, List.of(), List.of(), "hold", sock.toString(), "held");
            try {
                await("child attached:\n" + IpcTestSupport.read(log), 60, () -> IpcTestSupport.read(log).contains("ATTACHED"));
                assertEquals(1, server.leaseCount("held"));
            } finally {
                child.destroyForcibly();
                child.waitFor(30, TimeUnit.SECONDS);
            }
            await("the killed consumer's lease freed", 10, () -> server.leaseCount("held") == 0);
            await("its release event", 10, () -> events.size() == 2);
            LeaseEvent last = events.get(1);
            assertEquals(LeaseEvent.Reason.DISCONNECTED, last.reason());
            assertEquals(0, last.leaseCount());
            await("connection gone", 10, () -> server.connectionCount() == 0);
        }
    }

    @Test
    void aPythonClientWrittenFromTheProtocolDocumentAttaches() throws Exception {
        Assumptions.assumeTrue(IpcTestSupport.onHostDriver(), "skipped: the Python client maps host-driver memfds; "
                + "on the CUDA driver the fds are CUDA handles that only the driver can import");
        String python = System.getProperty("cuvmm.test.python", "python3");
        Assumptions.assumeTrue(works(python, "-c", "import socket, sys; socket.recv_fds; sys.exit(0)"),
                "skipped: no Python 3.9+ (" + python + " with socket.recv_fds) on this machine");
        Path script = Path.of("src/test/python/attach_client.py").toAbsolutePath();
        assertTrue(Files.exists(script), script.toString());
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks(); SharingServer server = server()) {
            BytePattern.fill(owner.buffer, 11);
            server.publish("py", owner.buffer);
            Process p = new ProcessBuilder(python, script.toString(), "--socket", sock.toString(), "--name", "py",
                    "--seed", "11", "--write-seed", "12").redirectErrorStream(true).redirectOutput(log).start();
            String out = run(p, 60);
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.contains("VERIFIED " + owner.buffer.size() + " bytes with seed 11"), out);
            BytePattern.verify(owner.buffer, 12); // the Python process's writes, through shared memory
            await("lease released", 5, () -> server.leaseCount("py") == 0);
            // The same client reports a server ERROR by its code name.
            Process q = new ProcessBuilder(python, script.toString(), "--socket", sock.toString(), "--name", "nope")
                    .redirectErrorStream(true).redirectOutput(log).start();
            out = run(q, 60);
            assertEquals(2, q.exitValue(), out);
            assertTrue(out.contains("UNKNOWN_NAME"), out);
        }
    }

    /**
     * A client running as another uid (65534, via setpriv) is refused. First the socket's
     * mode 0600 keeps it out; with the file opened up (test only), SO_PEERCRED and the
     * allow-list refuse it.
     */
    @Test
    void aClientRunningAsAnotherUidIsRefused() throws Exception {
        Assumptions.assumeTrue(NativeIo.posix().geteuid() == 0,
                "skipped: tests do not run as root, so no process of another uid can be started (the allow-list "
                        + "logic is covered by SharingTest.allowListRefusesOtherUids)");
        Assumptions.assumeTrue(works("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "true"),
                "skipped: setpriv cannot switch to uid 65534 here");
        Path cpDir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-uid");
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks(); SharingServer server = server()) {
            server.publish("secret", owner.buffer);
            String cp = readableClassPath(cpDir);
            List<String> asNobody = List.of("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups");
            List<String> jvm = List.of("-Djava.io.tmpdir=" + cpDir, "-Duser.home=" + cpDir);
            Files.setPosixFilePermissions(sock.getParent(), PosixFilePermissions.fromString("rwxr-xr-x"));

            String out = runAs(asNobody, jvm, cp);
            assertTrue(out.contains("uid 65534"), out);
            assertTrue(out.contains("IOERROR") && out.contains("Permission denied"), "mode 0600 keeps uid 65534 out:\n" + out);

            Files.setPosixFilePermissions(sock, PosixFilePermissions.fromString("rw-rw-rw-"));
            out = runAs(asNobody, jvm, cp);
            assertTrue(out.contains("REFUSED NOT_ALLOWED") && out.contains("uid 65534 is not allowed"), out);
            assertEquals(0, server.leaseCount("secret"));
        } finally {
            IpcTestSupport.deleteTree(cpDir);
        }
    }

    private String runAs(List<String> prefix, List<String> jvm, String cp) throws Exception {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(jvm);
        cmd.addAll(List.of("-cp", cp, ChildMain.class.getName(), "hello", sock.toString()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log).start();
        String out = run(p, 60);
        assertEquals(0, p.exitValue(), out);
        return out;
    }

    /** This JVM's test class path, copied where uid 65534 can read it (/root is not). */
    static String readableClassPath(Path dir) throws IOException {
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        List<String> out = new ArrayList<>();
        int i = 0;
        for (String entry : cp.split(File.pathSeparator)) {
            Path src = Path.of(entry);
            if (!Files.exists(src)) continue;
            Path dst = dir.resolve((i++) + "-" + src.getFileName());
            if (Files.isDirectory(src)) {
                try (Stream<Path> s = Files.walk(src)) {
                    for (Path p : (Iterable<Path>) s::iterator) {
                        Path t = dst.resolve(src.relativize(p).toString());
                        if (Files.isDirectory(p)) Files.createDirectories(t);
                        else Files.copy(p, t, StandardCopyOption.REPLACE_EXISTING);
                    }
                }
            } else {
                Files.copy(src, dst);
            }
            out.add(dst.toString());
        }
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : (Iterable<Path>) s::iterator) {
                Files.setPosixFilePermissions(p, PosixFilePermissions.fromString(Files.isDirectory(p) ? "rwxrwxrwx" : "rw-r--r--"));
            }
        }
        return String.join(File.pathSeparator, out);
    }

    static boolean works(String... cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            return p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException | InterruptedException e) {
            return false;
        }
    }
}
