package org.cuvmm;

import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicLong;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;

/**
 * Finds buffers that were never closed. Every buffer a resource makes is registered with a
 * {@link Cleaner}; when the garbage collector finds one unreachable and still open, its memory
 * is released and a warning is logged (logger {@code org.cuvmm}) naming its address and size.
 * Pooled buffers are watched by their {@link org.cuvmm.pool.VirtualMemoryPool} instead, which
 * logs the same warning (counted here too) and takes the memory back into its accounting.
 *
 * <p>Where it was allocated is recorded only when the system property
 * {@value #CAPTURE_PROPERTY} is {@code true}, since capturing a stack trace on every
 * allocation costs far more than the allocation itself on a pool's fast path.
 */
public final class LeakDetection {
    /** System property that turns on allocation-site capture. */
    public static final String CAPTURE_PROPERTY = "cuvmm.leakDetection.captureStack";

    static final Cleaner CLEANER = Cleaner.create(runnable -> {
        Thread t = new Thread(runnable, "cuvmm-cleaner");
        t.setDaemon(true);
        return t;
    });

    /**
     * The logger, looked up when a record is written, not when this class initializes: a
     * public entry point's first use at the fd limit must not touch logging before the
     * first-use check ({@code org.cuvmm.internal.FirstUse}), since logging's first use there
     * breaks it, and {@code java.security}, for the life of the JVM (an independent probe).
     */
    private static System.Logger logger() {
        return System.getLogger("org.cuvmm");
    }
    private static final AtomicLong LEAKS = new AtomicLong();
    private static final int RECENT_LIMIT = 16;
    private static final Deque<String> RECENT = new ArrayDeque<>();

    private LeakDetection() {}

    /**
     * True when the system property {@value #CAPTURE_PROPERTY} is {@code true} (as
     * {@link Boolean#getBoolean}: any other value, or none, is false); read at each allocation.
     */
    public static boolean capturingAllocationSites() { return Boolean.getBoolean(CAPTURE_PROPERTY); }

    /** Leaks found (by the cleaner, or by a pool for its buffers) since the process started. */
    public static long reportedLeaks() { return LEAKS.get(); }

    /** The text of the most recent leak report, or null. */
    public static String lastReport() {
        synchronized (RECENT) {
            return RECENT.peekLast();
        }
    }

    /** The most recent leak reports (at most 16), oldest first. */
    public static List<String> recentReports() {
        synchronized (RECENT) {
            return List.copyOf(RECENT);
        }
    }

    static Throwable captureSite() {
        return capturingAllocationSites() ? new Throwable("allocation site") : null;
    }

    /**
     * The index of the first frame of {@code frames} outside this library (the allocation's
     * caller), or 0 when every frame is inside it. cuvmm's own frames (this class, the buffer's
     * constructor, the resource's or pool's allocate) say nothing to the reader: a report
     * starts at the caller's line. "Inside" means: a class with this class's code source, that
     * is the same jar or classes directory, looked up by name without initializing it. A
     * class that cannot be looked up (another class loader) counts as outside; so does
     * cuvmm's other modules (vmm-ipc), whose frames name the call that made the buffer.
     */
    static int firstCallerFrame(StackTraceElement[] frames) {
        java.security.CodeSource own = LeakDetection.class.getProtectionDomain().getCodeSource();
        if (own == null) return 0;
        ClassLoader loader = LeakDetection.class.getClassLoader();
        for (int i = 0; i < frames.length; i++) {
            String name = frames[i].getClassName();
            if (!name.startsWith("org.cuvmm.")) return i;
            try {
                if (!own.equals(Class.forName(name, false, loader).getProtectionDomain().getCodeSource())) return i;
            } catch (ClassNotFoundException | LinkageError | SecurityException e) {
                return i;
            }
        }
        return 0;
    }

    /** Why a pooled buffer has no site with capture on: the pool samples. */
    static final String POOL_SAMPLES = "a pool records 1 allocation in n (VirtualMemoryPool.Builder.leakSampleRate(n)); "
            + "build it with leakSampleRate(1) to record every one";
    /** Why a buffer that records its site when capture is on has none: capture came later. */
    static final String SET_AFTER = "the property was set after the allocation";
    /** PinnedHostBuffer records no site. */
    static final String NOT_RECORDED_HERE = "this kind of object does not record where it was allocated";

    static void report(String what, Throwable site) {
        report(what, site, SET_AFTER);
    }

    /**
     * Logs and counts a leak. {@code whyNoSite} says, for the report, why {@code site} is null
     * while {@value #CAPTURE_PROPERTY} is on (an independent probe: the report advised setting
     * the property already set).
     */
    static void report(String what, Throwable site, String whyNoSite) {
        StringBuilder sb = new StringBuilder("LEAK: ").append(what)
                .append(" was never closed; the garbage collector found it, and cuvmm releases it (after the stream ")
                .append("work recorded on it, if any). ");
        if (site == null && capturingAllocationSites()) {
            sb.append("Its allocation site was not recorded although -D").append(CAPTURE_PROPERTY).append(" is true: ")
                    .append(whyNoSite).append('.');
        } else if (site == null) {
            sb.append("Run with -D").append(CAPTURE_PROPERTY).append("=true to record where it was allocated.");
        } else {
            sb.append("It was allocated at:");
            StackTraceElement[] frames = site.getStackTrace();
            int first = firstCallerFrame(frames);
            for (int i = first; i < frames.length; i++) sb.append("\n\tat ").append(frames[i]);
            if (first > 0) sb.append("\n\t(").append(first).append(" frames inside cuvmm omitted before the first)");
        }
        String text = sb.toString();
        synchronized (RECENT) {
            if (RECENT.size() == RECENT_LIMIT) RECENT.removeFirst();
            RECENT.addLast(text);
        }
        LEAKS.incrementAndGet();
        try {
            logger().log(System.Logger.Level.WARNING, text);
        } catch (RuntimeException | Error e) {
            // Never throws: the caller releases the memory after this, and (for a buffer with
            // recorded stream work) waits for that work first; a logging failure (a handler that
            // cannot open a file at the fd limit: a review) must skip neither.
            System.err.println(text + " (logging it failed: " + e + ")");
        }
    }
}
