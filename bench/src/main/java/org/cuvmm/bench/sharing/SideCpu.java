package org.cuvmm.bench.sharing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Stream;

/**
 * CPU time per side of a sharing round, and the process's context switches: what the
 * steady-state report (SharingV2Report) counts beside its timings. On one CPU the kernel's
 * wake-up preemption depends on how evenly the two sides use the CPU between messages
 * (issue 11: an uneven split adds context switches per round; the C++ ping-pong's
 * {@code --work-ns} reproduces it), so the report shows the split, not only the sum.
 *
 * <p>Producer threads: the server's ({@code cuvmm-ipc-conn-*}: a connection's reader and
 * writer; {@code cuvmm-ipc-accept}). Consumer threads: the thread that made this object (the
 * report's main thread, which makes the rounds) and the client's ({@code cuvmm-ipc-client-*}).
 * Other threads (GC, JIT, cleaners) count in neither. Counted only between {@link #resume()}
 * and {@link #pause()}, so that the report's interleaved baselines (run on the same main
 * thread between the Java segments) do not count. A thread that ends between the two loses
 * its time (none does in the report's loop).
 */
final class SideCpu {
    /** CPU ns per round of each side. */
    record Split(double producerNs, double consumerNs) {}

    private final com.sun.management.ThreadMXBean threads =
            (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    private final long caller = Thread.currentThread().getId();
    private final Map<Long, Long> startNs = new HashMap<>();
    private long producerNs;
    private long consumerNs;
    private boolean counting;

    /** Counts nothing until {@link #resume()}. */
    SideCpu() {}

    /** Reads every thread's CPU time now: counting starts. */
    void resume() {
        if (counting) throw new IllegalStateException("already counting");
        startNs.clear();
        for (long id : threads.getAllThreadIds()) startNs.put(id, threads.getThreadCpuTime(id));
        counting = true;
    }

    /** Adds each side's CPU time since {@link #resume()}: counting stops. */
    void pause() {
        if (!counting) throw new IllegalStateException("not counting");
        for (ThreadInfo t : threads.getThreadInfo(threads.getAllThreadIds())) {
            if (t == null) continue; // ended meanwhile
            long id = t.getThreadId();
            long now = threads.getThreadCpuTime(id);
            if (now < 0) continue;
            long used = now - startNs.getOrDefault(id, 0L);
            String name = t.getThreadName();
            if (name.startsWith("cuvmm-ipc-conn-") || name.startsWith("cuvmm-ipc-accep")) producerNs += used;
            else if (id == caller || name.startsWith("cuvmm-ipc-clien")) consumerNs += used;
        }
        counting = false;
    }

    /** Each side's CPU time counted so far, divided by {@code rounds}. */
    Split perRound(long rounds) {
        if (counting) throw new IllegalStateException("pause() first");
        return new Split((double) producerNs / rounds, (double) consumerNs / rounds);
    }

    /** Context switches (voluntary + involuntary) of every live thread of this process (Linux). */
    static long processContextSwitches() {
        long total = 0;
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path task : (Iterable<Path>) tasks::iterator) {
                try {
                    for (String line : Files.readAllLines(task.resolve("status"))) {
                        if (line.startsWith("voluntary_ctxt_switches:") || line.startsWith("nonvoluntary_ctxt_switches:")) {
                            total += Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
                        }
                    }
                } catch (java.nio.file.NoSuchFileException ended) {
                    // the thread ended while listed: its switches are gone with it
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading /proc/self/task for context switches: " + e.getMessage(), e);
        }
        return total;
    }
}
