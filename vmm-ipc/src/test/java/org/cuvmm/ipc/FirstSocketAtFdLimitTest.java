package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * The first socket of a JVM made while the process is at its open-file limit (a child JVM that
 * has not touched jnr yet, whose limit bash lowers to 256 and which then opens {@code
 * /dev/null} until it gets no more fds, then frees two). An independent fault probe found the
 * first {@code SharingClient} build there failing with {@code NoClassDefFoundError} (jnr-ffi's
 * static holder died listing {@code /etc/ld.so.conf.d}) and every later socket of that JVM
 * failing the same way after the fds were freed. Now the first attempt is an IOException that
 * names RLIMIT_NOFILE, and once fds are free the same JVM makes sockets and passes an fd. A
 * server's build, which asked jnr for the euid before it made a socket, is checked the same way.
 * Then, loaded, a server build and a socket pair with one fd free and with none each fail with
 * an IOException that names the limit and what to do.
 */
class FirstSocketAtFdLimitTest {

    /** Child: tries a socket pair with two fds free, then again with all of them free. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            ErrorPathClasses.load(); // this module's classes come from a directory: load them while fds are free
            List<FileInputStream> hog = new ArrayList<>();
            try {
                while (true) hog.add(new FileInputStream("/dev/null"));
            } catch (IOException full) {
                System.out.println("HOGGED " + hog.size() + " (" + full.getMessage() + ")");
            }
            for (int i = 0; i < 2; i++) hog.remove(hog.size() - 1).close();
            Path sock = Path.of(args[0]);
            // A server first: its build asked jnr for the euid before any socket (an fd-limit
            // load there broke jnr for good, past the check in the socket calls).
            try (SharingServer server = SharingServer.builder(sock).build()) {
                System.out.println("SERVER BUILT " + server);
            } catch (Throwable t) {
                System.out.println("SERVER " + t.getClass().getName() + ": " + t.getMessage());
            }
            try {
                FdSocket[] p = FdSocket.pair();
                System.out.println("FIRST MADE A PAIR");
                p[0].close();
                p[1].close();
            } catch (Throwable t) {
                System.out.println("FIRST " + t.getClass().getName() + ": " + t.getMessage());
            }
            for (FileInputStream f : hog) f.close();
            try {
                FdSocket[] p = FdSocket.pair();
                try (FileInputStream carried = new FileInputStream("/dev/null")) {
                    p[0].send(new byte[] {42}, new int[] {fdOf(carried)});
                    try (ReceivedMessage m = p[1].receive(1)) {
                        System.out.println("SECOND RECEIVED " + m.data()[0] + " WITH " + m.fds().length + " FD");
                    }
                } finally {
                    p[0].close();
                    p[1].close();
                }
            } catch (Throwable t) {
                System.out.println("SECOND " + t.getClass().getName() + ": " + t.getMessage());
            }
            try (SharingServer server = SharingServer.builder(sock).build()) {
                System.out.println("SERVER SERVES " + server.connectionCount());
            } catch (Throwable t) {
                System.out.println("SERVER AGAIN " + t.getClass().getName() + ": " + t.getMessage());
            }
            // Loaded now. With one fd free a server took it for its socket and then had no accept
            // reserve (its connections went unanswered at the limit); with none, jnr said only
            // "Too many open files" (an independent probe).
            for (int free : new int[] {1, 0}) {
                hog.clear();
                try {
                    while (true) hog.add(new FileInputStream("/dev/null"));
                } catch (IOException full) {
                    // every fd taken
                }
                for (int i = 0; i < free; i++) hog.remove(hog.size() - 1).close();
                try (SharingServer server = SharingServer.builder(sock).build()) {
                    System.out.println("SERVER AT " + free + " FREE BUILT " + server);
                } catch (Throwable t) {
                    System.out.println("SERVER AT " + free + " FREE " + t.getClass().getName() + ": " + t.getMessage());
                }
                try {
                    FdSocket[] p = FdSocket.pair();
                    p[0].close();
                    p[1].close();
                    System.out.println("PAIR AT " + free + " FREE MADE");
                } catch (Throwable t) {
                    System.out.println("PAIR AT " + free + " FREE " + t.getClass().getName() + ": " + t.getMessage());
                }
                for (FileInputStream f : hog) f.close();
            }
            System.out.flush();
        }

        private static int fdOf(FileInputStream in) throws Exception {
            java.lang.reflect.Field f = java.io.FileDescriptor.class.getDeclaredField("fd");
            f.setAccessible(true);
            return f.getInt(in.getFD());
        }
    }

    @Test
    void theFirstSocketAtTheLimitIsARetryableIOExceptionAndTheJvmRecovers() throws Exception {
        File log = File.createTempFile("cuvmm-first-socket", ".log");
        Path sock = IpcTestSupport.socketPath();
        try {
            Process p = IpcTestSupport.startChild(Child.class, log,
                    List.of("bash", "-c", "ulimit -n 256 && exec \"$0\" \"$@\""),
                    List.of("--add-opens=java.base/java.io=ALL-UNNAMED"), sock.toString());
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "child did not finish: " + IpcTestSupport.read(log));
            String out = IpcTestSupport.read(log);
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.contains("HOGGED "), out);
            assertTrue(out.contains("SERVER java.io.IOException: cannot load cuvmm-ipc's native layer"), out);
            assertTrue(out.contains("SERVER SERVES 0"), out);
            assertTrue(out.contains("FIRST java.io.IOException: cannot load cuvmm-ipc's native layer")
                    && out.contains("RLIMIT_NOFILE") && out.contains("ulimit -n") && out.contains("try again"), out);
            assertTrue(out.contains("SECOND RECEIVED 42 WITH 1 FD"), out);
            for (int free : new int[] {1, 0}) {
                for (String what : new String[] {"SERVER AT " + free + " FREE java.io.IOException: cannot bind ",
                        "PAIR AT " + free + " FREE java.io.IOException: cannot make a socket pair: "}) {
                    int at = out.indexOf(what);
                    assertTrue(at >= 0, what + " in " + out);
                    String line = out.substring(at, out.indexOf('\n', at));
                    assertTrue(line.contains("open-file limit (RLIMIT_NOFILE") && line.contains("ulimit -n"), line);
                }
            }
        } finally {
            log.delete();
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
