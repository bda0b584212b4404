package org.cuvmm.internal;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URL;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.Enumeration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.jar.Attributes;
import java.util.jar.JarFile;
import java.util.jar.Manifest;

/**
 * What the process's first cuvmm call prepares, once per JVM, before any native library loads
 * ({@link NativeFirstLoad} for the core, {@code NativeIo.load} for vmm-ipc): it checks that the
 * open-file limit leaves room, then opens what the JDK opens lazily and loses for good when an
 * open fails at the limit.
 *
 * <p>Why: a first use at the limit broke the JVM for good in several ways (independent fault
 * probes). A class whose static initializer failed stays unusable (jnr's library holder,
 * JavaCPP's classes, the JDK's {@code java.security.Security}, {@code ZoneInfoFile} for
 * {@code lib/tzdb.dat}, the logging configuration). A class-path jar the JDK could not open is
 * dropped from the class path (jnr's and asm's jars, opened by the logger's service lookup or
 * by JavaCPP's resource lookups, after which jnr's classes could never load). So the first
 * use counts {@link #SPARE_FDS} fds plus one per class-path jar not open yet, refuses when
 * fewer are free (nothing is loaded or initialized then, so a later call can succeed), and
 * otherwise opens every class-path jar (a resource lookup that finds nothing opens them all)
 * and reads the logging configuration, {@code java.security} and the time-zone database
 * itself. Plain {@code java.io} only, before that: its first NIO use would load {@code
 * libnio.so}, which opens a file too. Not airtight: another thread may take the fds between
 * the count and the opens.
 */
public final class FirstUse {
    /**
     * Free fds wanted beyond the class path's unopened jars: the native loads were seen to
     * need two to four at a time (dlopen, JavaCPP's cache, jnr's library search); eight leave
     * room for the other threads of a busy process.
     */
    public static final int SPARE_FDS = 8;

    private static volatile boolean prepared;
    private static volatile boolean managementReady;

    private FirstUse() {}

    /**
     * Prepares the first use now unless done before. Returns null when the process is ready
     * (now or earlier), else what is short, in words for the caller's exception: "only K of
     * the N file descriptors it needs could be opened (8 spare, M for class-path jars not open
     * yet)". Never throws for the fd limit.
     */
    public static String prepare() {
        if (prepared) return null;
        synchronized (FirstUse.class) {
            if (prepared) return null;
            // The spare fds first: counting reads manifests, which opens jars one at a time.
            if (FreeFds.openable(SPARE_FDS) < SPARE_FDS) {
                return "fewer than the " + SPARE_FDS + " spare file descriptors it needs could be opened";
            }
            int unopened = unopenedClassPathJars();
            if (unopened < 0) {
                return "not even /proc/self/fd could be listed, which needs one free file descriptor";
            }
            int wanted = SPARE_FDS + unopened;
            int free = FreeFds.openable(wanted);
            if (free < wanted) {
                return "only " + free + " of the " + wanted + " file descriptors it needs could be opened (" + SPARE_FDS
                        + " spare, " + unopened + " for class-path jars the JVM has not opened yet)";
            }
            openWhatTheJdkOpensLazily();
            prepared = true;
            return null;
        }
    }

    /**
     * Makes the JVM's platform MBean server now, unless done before, after checking {@link
     * #SPARE_FDS} free fds: its first use loads the JDK's {@code libmanagement.so}, and a load
     * that fails at the fd limit leaves {@code ManagementFactory} unusable for the life of the
     * JVM, for cuvmm and everything else (an independent probe: a pool registering its beans at
     * the limit). Returns null when ready, else what is short, in words for the caller's
     * exception. Never throws for the fd limit.
     */
    public static String prepareManagement() {
        if (managementReady) return null;
        synchronized (FirstUse.class) {
            if (managementReady) return null;
            int free = FreeFds.openable(SPARE_FDS);
            if (free < SPARE_FDS) {
                return "only " + free + " of the " + SPARE_FDS + " file descriptors that loading the JDK's management "
                        + "library asks for could be opened";
            }
            java.lang.management.ManagementFactory.getPlatformMBeanServer();
            managementReady = true;
            return null;
        }
    }

    /**
     * Class-path and module-path jars that no fd of this process has open, or -1 when {@code
     * /proc/self/fd} cannot be listed (at the limit). The class path is {@code
     * java.class.path}'s files and, recursively, the jars their manifests' {@code Class-Path}
     * names (a {@code java -jar} launch, or Maven Surefire's booter jar, lists nothing else);
     * the module path is {@code jdk.module.path}'s jars and the jars in its directories.
     * Reading a manifest opens its jar for a moment, one at a time. The JDK keeps a jar open once it has opened it. Public
     * for tests.
     */
    public static int unopenedClassPathJars() {
        String[] fds = new File("/proc/self/fd").list();
        if (fds == null) return -1;
        Set<String> open = new HashSet<>();
        for (String fd : fds) {
            try {
                open.add(new File("/proc/self/fd", fd).getCanonicalPath());
            } catch (IOException gone) {
                // closed meanwhile (the directory's own fd among them)
            }
        }
        Deque<File> todo = new ArrayDeque<>();
        for (String entry : System.getProperty("java.class.path", "").split(File.pathSeparator)) {
            if (!entry.isEmpty()) todo.add(new File(entry));
        }
        // The module path too: the resource lookup below searches every module, opening its
        // jar (a review: on the module path java.class.path may be empty, and the count was 0).
        for (String entry : System.getProperty("jdk.module.path", "").split(File.pathSeparator)) {
            if (entry.isEmpty()) continue;
            File f = new File(entry);
            if (f.isFile()) {
                todo.add(f);
            } else {
                File[] jars = f.listFiles((d, name) -> name.endsWith(".jar")); // a directory of modules
                if (jars != null) todo.addAll(java.util.Arrays.asList(jars));
            }
        }
        Set<String> seen = new HashSet<>();
        int unopened = 0;
        while (!todo.isEmpty()) {
            File f = todo.poll();
            if (!f.isFile()) continue; // a directory opens a file per class, and keeps none
            String path;
            try {
                path = f.getCanonicalPath();
            } catch (IOException e) {
                continue;
            }
            if (!seen.add(path)) continue;
            if (!open.contains(path)) unopened++;
            todo.addAll(manifestClassPath(new File(path)));
        }
        return unopened;
    }

    /** The files a jar's manifest {@code Class-Path} names (relative to the jar's directory), or none. */
    private static List<File> manifestClassPath(File jar) {
        List<File> named = new ArrayList<>();
        try (JarFile j = new JarFile(jar, false)) {
            Manifest m = j.getManifest();
            String classPath = m == null ? null : m.getMainAttributes().getValue(Attributes.Name.CLASS_PATH);
            if (classPath == null) return named;
            URI base = jar.getParentFile().toURI();
            for (String entry : classPath.trim().split("\\s+")) {
                if (entry.isEmpty()) continue;
                try {
                    URI u = base.resolve(entry);
                    if ("file".equals(u.getScheme())) named.add(new File(u));
                } catch (IllegalArgumentException notAFile) {
                    // an entry the JDK would not open as a file either
                }
            }
        } catch (IOException | RuntimeException e) {
            // not a jar, or unreadable: the JDK skips it too
        }
        return named;
    }

    private static void openWhatTheJdkOpensLazily() {
        try {
            for (ClassLoader loader : new ClassLoader[] {FirstUse.class.getClassLoader(),
                    ClassLoader.getSystemClassLoader()}) {
                if (loader == null) continue;
                Enumeration<URL> none = loader.getResources("META-INF/org.cuvmm.first-use");
                while (none.hasMoreElements()) none.nextElement();
            }
        } catch (IOException | RuntimeException e) {
            // a jar that cannot be read: its classes fail as they would without cuvmm
        }
        try {
            System.getLogger("org.cuvmm").isLoggable(System.Logger.Level.DEBUG); // the logging configuration
            java.security.Security.getProperty("securerandom.source"); // java.security
            java.time.ZoneId.systemDefault().getRules(); // lib/tzdb.dat
            java.util.TimeZone.getDefault();
        } catch (RuntimeException | Error e) {
            // No time-zone data or configuration here: the JVM meets that as it would without cuvmm.
        }
    }
}
