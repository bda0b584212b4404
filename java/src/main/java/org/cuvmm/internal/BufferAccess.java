package org.cuvmm.internal;

import java.security.CodeSource;
import java.util.Objects;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * The door through which cuvmm's own packages (the pool) reach package-private parts of
 * {@code org.cuvmm} without making them public API: the JDK's "shared secrets" pattern.
 *
 * <p>Guarded, because on the class path this public class is reachable by anyone (on the
 * module path its package is exported to {@code org.cuvmm.ipc} only): {@link #install}
 * accepts exactly one call, from {@link VirtualMemoryBuffer}'s static initializer, and
 * {@link #get} hands the bridge only to classes loaded from the same code source (jar or
 * classes directory) and module as this class. Any other caller gets
 * {@link IllegalCallerException}.
 *
 * <p>What the guard does not do, on the class path: every class in the same jar (or classes
 * directory) passes it, so a shaded or "fat" jar that bundles cuvmm with the application
 * admits every class in it; and reflection ({@code setAccessible} on the {@code bridge}
 * field, or on package-private core code directly) bypasses it, as it bypasses any
 * class-path encapsulation. It keeps honest code from calling in by mistake. The real
 * boundary is the module path, where {@code org.cuvmm.internal} is not exported to
 * applications and is not open to reflection.
 */
public final class BufferAccess {
    /** What the core offers to its own other packages. */
    public interface Bridge {
        /** A new range of at least {@code size} bytes from {@code resource} (driver calls). */
        NativeRangeHandle allocateRange(VirtualMemoryResource resource, long size);

        /**
         * A buffer of logical {@code size} over {@code range}; closing it hands {@code range}
         * to {@code recycler}. No cleaner watches it: the recycler (the pool) watches for its
         * leak itself.
         */
        VirtualMemoryBuffer wrap(VirtualMemoryResource resource, NativeRangeHandle range, long size,
                                 BufferRecycler recycler);

        /**
         * Where a buffer is being allocated, when {@link org.cuvmm.LeakDetection} records
         * allocation sites; else null.
         */
        Throwable captureSite();

        /**
         * Logs and counts the leak of a buffer of {@code pool} ("pool frames (local)") at
         * {@code address} of {@code size} bytes with {@link org.cuvmm.LeakDetection}'s warning
         * ({@code site}: from {@link #captureSite()}, or null when the pool did not sample it).
         */
        void reportLeak(long address, long size, String pool, Throwable site);

        /**
         * What identifies {@code stream}'s queue: the stream itself, or for
         * {@link org.cuvmm.Stream#perThread(int)} an object of the calling thread's (the
         * per-thread stream is a different queue on every thread). Two keys are the same object
         * exactly when work queued with them is ordered.
         */
        Object streamKey(org.cuvmm.Stream stream);

        /**
         * Runs {@code action} on cuvmm's release thread ("cuvmm-stream-release") once every event
         * of {@code events} has completed (a failed wait is logged and the action runs anyway);
         * never blocks the caller, except when that thread cannot be started: then the caller
         * waits for the events ({@code cuEventSynchronize}) and runs {@code action} itself, and
         * it is logged (on a host-function thread the action stays queued for the next start
         * instead). Never throws. The events stay open until then.
         */
        void afterEvents(String what, java.util.List<org.cuvmm.Event> events, Runnable action);

        /**
         * Waits (bounded) until cuvmm's release thread has no pending task (for tests: tasks
         * finish as their events complete, not in the order handed in).
         *
         * @return false when tasks were still pending after {@code millis}
         */
        boolean awaitReleasesIdle(long millis) throws InterruptedException;

        /**
         * Records on {@code buffer}, without a driver call, that work queued on {@code stream}
         * up to {@code event}'s last record may still use its memory (a pool slot's pending
         * free): its synchronous operations and {@code close()} wait for it. {@code event} stays
         * the caller's, open until the buffer is released; the buffer never records it.
         */
        void seedStreamUse(VirtualMemoryBuffer buffer, org.cuvmm.Stream stream, org.cuvmm.Event event);

        /**
         * What a watch on {@code buffer} keeps to learn, once the buffer is unreachable, which
         * stream work was recorded on it (it does not reach the buffer). For {@link
         * #afterRecordedUses}.
         */
        Object recordedUsesToken(VirtualMemoryBuffer buffer);

        /**
         * Runs {@code action} once the stream work recorded on the (now unreachable) buffer of
         * {@code token} has completed: at once on this thread when none was recorded, else on
         * cuvmm's release thread, never blocking the caller (unless that thread cannot be
         * started: see {@link #afterEvents}); then gives the recorded events
         * back. A leaked pooled buffer's memory is recycled only after its queued work, as a
         * leaked unpooled buffer's cleaner waits for it.
         */
        void afterRecordedUses(Object token, Runnable action);
    }

    private static final StackWalker WALKER = StackWalker.getInstance(StackWalker.Option.RETAIN_CLASS_REFERENCE);
    private static final Object INSTALL_LOCK = new Object();
    private static volatile Bridge bridge;

    private BufferAccess() {}

    /**
     * Installs the bridge. Only {@link VirtualMemoryBuffer} may call it, once.
     *
     * @throws IllegalCallerException when called from any other class
     * @throws IllegalStateException when a bridge is already installed
     */
    public static void install(Bridge b) {
        Class<?> caller = WALKER.getCallerClass();
        if (caller != VirtualMemoryBuffer.class) {
            throw new IllegalCallerException("BufferAccess.install: caller " + caller.getName() + " (expected: "
                    + VirtualMemoryBuffer.class.getName() + "; the bridge is cuvmm's own and installs itself)");
        }
        Objects.requireNonNull(b, "b");
        synchronized (INSTALL_LOCK) {
            if (bridge != null) throw new IllegalStateException("BufferAccess.install: a bridge is already installed");
            bridge = b;
        }
    }

    /**
     * The bridge, installing it first if {@link VirtualMemoryBuffer} is not yet initialized.
     *
     * @throws IllegalCallerException when the caller is not cuvmm's own code (same code
     *     source and module as this class)
     */
    public static Bridge get() {
        Class<?> caller = WALKER.getCallerClass();
        if (!isOwnCode(caller)) {
            throw new IllegalCallerException("BufferAccess.get: caller " + caller.getName() + " (expected: a class of "
                    + "cuvmm's own jar; the bridge is internal)");
        }
        Bridge b = bridge;
        if (b == null) {
            try {
                Class.forName(VirtualMemoryBuffer.class.getName(), true, BufferAccess.class.getClassLoader());
            } catch (ClassNotFoundException e) {
                throw new IllegalStateException(e);
            }
            b = bridge;
        }
        return b;
    }

    /** Same module, class loader and code source (jar or classes directory) as this class. */
    private static boolean isOwnCode(Class<?> caller) {
        if (caller.getModule() != BufferAccess.class.getModule()) return false;
        if (caller.getClassLoader() != BufferAccess.class.getClassLoader()) return false;
        CodeSource mine = BufferAccess.class.getProtectionDomain().getCodeSource();
        CodeSource theirs = caller.getProtectionDomain().getCodeSource();
        if (mine == null || theirs == null) return mine == theirs;
        return Objects.equals(mine.getLocation(), theirs.getLocation());
    }
}
