package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.spi.ToolProvider;
import java.util.stream.Stream;

import org.cuvmm.VirtualMemoryBuffer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The jars as JPMS modules (every other suite runs on the class path). A tiny module
 * {@code org.cuvmm.probe}, compiled here against the module path (the core and vmm-ipc as
 * built, JavaCPP, the jnr jars as automatic modules), runs in a child JVM with
 * {@code -m}: it allocates, copies and closes on the selected driver, uses the pool, passes
 * an fd over a socket pair, publishes a buffer with {@code SharingServer} and attaches it
 * with {@code SharingClient} over a Unix socket (the server checks the peer with
 * {@code SO_PEERCRED} through jnr-unixsocket, an automatic module; then back-to-back
 * attach/close rounds, whose callers wait for their replies in libc's {@code poll}, bound
 * through jnr-ffi's {@code LibraryLoader}), publishes the imported
 * copy to get the core's {@code ErrorMessages} text (vmm-ipc reaching
 * {@code org.cuvmm.internal} through its qualified export, at run time), and tries to reach
 * the internal packages by reflection. A second
 * module that names {@code org.cuvmm.internal.jni.NativeApi} in its source must not compile.
 */
class ModulePathTest {
    /** Dependency jars that go on the module path (the rest of the test class path is JUnit and test code). */
    private static final Pattern DEPENDENCY = Pattern.compile("(javacpp|jnr-[a-z0-9]+|jffi|asm(-[a-z]+)?)-\\d.*\\.jar");

    private static final String PROBE_MODULE = """
            module org.cuvmm.probe {
                requires org.cuvmm.ipc;
            }
            """;

    private static final String PROBE_MAIN = """
            package org.cuvmm.probe;

            import java.lang.reflect.Method;
            import java.nio.file.Path;
            import java.util.Arrays;

            import org.cuvmm.BufferDescriptor;
            import org.cuvmm.Driver;
            import org.cuvmm.HandleType;
            import org.cuvmm.VirtualMemoryBuffer;
            import org.cuvmm.VirtualMemoryResource;
            import org.cuvmm.VirtualMemoryResourceOptions;
            import org.cuvmm.ipc.Attachment;
            import org.cuvmm.ipc.FdSocket;
            import org.cuvmm.ipc.ReceivedMessage;
            import org.cuvmm.ipc.SharingClient;
            import org.cuvmm.ipc.SharingServer;
            import org.cuvmm.pool.VirtualMemoryPool;

            public final class Main {
                public static void main(String[] args) throws Exception {
                    Module core = VirtualMemoryBuffer.class.getModule();
                    System.out.println("MODULES " + core.getName() + " " + FdSocket.class.getModule().getName() + " "
                            + Main.class.getModule().getName());
                    System.out.println("DRIVER " + Driver.get().kind());
                    VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder()
                            .handleType(HandleType.POSIX_FD).build();
                    try (VirtualMemoryResource r = VirtualMemoryResource.create(0, options)) {
                        byte[] in = new byte[4096];
                        for (int i = 0; i < in.length; i++) in[i] = (byte) (i * 7);
                        byte[] out = new byte[in.length];
                        try (VirtualMemoryBuffer b = r.allocate(in.length)) {
                            b.copyFrom(in);
                            b.copyTo(out);
                            System.out.println("COPY " + Arrays.equals(in, out));
                            FdSocket[] pair = FdSocket.pair();
                            try (BufferDescriptor d = b.exportDescriptor()) {
                                pair[0].send(new byte[] {42}, d.fds());
                            }
                            try (ReceivedMessage m = pair[1].receive(1)) {
                                System.out.println("FDS " + m.fdCount());
                            }
                            pair[0].close();
                            pair[1].close();
                        }
                        try (VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(r).build()) {
                            pool.allocate(1).close();
                            System.out.println("POOL " + pool.stats(org.cuvmm.pool.PoolLifetime.LOCAL).retainedCount());
                        }
                        share(r, options, Path.of(args[0], "probe.sock"));
                    }
                    reach("org.cuvmm.internal.jni.NativeApi", "fd_close", int.class);
                    reach("org.cuvmm.internal.BufferAccess", "get");
                    for (String p : new String[] {"org.cuvmm", "org.cuvmm.pool", "org.cuvmm.internal",
                            "org.cuvmm.internal.jni"}) {
                        System.out.println("EXPORTED " + p + " " + core.isExported(p));
                    }
                }

                /** Publish, attach (in a second resource), check the bytes, publish the imported copy. */
                private static void share(VirtualMemoryResource r, VirtualMemoryResourceOptions options, Path socket)
                        throws Exception {
                    VirtualMemoryBuffer b = r.allocate(8192);
                    try (VirtualMemoryResource other = VirtualMemoryResource.create(0, options);
                         SharingServer server = SharingServer.builder(socket).build()) {
                        b.fill((byte) 5);
                        server.publish("probe", b);
                        try (SharingClient c = SharingClient.connect(socket); Attachment a = c.attach("probe", other)) {
                            byte[] got = new byte[8192];
                            a.buffer().copyTo(got);
                            byte[] want = new byte[8192];
                            Arrays.fill(want, (byte) 5);
                            System.out.println("ATTACH " + Arrays.equals(want, got));
                            try {
                                server.publish("again", a.buffer());
                                System.out.println("PUBLISHED the imported buffer");
                            } catch (IllegalArgumentException e) {
                                System.out.println("IMPORTED " + e.getMessage());
                            }
                        }
                        // Back-to-back rounds: callers read their own replies (the leader's
                        // poll, libc's bound through jnr-ffi from this named module).
                        int rounds = 0;
                        try (SharingClient c = SharingClient.connect(socket)) {
                            for (; rounds < 300; rounds++) c.attach("probe", other).close();
                        }
                        System.out.println("ROUNDS " + rounds);
                        server.unpublish("probe");
                    } finally {
                        b.closeWhenUnused();
                    }
                    System.out.println("SOCKET_GONE " + !java.nio.file.Files.exists(socket));
                }

                /** Calls a public static method of an internal class by reflection; prints what happened. */
                private static void reach(String className, String method, Class<?>... types) {
                    String what = className.substring(className.lastIndexOf('.') + 1) + "." + method;
                    try {
                        Method m = Class.forName(className).getMethod(method, types);
                        Object[] values = types.length == 0 ? new Object[0] : new Object[] {-1};
                        m.invoke(null, values);
                        System.out.println("REACHED " + what);
                    } catch (IllegalAccessException e) {
                        System.out.println("REFUSED " + what + " " + e.getClass().getSimpleName());
                    } catch (ReflectiveOperationException | RuntimeException e) {
                        System.out.println("OTHER " + what + " " + e);
                    }
                }
            }
            """;

    private static final String INTRUDER_MODULE = """
            module org.cuvmm.intruder {
                requires org.cuvmm;
            }
            """;

    private static final String INTRUDER_MAIN = """
            package org.cuvmm.intruder;

            public final class Main {
                public static void main(String[] args) {
                    org.cuvmm.internal.jni.NativeApi.fd_close(0);
                }
            }
            """;

    @Test
    void theModulesRunOnTheModulePathAndHideTheirInternals(@TempDir Path dir) throws Exception {
        // A JDK always has javac; scripts/gpu-check's jlinked runtime leaves jdk.compiler out (size).
        org.junit.jupiter.api.Assumptions.assumeTrue(ToolProvider.findFirst("javac").isPresent(),
                "skipped: no javac in this Java runtime (java.home " + System.getProperty("java.home")
                        + ": no jdk.compiler module, as in the gpu-check bundle); the test compiles its probe module");
        String modulePath = modulePath();

        Path probe = dir.resolve("probe");
        Compiled compiled = compile(dir.resolve("probe-src"), probe, modulePath, "org.cuvmm.probe", PROBE_MODULE,
                PROBE_MAIN);
        assertEquals(0, compiled.exitCode(), "the probe module compiles against the module path:\n"
                + compiled.output() + "\nmodule path: " + modulePath);

        String out = runProbe(dir, modulePath + File.pathSeparator + probe);
        assertTrue(out.contains("MODULES org.cuvmm org.cuvmm.ipc org.cuvmm.probe"), "named modules:\n" + out);
        assertTrue(out.contains("COPY true"), "allocate/copy/close as a module:\n" + out);
        assertTrue(out.contains("FDS 1"), "an exported fd passed over a socket pair (jnr as automatic modules):\n"
                + out);
        assertTrue(out.contains("POOL 1"), "the pool as a module:\n" + out);
        assertTrue(out.contains("ATTACH true"), "publish and attach over a Unix socket (SO_PEERCRED via jnr):\n" + out);
        assertTrue(out.contains("ROUNDS 300"), "attach/close rounds, callers leading (poll via jnr-ffi):\n" + out);
        assertTrue(out.contains("IMPORTED publish 'again': ")
                && out.contains(org.cuvmm.internal.ErrorMessages.IMPORTED_CANNOT_BE_EXPORTED),
                "publishing imported memory fails with the core's ErrorMessages text (qualified export):\n" + out);
        assertTrue(out.contains("SOCKET_GONE true"), "the server removed its socket file:\n" + out);
        assertTrue(out.contains("REFUSED NativeApi.fd_close IllegalAccessException"), "NativeApi not exported:\n" + out);
        assertTrue(out.contains("REFUSED BufferAccess.get IllegalAccessException"), "BufferAccess not exported:\n"
                + out);
        assertTrue(out.contains("EXPORTED org.cuvmm true") && out.contains("EXPORTED org.cuvmm.pool true")
                && out.contains("EXPORTED org.cuvmm.internal false")
                && out.contains("EXPORTED org.cuvmm.internal.jni false"), "exports:\n" + out);

        Compiled intruder = compile(dir.resolve("intruder-src"), dir.resolve("intruder"), modulePath,
                "org.cuvmm.intruder", INTRUDER_MODULE, INTRUDER_MAIN);
        assertNotEquals(0, intruder.exitCode(), "a module naming NativeApi must not compile:\n" + intruder.output());
        assertTrue(intruder.output().contains("package org.cuvmm.internal.jni is not visible")
                || intruder.output().contains("does not export org.cuvmm.internal.jni"), intruder.output());
    }

    /** The core and vmm-ipc as this test sees them (jars in a reactor build), and their dependency jars. */
    private static String modulePath() throws URISyntaxException {
        List<String> entries = new ArrayList<>();
        entries.add(location(VirtualMemoryBuffer.class));
        entries.add(location(FdSocket.class));
        for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
            if (DEPENDENCY.matcher(Path.of(e).getFileName().toString()).matches() && !entries.contains(e)) entries.add(e);
        }
        return String.join(File.pathSeparator, entries);
    }

    private static String location(Class<?> c) throws URISyntaxException {
        return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    }

    private record Compiled(int exitCode, String output) {}

    private static Compiled compile(Path src, Path out, String modulePath, String module, String moduleInfo,
                                    String main) throws IOException {
        Path pkg = src.resolve(module.replace('.', '/'));
        Files.createDirectories(pkg);
        Files.writeString(src.resolve("module-info.java"), moduleInfo);
        Files.writeString(pkg.resolve("Main.java"), main);
        ToolProvider javac = ToolProvider.findFirst("javac")
                .orElseThrow(() -> new AssertionError("no javac in this JDK (java.home " + System.getProperty("java.home")
                        + "): the module-path test needs a JDK"));
        StringWriter text = new StringWriter();
        try (PrintWriter w = new PrintWriter(text)) {
            int rc = javac.run(w, w, "--release", "17", "--module-path", modulePath, "-d", out.toString(),
                    src.resolve("module-info.java").toString(), pkg.resolve("Main.java").toString());
            w.flush();
            return new Compiled(rc, text.toString());
        }
    }

    private static String runProbe(Path dir, String modulePath) throws IOException, InterruptedException {
        File log = dir.resolve("probe.log").toFile();
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--module-path");
        cmd.add(modulePath);
        cmd.add("-m");
        cmd.add("org.cuvmm.probe/org.cuvmm.probe.Main");
        cmd.add(dir.toString());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log).start();
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError("the probe JVM did not finish in 120 s:\n" + read(log));
        }
        String out = read(log);
        assertEquals(0, p.exitValue(), "probe JVM exit status:\n" + out + "\ncommand: " + cmd);
        return out;
    }

    private static String read(File f) throws IOException {
        try (Stream<String> lines = Files.lines(f.toPath(), StandardCharsets.UTF_8)) {
            return String.join("\n", lines.toList());
        }
    }
}
