package org.cuvmm.internal;

import org.cuvmm.CudaException;
import org.cuvmm.internal.jni.JavaCppSettings;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * Turns a failed {@link NativeStatus} into a {@link CudaException}. Each thread reuses one
 * status object, so a call costs no allocation on success.
 */
public final class NativeCalls {
    static {
        JavaCppSettings.apply(); // before NativeStatus (a Pointer) initializes
    }

    /** Per thread: the reused status object, and whether the thread runs a host function now. */
    private static final class PerThread {
        final NativeStatus status = new NativeStatus();
        boolean inHostFunction;
    }

    private static final ThreadLocal<PerThread> THREAD = ThreadLocal.withInitial(PerThread::new);
    private static final StackWalker WALKER = StackWalker.getInstance(StackWalker.Option.RETAIN_CLASS_REFERENCE);

    private NativeCalls() {}

    /**
     * The calling thread's status object, to pass to one native call and then {@link #check}.
     * Every native call that reaches the driver takes one here, which makes this the one place
     * that refuses driver calls from a host function.
     *
     * @throws IllegalStateException when the calling thread runs a host function (see
     *     {@link #refuseInsideHostFunction})
     */
    public static NativeStatus status() {
        PerThread t = THREAD.get();
        if (t.inHostFunction) throw refusal(callerName());
        return t.status;
    }

    /**
     * The calling thread's status object for a native call that reaches no driver (an fd
     * duplicated for {@code BufferDescriptor.fromFds}): such a call is allowed in a host
     * function, where {@link #status()} refuses. Only for calls that make no CUDA call.
     */
    public static NativeStatus statusOfNonDriverCall() { return THREAD.get().status; }

    /**
     * Marks the calling thread as running a host function ({@code true}) or no longer
     * ({@code false}). Only cuvmm's host-function runner calls it, around the Runnable. The
     * reaper thread ("cuvmm-stream-release") never runs host functions, so the releases handed
     * to it make their driver calls there.
     */
    public static void setInHostFunction(boolean inside) { THREAD.get().inHostFunction = inside; }

    /** True while the calling thread runs a host function. */
    public static boolean insideHostFunction() { return THREAD.get().inHostFunction; }

    /**
     * Throws when the calling thread runs a host function; for calls that must refuse before
     * they change any state (a close that would otherwise be half done).
     *
     * @param call names the public call refused, for the message; null: the outermost cuvmm
     *     method on the stack
     */
    public static void refuseInsideHostFunction(String call) {
        if (THREAD.get().inHostFunction) throw refusal(call == null ? callerName() : call);
    }

    private static IllegalStateException refusal(String call) {
        return new IllegalStateException(call + ": called from a host function (expected: no CUDA call inside a host "
                + "function: cuda.h, cuLaunchHostFunc, says host functions must not make CUDA API calls, and a wait "
                + "for work queued behind the host function would never end; close() of buffers, pinned buffers, "
                + "events, streams and pools is allowed there and hands the release to another thread of cuvmm's. "
                + "Hand other work to another thread)");
    }

    /**
     * The outermost cuvmm method on the stack (the public call the application made), for the
     * message; JDK frames in between are skipped. Only on the refusal path.
     */
    private static String callerName() {
        java.security.CodeSource mine = NativeCalls.class.getProtectionDomain().getCodeSource();
        return WALKER.walk(frames -> {
            String last = "a cuvmm call";
            for (var it = frames.iterator(); it.hasNext(); ) {
                StackWalker.StackFrame f = it.next();
                Class<?> c = f.getDeclaringClass();
                if (c.getClassLoader() == null || c.getName().startsWith("java.") || c.getName().startsWith("jdk.")) {
                    continue; // JDK code between cuvmm frames (a computeIfAbsent, a lambda's plumbing)
                }
                java.security.CodeSource cs = c.getProtectionDomain().getCodeSource();
                boolean own = mine == null ? cs == null : cs != null && java.util.Objects.equals(mine.getLocation(),
                        cs.getLocation());
                if (!own) break;
                String n = c.getSimpleName();
                if (n.isEmpty()) n = c.getName().substring(c.getName().lastIndexOf('.') + 1);
                last = n + "." + f.getMethodName();
            }
            return last;
        });
    }

    /** Throws a {@link CudaException} built from {@code status} if it holds an error. */
    public static void check(NativeStatus status) {
        int code = status.code();
        if (code != 0) throw toException(status);
    }

    public static CudaException toException(NativeStatus status) {
        int code = status.code();
        String message = status.message();
        return new CudaException(code, status.name(), status.call(), status.step(), message);
    }
}
