package org.cuvmm.bench.sharing;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.stream.Stream;

import jnr.ffi.LastError;
import jnr.ffi.LibraryLoader;
import jnr.ffi.annotations.In;

/**
 * Where the sharing benchmark runs its threads: the producer's threads (the server's
 * connection threads, {@code cuvmm-ipc-conn-*}) on one CPU and the consumer's (this JVM's
 * main thread and the client's threads, {@code cuvmm-ipc-client-*}) on another, or all on
 * one CPU, by {@code sched_setaffinity} on their Linux thread ids; the C++ ping-pong places
 * its two threads the same way ({@code cuvmm-transport-baseline --cpus}).
 *
 * <p>Why: on a two-vCPU virtual machine a round trip costs very different amounts depending
 * on whether the two sides share a CPU (a wake-up is a context switch) or not (a wake-up is
 * an inter-processor interrupt to an idle vCPU, tens of microseconds here), and an unpinned
 * run lands in either by chance, differently for the Java rounds and for the ping-pong they
 * are compared with. Pinning both the same way makes the ratio compare like with like.
 * Linux only; bench code, not part of the library.
 */
final class ThreadPlacement {
    private ThreadPlacement() {}

    /** Where the two sides run. */
    enum Mode {
        /** Left to the scheduler (as before this option existed). */
        UNPINNED,
        /** Producer threads on the first CPU, consumer threads on the second (two processes on two cores). */
        CROSS,
        /** Both sides on the first CPU (measures CPU per round: every wake-up is a plain context switch). */
        SAME;

        static Mode parse(String v) {
            for (Mode m : values()) {
                if (m.name().equalsIgnoreCase(v)) return m;
            }
            throw new IllegalArgumentException("--placement: " + v + " (expected: unpinned, cross or same)");
        }

        String label() { return name().toLowerCase(Locale.ROOT); }
    }

    /** libc's sched_setaffinity, bound once (jnr-ffi, which the library already depends on). */
    public interface LibC {
        int sched_setaffinity(int pid, long cpusetsize, @In byte[] mask);
    }

    private static final class Holder {
        static final LibC LIBC = LibraryLoader.create(LibC.class).load("c");
        static final jnr.ffi.Runtime RUNTIME = jnr.ffi.Runtime.getRuntime(LIBC);
    }

    /** The CPUs of the producer and of the consumer for {@code mode}, or null when unpinned. */
    static int[] cpus(Mode mode) {
        int n = Runtime.getRuntime().availableProcessors();
        return switch (mode) {
            case UNPINNED -> null;
            case SAME -> new int[] {0, 0};
            case CROSS -> {
                if (n < 2) throw new IllegalStateException("--placement cross needs 2 CPUs; this JVM sees " + n);
                yield new int[] {0, 1};
            }
        };
    }

    /** Pins the calling thread to {@code cpu}. */
    static void pinCurrentThread(int cpu) throws IOException {
        // /proc/thread-self -> "<pid>/task/<tid>"
        String link = Files.readSymbolicLink(Path.of("/proc/thread-self")).toString();
        pin(Integer.parseInt(link.substring(link.lastIndexOf('/') + 1)), cpu);
    }

    /**
     * Pins every thread of this JVM whose Linux name ({@code comm}: the first 15 bytes of
     * the Java thread name) starts with {@code prefix} to {@code cpu}; returns how many.
     */
    static int pinThreadsNamed(String prefix, int cpu) throws IOException {
        int pinned = 0;
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path t : (Iterable<Path>) tasks::iterator) {
                String comm;
                try {
                    comm = Files.readString(t.resolve("comm"), StandardCharsets.UTF_8).strip();
                } catch (IOException gone) {
                    continue; // the thread ended meanwhile
                }
                if (comm.startsWith(prefix)) {
                    pin(Integer.parseInt(t.getFileName().toString()), cpu);
                    pinned++;
                }
            }
        }
        return pinned;
    }

    private static void pin(int tid, int cpu) {
        byte[] mask = new byte[128]; // cpu_set_t: 1024 bits
        mask[cpu / 8] |= (byte) (1 << (cpu % 8));
        if (Holder.LIBC.sched_setaffinity(tid, mask.length, mask) != 0) {
            int errno = LastError.getLastError(Holder.RUNTIME);
            throw new IllegalStateException("sched_setaffinity(tid " + tid + ", cpu " + cpu + ") failed: errno " + errno
                    + " (is CPU " + cpu + " in this process's allowed set? see taskset -p " + ProcessHandle.current().pid()
                    + ")");
        }
    }
}
