package org.cuvmm.examples;

import java.util.concurrent.CountDownLatch;

/**
 * Ctrl-C (or SIGTERM) for a producer's main thread: a shutdown hook that only counts down
 * {@link #stop} and then waits for the main thread to finish its own cleanup (close the
 * server, which removes the socket file and tells consumers), for at most the given time.
 *
 * <p>Why a hook that waits: the JVM runs shutdown hooks and then halts, whatever other
 * threads are doing. A hook that did the cleanup itself would race the main thread; one that
 * did not wait would let the JVM halt with the socket file still there and consumers never
 * told. Used by {@link SharedProducer} and {@link PooledProducer}.
 */
final class StopOnSignal {
    /** Counted down when the JVM starts shutting down (a signal, or System.exit elsewhere). */
    final CountDownLatch stop = new CountDownLatch(1);
    private final Thread hook;

    private StopOnSignal(String program, long waitMillis) {
        Thread main = Thread.currentThread();
        hook = new Thread(() -> {
            stop.countDown();
            try {
                main.join(waitMillis);
            } catch (InterruptedException ignored) {
                // halting anyway
            }
            if (main.isAlive()) {
                System.err.println(program + ": the cleanup did not finish within " + waitMillis
                        + " ms of the stop; halting anyway (the socket file may be left behind)");
            }
        }, program + " shutdown");
    }

    /** Installs the hook for the calling (main) thread; it waits up to {@code waitMillis} for that thread. */
    static StopOnSignal install(String program, long waitMillis) {
        StopOnSignal s = new StopOnSignal(program, waitMillis);
        Runtime.getRuntime().addShutdownHook(s.hook);
        return s;
    }

    /**
     * Removes the hook after a run that ended by itself; false when the JVM is already
     * shutting down (the hook is what stopped the run and is waiting for the main thread to
     * end). Then the caller must return rather than call {@code System.exit}: exit while
     * shutdown hooks run blocks for good (the hook's join would time out first, and the JVM
     * halt only seconds later).
     */
    boolean remove() {
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
            return true;
        } catch (IllegalStateException shuttingDown) {
            return false;
        }
    }
}
