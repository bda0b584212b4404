package org.cuvmm;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * The Java side of host functions (native/cuvmm/stream.hpp, "host functions", says why the
 * driver calls a native trampoline instead of Java).
 *
 * <p>{@link #launch} gives the Runnable a token and queues the trampoline with it
 * ({@code cuLaunchHostFunc}). When the stream reaches it, the trampoline posts the token and
 * blocks the stream. The dispatcher thread ("cuvmm-host-functions", daemon) takes the token and
 * runs the Runnable on a pool thread ("cuvmm-host-function-N", daemon, one per host function
 * running at that moment, idle ones kept 30 s), so a slow host function never holds the
 * dispatcher. That two streams' host functions may run at the same time is not promised (cuda.h,
 * cuLaunchHostFunc: host functions of independent streams may be serialized, and must not wait
 * for unordered work). After the Runnable
 * returns (or throws: the exception is logged and kept for the stream's next synchronize), the
 * token is reported done and the stream continues.
 *
 * <p>The driver thread never enters the JVM, and no Java exception crosses native code.
 */
final class HostFunctions {
    private static final System.Logger LOG = System.getLogger("org.cuvmm");
    private static final AtomicLong TOKENS = new AtomicLong();
    private static final ConcurrentHashMap<Long, Task> TASKS = new ConcurrentHashMap<>();
    private static volatile Thread dispatcher;
    private static final AtomicInteger THREADS = new AtomicInteger();
    private static final ExecutorService RUNNERS = new ThreadPoolExecutor(0, Integer.MAX_VALUE, 30, TimeUnit.SECONDS,
            new SynchronousQueue<>(), r -> {
                Thread t = new Thread(r, "cuvmm-host-function-" + THREADS.incrementAndGet());
                t.setDaemon(true);
                return t;
            });

    private HostFunctions() {}

    private static final class Task {
        final Stream stream;
        final Runnable action;
        final Stream.HostFailures failures; // the launching thread's, for the per-thread stream

        Task(Stream stream, Runnable action) {
            this.stream = stream;
            this.action = action;
            this.failures = stream.hostFailuresOfCaller();
        }
    }

    /** Queues {@code action} on {@code stream}; the caller holds a use of the stream. */
    static void launch(Stream stream, Runnable action) {
        refuseInsideHostFunction("Stream.launchHostFunction");
        startDispatcher();
        long token = TOKENS.incrementAndGet();
        TASKS.put(token, new Task(stream, action));
        NativeStatus st = NativeCalls.status();
        NativeApi.launch_host_function(stream.nativeHandle(), token, st);
        if (st.code() != 0) {
            TASKS.remove(token);
            throw NativeCalls.toException(st);
        }
    }

    /** {@link NativeCalls#refuseInsideHostFunction}: for calls that must refuse before changing state. */
    static void refuseInsideHostFunction(String call) { NativeCalls.refuseInsideHostFunction(call); }

    /** True while the calling thread runs a host function. */
    static boolean insideHostFunction() { return NativeCalls.insideHostFunction(); }

    /** Host functions posted to Java or running there now (for tests). */
    static long pending() { return NativeApi.host_functions_pending(); }

    private static void startDispatcher() {
        if (dispatcher != null) return;
        synchronized (HostFunctions.class) { // no driver call under this lock
            if (dispatcher != null) return;
            Thread t = new Thread(HostFunctions::dispatch, "cuvmm-host-functions");
            t.setDaemon(true);
            t.start();
            dispatcher = t;
        }
    }

    private static void dispatch() {
        for (;;) {
            // Blocks in native code (the JVM can collect meanwhile); bounded so the thread
            // never sits in one native call forever.
            long token = NativeApi.next_host_function(1000);
            if (token == 0) continue;
            Task task = TASKS.remove(token);
            if (task == null) { // cannot happen: launch registers before queueing
                NativeApi.host_function_done(token);
                continue;
            }
            try {
                RUNNERS.execute(() -> run(token, task));
            } catch (RuntimeException | Error e) { // no thread could be made: run it here
                run(token, task);
            }
        }
    }

    /** {@code t}'s toString(), or its class when that throws (an application's exception may). */
    static String describe(Throwable t) {
        try {
            return String.valueOf(t);
        } catch (Throwable e) {
            return t.getClass().getName() + " (its toString() threw " + e.getClass().getName() + ")";
        }
    }

    private static void run(long token, Task task) {
        NativeCalls.setInHostFunction(true); // from here every driver call of cuvmm's refuses (NativeCalls.status)
        try {
            task.action.run();
        } catch (Throwable t) {
            task.failures.add(t); // first: nothing below (a toString that throws, a logger's failure) may lose it
            try {
                LOG.log(System.Logger.Level.WARNING, "a host function on " + task.stream + " threw " + describe(t)
                        + (task.stream.isClosed() ? "; the stream is closed, so no synchronize() will report it"
                                : "; " + task.stream.failureReporter()), t);
            } catch (Throwable logFailed) {
                // kept for synchronize() above; only the log line is lost
            }
        } finally {
            NativeCalls.setInHostFunction(false);
            NativeApi.host_function_done(token);
        }
    }
}
