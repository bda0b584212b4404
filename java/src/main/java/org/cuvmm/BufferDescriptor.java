package org.cuvmm;

import java.util.Arrays;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;

import org.cuvmm.internal.AcquireState;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.NativeFirstLoad;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * What another process needs to map a buffer: one shareable handle (a POSIX fd) per
 * physical allocation in address order, each allocation's size, the buffer's size (which
 * may be less than their sum) and the handle type.
 *
 * <p>A descriptor <em>owns</em> its fds and closes them in {@link #close()}, or, if it is
 * never closed, when the garbage collector finds it unreachable (a {@link java.lang.ref.Cleaner},
 * with a leak warning). Send the fds by any means (the vmm-ipc sharing protocol, or your own
 * {@code SCM_RIGHTS} code), then close the descriptor: the receiver gets its own copies. On
 * the receiving side, {@link #fromFds} duplicates the ints it is given, so the caller keeps
 * (and closes) its originals.
 *
 * <p><b>Raw fds are only valid while their descriptor is open and reachable.</b> The ints
 * {@link #fds()} returns are numbers, not references: they keep nothing alive. In
 * {@code send(buffer.exportDescriptor().fds())} nothing refers to the descriptor once
 * {@code fds()} returns, so the garbage collector may close its fds during the send, and the
 * kernel may by then have given those numbers to unrelated files, which would be sent
 * instead. Three safe patterns:
 * <ul>
 * <li>hold the descriptor in a try-with-resources block around every use of its fds (the
 *     {@code close()} at the end keeps it reachable);
 * <li>{@link #useFds}, which keeps the descriptor reachable <em>and open</em> while the
 *     action runs (a {@code close()} meanwhile never blocks: it takes effect when the action
 *     returns);
 * <li>{@link #takeFds()}, which hands the ints to the caller, who owns and closes them.
 * </ul>
 * Every cuvmm API that takes a descriptor ({@code VirtualMemoryResource.importBuffer}, and
 * vmm-ipc's sharing server, which holds each descriptor until its fds are sent) keeps it
 * reachable until it is done with the fds.
 *
 * <pre>{@code
 * try (BufferDescriptor d = buffer.exportDescriptor()) {
 *     d.useFds(fds -> send(socket, fds, d.sizes(), d.size()));   // your transport
 * }
 * // other process:
 * try (BufferDescriptor d = BufferDescriptor.fromFds(fds, sizes, HandleType.POSIX_FD, size);
 *      VirtualMemoryBuffer view = resource.importBuffer(d)) { ... }
 * }</pre>
 *
 * <p>Thread-safe; {@code close()} is idempotent.
 */
public final class BufferDescriptor implements AutoCloseable {
    private final int[] fds;
    private final long[] sizes;
    /** fromFds: the caller's fds these are duplicates of (for messages); null otherwise. */
    private final int[] duplicatedFrom;
    private final long size;
    private final HandleType handleType;
    // Imports register a use, so close() cannot close fds an import is reading: it
    // defers to the end of that import instead (the same state word as a buffer's).
    private final AcquireState state = new AcquireState();
    private volatile boolean closePending;
    /**
     * True from just before takeFds closes the state word until it has set {@code closer.taken}
     * (or failed): a use refused in that window names takeFds, not close(). Messages only:
     * the cleaner never reads it (it reads {@code closer.taken}, set only once the take won).
     */
    private volatile boolean taking;
    /** For tests: run by takeFds right after it closed the state word, before it records the take. */
    static volatile Runnable takeWindowHook;
    private final FdCloser closer;
    private final Cleaner.Cleanable cleanable;

    /** Takes ownership of {@code fds} (already duplicated or freshly exported). */
    BufferDescriptor(int[] fds, long[] sizes, long size, HandleType handleType) {
        this(fds, sizes, size, handleType, null);
    }

    private BufferDescriptor(int[] fds, long[] sizes, long size, HandleType handleType, int[] duplicatedFrom) {
        this.duplicatedFrom = duplicatedFrom;
        this.fds = fds;
        this.sizes = sizes;
        this.size = size;
        this.handleType = handleType;
        this.closer = new FdCloser(fds, size, LeakDetection.captureSite());
        this.cleanable = LeakDetection.CLEANER.register(this, closer);
    }

    /** Closes the fds exactly once: from close(), or from the cleaner for a leaked descriptor. */
    private static final class FdCloser implements Runnable {
        private final int[] fds;
        private final long size;
        private final Throwable site;
        volatile boolean explicit;
        // Set by takeFds before it deregisters: the caller owns the ints, so nothing closes them here.
        volatile boolean taken;

        FdCloser(int[] fds, long size, Throwable site) {
            this.fds = fds;
            this.size = size;
            this.site = site;
        }

        @Override
        public void run() {
            if (taken) return;
            try {
                if (!explicit) {
                    LeakDetection.report("BufferDescriptor[" + fds.length + " fds, size " + size + "] (its fds)", site);
                }
            } finally {
                for (int fd : fds) NativeApi.fd_close(fd);
            }
        }
    }

    /**
     * Builds a descriptor from fds received by the caller's own means. Each fd is
     * <em>duplicated</em>: the caller keeps and closes its originals.
     *
     * @param fds one open fd per physical allocation, address order
     * @param sizes the size of each allocation in bytes (positive)
     * @param handleType how the fds were exported ({@link HandleType#POSIX_FD})
     * @param size the buffer's size: at most the sum of {@code sizes}
     * @throws NullPointerException when {@code fds}, {@code sizes} or {@code handleType} is
     *     null (the message names it)
     * @throws IllegalArgumentException naming the argument and value for any other bad input,
     *     including an int that is not an open fd; nothing stays open
     * @throws CudaException when duplicating fails (for example at the fd limit), or when this
     *     is the process's first native call at the fd limit (as {@link Driver#get()})
     */
    public static BufferDescriptor fromFds(int[] fds, long[] sizes, HandleType handleType, long size) {
        checkArguments(fds, sizes, handleType, size);
        int[] owned = new int[fds.length];
        int made = 0;
        try {
            // dup(2) only, no CUDA call: allowed in a host function (it was refused there as one,
            // with a message saying a CUDA call, while adoptFds, which makes none either, worked).
            NativeStatus st = NativeCalls.statusOfNonDriverCall();
            for (; made < fds.length; made++) {
                owned[made] = NativeApi.fd_dup(fds[made], st);
                NativeCalls.check(st);
            }
        } catch (RuntimeException e) {
            for (int i = 0; i < made; i++) NativeApi.fd_close(owned[i]);
            throw e;
        }
        return new BufferDescriptor(owned, sizes.clone(), size, handleType, fds.clone());
    }

    /**
     * For an import's error message: which of the caller's fds this descriptor's fds
     * duplicate ({@link #fromFds}), since the driver names the duplicate it was given (an
     * independent probe: "fd 25 is not open read-write" for the caller's fd 0). "" otherwise.
     */
    String duplicatesNote() {
        int[] from = duplicatedFrom;
        return from == null ? "" : "this descriptor's fds " + Arrays.toString(fds) + " are fromFds' duplicates of "
                + "the caller's fds " + Arrays.toString(from) + ", in that order";
    }

    /**
     * Like {@link #fromFds} but takes ownership of the ints instead of duplicating them: for
     * a receiver that already owns the fds (received over {@code SCM_RIGHTS}) and would only
     * close its originals after a duplicate. On success the descriptor closes them; if this
     * throws, the caller still owns them. Never adopt the {@link #fds()} of a descriptor that
     * is still open: it owns them too and would close them again (its cleaner does, even if
     * it is abandoned), by then possibly another file under the same number. Take them out
     * with {@link #takeFds()} first.
     *
     * @throws NullPointerException as {@link #fromFds}: when {@code fds}, {@code sizes} or
     *     {@code handleType} is null (the message names it)
     * @throws IllegalArgumentException as {@link #fromFds}, for an int given twice (the
     *     descriptor closes each of its ints once: closing one number twice would close
     *     whatever file another thread opened under it in between), and on the host driver for
     *     the driver's own memfd of a live allocation (not the caller's to close)
     * @throws CudaException {@code CUDA_ERROR_OUT_OF_MEMORY} when this is the process's first
     *     native call and the process is at its file descriptor limit (as {@link Driver#get()})
     */
    public static BufferDescriptor adoptFds(int[] fds, long[] sizes, HandleType handleType, long size) {
        checkArguments(fds, sizes, handleType, size);
        int[] sorted = fds.clone();
        Arrays.sort(sorted);
        for (int i = 1; i < sorted.length; i++) {
            if (sorted[i] == sorted[i - 1]) {
                throw new IllegalArgumentException("fds: " + Arrays.toString(fds) + " (expected: distinct fds; fd "
                        + sorted[i] + " is given twice, and an adopted fd is closed once per entry: pass each fd once, "
                        + "or use fromFds, which duplicates them)");
            }
        }
        for (int i = 0; i < fds.length; i++) {
            // Adopting means closing it later: the host driver's own memfd closed (and its
            // number reused) crashed the JVM at the driver's next use of the memory (SIGBUS: an
            // independent probe). The cuda driver's internal fds cannot be told apart this way.
            if (NativeApi.fd_owned_by_driver(fds[i])) {
                throw new IllegalArgumentException("fds[" + i + "]: " + fds[i] + " (expected: an fd the caller owns; "
                        + "this is the host driver's own memfd of a live allocation, which adopting would close under "
                        + "the driver: export a descriptor of the buffer instead, or use fromFds, which duplicates)");
            }
        }
        return new BufferDescriptor(fds.clone(), sizes.clone(), size, handleType);
    }

    private static void checkArguments(int[] fds, long[] sizes, HandleType handleType, long size) {
        Checks.notNull("fds", fds);
        Checks.notNull("sizes", sizes);
        Checks.notNull("handleType", handleType);
        if (handleType != HandleType.POSIX_FD) {
            throw new IllegalArgumentException("handleType: " + handleType + " (expected: POSIX_FD; only POSIX fds "
                    + "travel as ints)");
        }
        if (fds.length != sizes.length) {
            throw new IllegalArgumentException("fds: " + fds.length + " entries, sizes: " + sizes.length
                    + " entries (expected: one size per fd)");
        }
        long total = 0;
        for (int i = 0; i < sizes.length; i++) {
            if (sizes[i] <= 0) {
                throw new IllegalArgumentException("sizes[" + i + "]: " + sizes[i] + " (expected: > 0, the allocation's size in bytes)");
            }
            if (total > Long.MAX_VALUE - sizes[i]) {
                throw new IllegalArgumentException("sizes: " + Arrays.toString(sizes) + " (expected: a sum that fits in a long)");
            }
            total += sizes[i];
        }
        if (size < 0 || size > total) {
            throw new IllegalArgumentException("size: " + size + " (expected: 0 to " + total + ", the sum of sizes)");
        }
        NativeFirstLoad.ensure(); // fromFds and adoptFds can make a process's first native call
        for (int i = 0; i < fds.length; i++) {
            if (!NativeApi.fd_valid(fds[i])) {
                throw new IllegalArgumentException("fds[" + i + "]: " + fds[i] + " (expected: an open file descriptor "
                        + "of this process)");
            }
        }
    }

    /**
     * The fds, address order: still owned by this descriptor (do not close them yourself).
     * The ints are valid only while this descriptor is open <em>and reachable</em>: once
     * nothing refers to it, the garbage collector may close them (and the kernel reuse the
     * numbers) even before {@code close()}. Use them inside a try-with-resources block that
     * holds the descriptor, or use {@link #useFds} or {@link #takeFds()} (see the class
     * documentation). This method cannot do it for you: it keeps the descriptor reachable
     * only while it copies the array, and {@code send(d.fds())}-style code that drops the
     * descriptor afterwards is not protected.
     *
     * @throws IllegalStateException when closed, or after {@link #takeFds()}
     */
    public int[] fds() {
        requireOpen();
        int[] copy = fds.clone();
        Reference.reachabilityFence(this);
        return copy;
    }

    /**
     * What {@link #useFds} runs: receives the fds, may throw {@code X}.
     *
     * @param <X> the checked exception the action may throw (inferred from the lambda)
     */
    @FunctionalInterface
    public interface FdsConsumer<X extends Exception> {
        void accept(int[] fds) throws X;
    }

    /**
     * Runs {@code action} with this descriptor's fds (a fresh array, address order), keeping
     * the descriptor reachable and open until the action returns: the safe way to hand the
     * raw ints to a transport. A {@code close()} meanwhile, from any thread (the action
     * included), takes effect when the action returns, as it does during an import. The fds
     * still belong to this descriptor: the action must neither close them nor use them after
     * it returns (to keep them, duplicate them with {@link #fromFds} or call
     * {@link #takeFds()} instead).
     *
     * <pre>{@code
     * try (BufferDescriptor d = buffer.exportDescriptor()) {
     *     d.useFds(fds -> socket.send(frame, fds));   // an IOException passes through
     * }
     * }</pre>
     *
     * @param <X> what the action may throw
     * @throws IllegalStateException when closed, or after {@link #takeFds()}; the action
     *     does not run
     * @throws X whatever the action throws; the descriptor stays as it was (open, unless
     *     closed meanwhile)
     */
    public <X extends Exception> void useFds(FdsConsumer<X> action) throws X {
        Checks.notNull("action", action);
        int[] owned = beginImport();
        try {
            action.accept(owned.clone());
        } finally {
            endImport();
            Reference.reachabilityFence(this);
        }
    }

    /**
     * Transfers the fds to the caller, who owns them from now on and must close them (with
     * its own native code, or by {@link #adoptFds adopting} them into a descriptor and closing
     * that). The descriptor is then closed: {@code fds()}, {@code useFds}, {@code takeFds} and
     * imports throw, {@code close()} does nothing, and the garbage collector never closes the
     * ints. For code that passes the fds on to something that outlives the descriptor.
     *
     * @return the fds, address order
     * @throws IllegalStateException when closed or already taken, or while an import or a
     *     {@link #useFds} action is using the fds (take them after it returns); the
     *     descriptor is unchanged
     */
    public int[] takeFds() {
        if (closePending) throw closedException();
        taking = true;
        if (!state.tryCloseIfIdle()) {
            taking = false;
            if (state.isClosed()) throw closedException();
            throw new IllegalStateException(this + ": its fds are in use by " + state.activeUses() + " call(s) "
                    + "(importBuffer or useFds) (expected: no use in progress; take them after those return)");
        }
        // We alone closed the state word: no close(), import or cleaner can touch the fds now.
        Runnable hook = takeWindowHook;
        if (hook != null) hook.run();
        closer.taken = true; // before closePending: whoever sees closePending from here sees taken too
        closePending = true;
        taking = false;
        closer.explicit = true;
        cleanable.clean(); // deregisters; FdCloser.run sees taken and closes nothing
        int[] out = fds.clone();
        Reference.reachabilityFence(this);
        return out;
    }

    public long[] sizes() { return sizes.clone(); }

    public long size() { return size; }

    public HandleType handleType() { return handleType; }

    public int chunkCount() { return fds.length; }

    /** Sum of the allocation sizes: the extent an importer reserves. */
    public long mappedSize() {
        long total = 0;
        for (long s : sizes) total += s;
        return total;
    }

    /**
     * Closes every fd this descriptor owns. Idempotent; never throws. If an import or a
     * {@link #useFds} action is using the fds right now, they are closed when it ends. After
     * {@link #takeFds()} it does nothing (the caller owns the fds).
     */
    @Override
    public void close() {
        closePending = true;
        closeIfIdle();
    }

    private void closeIfIdle() {
        if (state.tryCloseIfIdle()) {
            closer.explicit = true;
            cleanable.clean();
        }
    }

    /** True once {@link #close()} was called (the fds may still close a moment later). */
    public boolean isClosed() { return closePending || state.isClosed(); }

    /**
     * Registers an import's (or a {@link #useFds} action's) use of the fds; pair with
     * {@link #endImport()}. The caller must keep this descriptor reachable until then.
     */
    int[] beginImport() { return beginImport(null); }

    /**
     * {@link #beginImport()} for this descriptor passed to another object's method as its
     * argument {@code argument} (importBuffer's "descriptor"): a closed or taken one is refused
     * with a message naming that argument and what to pass instead; null for this object's own
     * methods ({@link #useFds}).
     */
    int[] beginImport(String argument) {
        try {
            state.acquire(this);
        } catch (IllegalStateException e) {
            throw state.isClosed() ? closedException(argument) : e;
        }
        if (closePending) {
            endImport();
            throw closedException(argument);
        }
        return fds;
    }

    void endImport() {
        state.release();
        if (closePending) closeIfIdle();
    }

    private void requireOpen() {
        if (isClosed()) throw closedException();
    }

    /**
     * Why the fds cannot be used: taken (also while a winning takeFds is between closing the
     * state word and recording the take, unless close() was called too), else closed.
     */
    private IllegalStateException closedException() { return closedException(null); }

    /** {@link #closedException()}, naming {@code argument} (see {@link #beginImport(String)}) when not null. */
    private IllegalStateException closedException(String argument) {
        // Read in the reverse of takeFds' writes (taken, closePending, taking): a reader that
        // misses taken then still sees taking, and closePending only if close() set it.
        boolean takeInFlight = taking && !closePending;
        boolean taken = takeInFlight || closer.taken;
        if (argument != null) {
            // As every closed argument is named (AcquireState.acquireArgument): the argument,
            // the value, and what to pass instead (an independent probe: importBuffer of a
            // closed descriptor named neither the argument nor a remedy).
            return new IllegalStateException(argument + ": " + this + (taken
                    ? ": its fds were handed to the caller by takeFds() (expected: an open descriptor; import one "
                            + "that owns those fds: BufferDescriptor.adoptFds)"
                    : " is closed; its fds are gone (expected: an open descriptor; import before closing it, or "
                            + "export a new one)"));
        }
        return taken
                ? new IllegalStateException(this + ": its fds were handed to the caller by takeFds(); use those")
                : new IllegalStateException(this + " is closed; its fds are gone");
    }

    @Override
    public String toString() {
        return "BufferDescriptor[" + handleType + ", size " + size + ", chunks " + Arrays.toString(sizes)
                + (taking && !closePending || closer.taken ? ", fds taken" : isClosed() ? ", closed" : "") + "]";
    }
}
