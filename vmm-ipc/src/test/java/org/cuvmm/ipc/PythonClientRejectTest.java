package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Python test client ({@code src/test/python/attach_client.py}) against a fake server
 * that answers its ATTACH with a DESCRIPTOR whose fd count is wrong: as PROTOCOL.md section 3
 * says, it answers with an ERROR carrying the code and the DESCRIPTOR's request id, then
 * RELEASEs the lease; in version 2 (section 13.3) it also FORGETs the ids that came with FD.
 * An independent client written from the document found the Python client doing neither (it
 * exited on the version-1 DESCRIPTOR, and sent no FORGET in version 2).
 */
@Timeout(value = 2, unit = TimeUnit.MINUTES)
class PythonClientRejectTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
    }

    @AfterEach
    void tearDown() {
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void version1AnswersErrorThenRelease() throws Exception {
        List<Frame> sent = clientAnswersTo(1, new Messages.Descriptor(77, Protocol.HANDLE_TYPE_POSIX_FD, 10,
                new long[] {1 << 16}), false);
        assertEquals(List.of(FrameType.ERROR, FrameType.RELEASE), types(sent), sent.toString());
        assertEquals(ErrorCode.FD_COUNT_MISMATCH.code(), ((Messages.Error) sent.get(0).message).code());
        assertEquals(2, sent.get(0).requestId, "the ERROR carries the DESCRIPTOR's request id (the ATTACH's)");
        assertEquals(77, ((Messages.Release) sent.get(1).message).leaseId());
    }

    @Test
    void version2AlsoForgetsTheIdsThatCameWithFd() throws Exception {
        // Two chunks flagged FD, ids 5 and 6, and one fd: FD_COUNT_MISMATCH.
        List<Frame> sent = clientAnswersTo(2, new Messages.DescriptorV2(78, Protocol.HANDLE_TYPE_POSIX_FD, 10,
                new long[] {1 << 16, 1 << 16}, new long[] {5, 6},
                new int[] {Protocol.CHUNK_FLAG_FD, Protocol.CHUNK_FLAG_FD}), true);
        assertEquals(List.of(FrameType.ERROR, FrameType.RELEASE, FrameType.FORGET), types(sent), sent.toString());
        assertEquals(ErrorCode.FD_COUNT_MISMATCH.code(), ((Messages.Error) sent.get(0).message).code());
        assertEquals(78, ((Messages.Release) sent.get(1).message).leaseId());
        assertArrayEquals(new long[] {5, 6}, ((Messages.Forget) sent.get(2).message).ids());
    }

    private static List<FrameType> types(List<Frame> frames) {
        List<FrameType> t = new ArrayList<>();
        for (Frame f : frames) t.add(f.type);
        return t;
    }

    /**
     * Runs the Python client once against a fake server that answers its HELLO and then its
     * ATTACH with {@code descriptor} (one pipe fd with it when {@code oneFd}); returns the
     * frames the client sent after the ATTACH (RELEASEd and FORGOTTEN as a server would).
     */
    private List<Frame> clientAnswersTo(int version, Messages.Message descriptor, boolean oneFd) throws Exception {
        Assumptions.assumeTrue(IpcTestSupport.onHostDriver(), "skipped: the Python client maps host-driver memfds");
        String python = System.getProperty("cuvmm.test.python", "python3");
        Assumptions.assumeTrue(CrossProcessTest.works(python, "-c", "import socket, sys; socket.recv_fds; sys.exit(0)"),
                "skipped: no Python 3.9+ (" + python + " with socket.recv_fds) on this machine");
        Path script = Path.of("src/test/python/attach_client.py").toAbsolutePath();
        assertTrue(Files.exists(script), script.toString());
        File log = File.createTempFile("cuvmm-py", ".log");
        List<Frame> sent = new ArrayList<>();
        int[] pipe = IpcTestSupport.pipe();
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            Process p = new ProcessBuilder(python, script.toString(), "--socket", sock.toString(), "--name", "x",
                    "--protocol", Integer.toString(version)).redirectErrorStream(true).redirectOutput(log).start();
            try (FdSocket s = server.accept()) {
                Frame hello = FrameIO.read(s, Protocol.VERSION, version);
                assertEquals(FrameType.HELLO, hello.type);
                FrameIO.write(s, new Messages.HelloOk(version, Protocol.MAX_FDS_PER_FRAME), hello.requestId, null, version);
                Frame attach = FrameIO.read(s, version);
                assertEquals(FrameType.ATTACH, attach.type);
                FrameIO.write(s, descriptor, attach.requestId, oneFd ? new int[] {pipe[0]} : null, version);
                for (Frame f; (f = FrameIO.read(s, version)) != null; ) {
                    sent.add(f);
                    if (f.type == FrameType.RELEASE) {
                        FrameIO.write(s, new Messages.Released(((Messages.Release) f.message).leaseId()), f.requestId,
                                null, version);
                    } else if (f.type == FrameType.FORGET) {
                        FrameIO.write(s, new Messages.Forgotten(((Messages.Forget) f.message).ids().length), f.requestId,
                                null, version);
                    }
                }
            }
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the Python client did not exit: " + IpcTestSupport.read(log));
            assertTrue(IpcTestSupport.read(log).contains("REJECTED DESCRIPTOR"), IpcTestSupport.read(log));
            return sent;
        } finally {
            NativeIo.closeAll(pipe);
            log.delete();
        }
    }
}
