package org.cuvmm.internal;

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
 * Loads a module's classes up front, so that nothing it does later needs a class file opened.
 * A class is loaded the first time it is used, and from a class path of directories (an IDE,
 * {@code mvn exec}, a test run) that opens its {@code .class} file: at the open-file limit the
 * open fails, and the code that needed the class (a close, an ERROR read, a reader thread)
 * fails with {@code NoClassDefFoundError}. Independent probes found one such path after
 * another in both modules, each time after a hand-made list of "the classes that path needs"
 * had missed one; loading all of them cannot miss. Loaded, not initialized: initialization
 * opens no file. From a jar a load opens no file either way (the jar stays open). Used by the
 * core's {@code ReleasePathClasses} and vmm-ipc's {@code ErrorPathClasses}.
 */
public final class ClassPreload {
    /** Looked up when a record is written: this class must not touch logging as it initializes (FirstUse). */
    private static System.Logger logger() {
        return System.getLogger("org.cuvmm");
    }

    private ClassPreload() {}

    /**
     * Loads (without initializing) every class of the packages {@code packagePaths} (each
     * like {@code "org/cuvmm/ipc/"}, its subpackages not included: a shaded jar or a shared
     * output directory may hold other modules under them) found where {@code anchor} came
     * from: a classes directory or a jar. Returns how many; 0 where the location is neither
     * (another kind of class loader: the classes then load as they are used). Never throws.
     */
    public static int loadAll(Class<?> anchor, String... packagePaths) {
        List<String> names = new ArrayList<>();
        try {
            CodeSource source = anchor.getProtectionDomain().getCodeSource();
            URL location = source == null ? null : source.getLocation();
            if (location == null || !"file".equals(location.getProtocol())) return 0;
            Path where = Path.of(location.toURI());
            if (Files.isDirectory(where)) {
                for (String packagePath : packagePaths) {
                    Path dir = where.resolve(packagePath);
                    if (!Files.isDirectory(dir)) continue;
                    try (Stream<Path> files = Files.list(dir)) {
                        files.filter(p -> p.toString().endsWith(".class"))
                                .forEach(p -> names.add(className(where.relativize(p).toString().replace('\\', '/'))));
                    }
                }
            } else {
                try (JarFile jar = new JarFile(where.toFile())) {
                    for (Enumeration<JarEntry> e = jar.entries(); e.hasMoreElements();) {
                        String n = e.nextElement().getName();
                        if (!n.endsWith(".class")) continue;
                        for (String packagePath : packagePaths) {
                            if (n.startsWith(packagePath) && n.indexOf('/', packagePath.length()) < 0) {
                                names.add(className(n));
                            }
                        }
                    }
                }
            }
        } catch (IOException | URISyntaxException | RuntimeException e) {
            logger().log(System.Logger.Level.DEBUG, "listing the classes of " + List.of(packagePaths) + " failed; they load "
                    + "as used", e);
        }
        ClassLoader loader = anchor.getClassLoader();
        int loaded = 0;
        for (String name : names) {
            if (name.endsWith("module-info")) continue;
            try {
                Class.forName(name, false, loader);
                loaded++;
            } catch (ClassNotFoundException | LinkageError | RuntimeException e) { // a sealing SecurityException too
                logger().log(System.Logger.Level.DEBUG, "preloading " + name + " failed", e);
            }
        }
        return loaded;
    }

    private static String className(String path) {
        return path.substring(0, path.length() - ".class".length()).replace('/', '.');
    }
}
