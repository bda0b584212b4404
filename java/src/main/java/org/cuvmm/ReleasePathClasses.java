package org.cuvmm;

import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.stream.Stream;

/**
 * Loads, once per JVM and with the driver, every class of this library, so that closing and
 * releasing never has to load one. A class is loaded the first time it is used, and from a
 * class path of directories (an IDE, {@code mvn exec}, a test run) that opens its {@code
 * .class} file; a process at its open-file limit must still be able to give its memory back,
 * and independent probes found one close path after another failing there with {@code
 * NoClassDefFoundError} (the state word's close result, the host-function check, the
 * stream-ordered release and its event, the pool's free lists and statistics), some after the
 * object was already marked closed, so that its memory stayed mapped for good. Listing the
 * classes a close needs by hand missed some every time; loading all of them (about a hundred,
 * a few milliseconds, loaded but not initialized) cannot. vmm-ipc, a separate jar, loads its
 * error path itself ({@code ErrorPathClasses}). From a jar a class load opens no file either
 * way. Package-private.
 *
 * <p>Also the JDK's default logging: the first record {@code System.Logger} formats reads the
 * logging configuration and, for {@code java.util.logging.SimpleFormatter}'s date, the
 * time-zone database ({@code lib/tzdb.dat}). At the limit that open fails with an {@code
 * Error} the handler does not catch, and leaves {@code sun.util.calendar.ZoneInfoFile}
 * uninitialized for the rest of the process: no record could ever be written again (the same
 * probe, through a leak report). Both are read here, while files can be opened.
 */
final class ReleasePathClasses {
    private ReleasePathClasses() {}

    private static final System.Logger LOG = System.getLogger("org.cuvmm");

    /** How many of this library's classes were loaded (tests). */
    static final int LOADED;

    static {
        LOADED = loadAll();
        try {
            java.time.ZoneId.systemDefault().getRules();
        } catch (RuntimeException | Error e) {
            // No time-zone data here: the first log record will find out, as without cuvmm.
        }
    }

    /** Runs the initializer above (once; later calls do nothing). */
    static void load() {
        if (LOADED < 0) throw new AssertionError();
    }

    /**
     * Loads (without initializing) every class found where this class came from: a classes
     * directory or a jar. Elsewhere (another kind of class loader) nothing is loaded, and the
     * classes load as they are used.
     */
    private static int loadAll() {
        ClassLoader loader = ReleasePathClasses.class.getClassLoader();
        List<String> names = new ArrayList<>();
        try {
            CodeSource source = ReleasePathClasses.class.getProtectionDomain().getCodeSource();
            URL location = source == null ? null : source.getLocation();
            if (location == null || !"file".equals(location.getProtocol())) return 0;
            Path where = Path.of(location.toURI());
            if (Files.isDirectory(where)) {
                try (Stream<Path> files = Files.walk(where.resolve("org").resolve("cuvmm"))) {
                    files.filter(p -> p.toString().endsWith(".class"))
                            .forEach(p -> names.add(className(where.relativize(p).toString().replace('\\', '/'))));
                }
            } else {
                try (JarFile jar = new JarFile(where.toFile())) {
                    for (Enumeration<JarEntry> e = jar.entries(); e.hasMoreElements();) {
                        String n = e.nextElement().getName();
                        if (n.startsWith("org/cuvmm/") && n.endsWith(".class")) names.add(className(n));
                    }
                }
            }
        } catch (IOException | URISyntaxException | RuntimeException e) {
            LOG.log(System.Logger.Level.DEBUG, "listing cuvmm's classes failed; they load as they are used", e);
        }
        int loaded = 0;
        for (String name : names) {
            try {
                Class.forName(name, false, loader);
                loaded++;
            } catch (ClassNotFoundException | LinkageError e) {
                LOG.log(System.Logger.Level.DEBUG, "preloading " + name + " failed", e);
            }
        }
        return loaded;
    }

    private static String className(String path) {
        return path.substring(0, path.length() - ".class".length()).replace('/', '.');
    }
}
