package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * A server at its open-file limit (a child JVM, ChildMain "serveAtLimit", with no fd number
 * free) refuses a new connection at once with ERROR TOO_MANY_CONNECTIONS naming the limit,
 * instead of leaving it in the listen queue: Linux's accept fails with EMFILE before it takes
 * a connection off the queue, and an independent probe's client waited out its whole timeout
 * ("no reply to HELLO"). The server holds one fd in reserve and gives it up for the refusal;
 * once the limit is raised it serves the next client, though its accept thread was already
 * waiting for it with the reserve given up.
 */
class AcceptAtFdLimitTest {
    @Test
    void aServerAtItsFdLimitRefusesAConnectionAtOnceAndServesOnceBelowIt() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        File log = File.createTempFile("cuvmm-accept-limit", ".log");
        Process child = IpcTestSupport.startChild(ChildMain.class, log, List.of(), List.of(), "serveAtLimit",
                sock.toString());
        try (OutputStream toChild = child.getOutputStream()) {
            IpcTestSupport.await("the child server at its limit: " + IpcTestSupport.read(log), 60,
                    () -> IpcTestSupport.read(log).contains("AT LIMIT") || !child.isAlive());
            assertTrue(child.isAlive(), IpcTestSupport.read(log));
            // Without the refusal the client waited all of this and failed with "no reply to HELLO".
            Duration timeout = Duration.ofSeconds(10);
            // An accept already waiting when the limit fell took its fd number before, so the
            // first connection may still be served: then the second must be refused.
            SharingClient servedFirst = null;
            try {
                for (int attempt = 1; ; attempt++) {
                    try {
                        SharingClient c = SharingClient.builder(sock).timeout(timeout).build();
                        assertTrue(attempt == 1 && servedFirst == null, "served connection " + attempt + " at the "
                                + "limit: " + c + "\n" + IpcTestSupport.read(log));
                        servedFirst = c;
                    } catch (SharingException e) {
                        assertEquals(ErrorCode.TOO_MANY_CONNECTIONS, e.code(), e.getMessage());
                        assertTrue(e.getMessage().contains("open-file limit") && e.getMessage().contains(
                                "RLIMIT_NOFILE") && e.getMessage().contains("try again later"), e.getMessage());
                        break;
                    } catch (java.io.IOException e) {
                        throw new AssertionError("connection " + attempt + ": " + e + "\nchild:\n"
                                + IpcTestSupport.read(log), e);
                    }
                }
            } finally {
                if (servedFirst != null) servedFirst.close();
            }
            // Let the accept thread go back to waiting, its reserve given up again, before the
            // limit is raised: a server that met the limit once then refused the next
            // connection, whenever it came (a review; this order made it fail).
            IpcTestSupport.await("the child's refusal: " + IpcTestSupport.read(log), 30,
                    () -> IpcTestSupport.read(log).contains("REFUSED "));
            Thread.sleep(500);
            toChild.write("go\n".getBytes(StandardCharsets.UTF_8));
            toChild.flush();
            IpcTestSupport.await("the child below its limit: " + IpcTestSupport.read(log), 30,
                    () -> IpcTestSupport.read(log).contains("BELOW LIMIT") || !child.isAlive());
            try (SharingClient c = SharingClient.builder(sock).timeout(timeout).build()) {
                assertTrue(c.isConnected(), c.toString());
            }
            toChild.write("end\n".getBytes(StandardCharsets.UTF_8));
            toChild.flush();
            assertTrue(child.waitFor(30, TimeUnit.SECONDS), IpcTestSupport.read(log));
            String out = IpcTestSupport.read(log);
            assertEquals(0, child.exitValue(), out);
            assertTrue(out.contains("REFUSALS 1 [the server is at its open-file limit"), out);
        } finally {
            child.destroyForcibly();
            log.delete();
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
