package org.cuvmm.bench.sharing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The C++ bare ping-pong ({@code cuvmm-transport-baseline --pingpong ... --segments-on-stdin})
 * as a child process that times one segment each time {@link #segment()} asks, so that
 * {@link SharingV2Report} can interleave it with the Java rounds: segment by segment, a
 * drift of the machine's speed (this 2-vCPU guest's ping-pong moves between 23 and 34 µs
 * within minutes) falls on both sides of each ratio alike. Between segments its two threads
 * wait (one on this pipe, one on its socket) and use no CPU.
 *
 * <p>Ownership: {@link #close()} ends the process (its stdin closes, it shuts its socket
 * pair down and exits) and waits for it; a process that does not end in 10 s is killed
 * and reported.
 */
final class PingPongProcess implements AutoCloseable {
    private static final Pattern SEGMENT =
            Pattern.compile("^segment ns_per_round=([0-9.]+) cpu_ns=([0-9]+) switches=([0-9]+) rounds=([0-9]+)$");

    /** One timed segment of the C++ ping-pong: ns per round, and its process's CPU ns, context switches and rounds. */
    record Segment(double nsPerRound, long cpuNs, long switches, long rounds) {}

    private final Process process;
    private final BufferedReader out;
    private final OutputStream in;
    private final List<String> transcript = new ArrayList<>(); // what it printed, for a failure's message

    private PingPongProcess(Process process) {
        this.process = process;
        this.out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
        this.in = process.getOutputStream();
    }

    /**
     * Starts the ping-pong of {@code sizes} with segments of {@code segmentMs}: its timed
     * side (the consumer) on {@code cpus[1]}, its echoing side (the producer) on {@code
     * cpus[0]}; unpinned when {@code cpus} is null. Returns once it says it is ready.
     */
    static PingPongProcess start(Path binary, int[] sizes, long segmentMs, int[] cpus) throws IOException {
        StringBuilder list = new StringBuilder();
        for (int v : sizes) list.append(list.length() == 0 ? "" : ",").append(v);
        List<String> cmd = new ArrayList<>(List.of(binary.toString(), "--pingpong", list.toString(), "--round-ms",
                Long.toString(segmentMs), "--segments-on-stdin"));
        if (cpus != null) cmd.addAll(List.of("--cpus", cpus[1] + "," + cpus[0]));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectErrorStream(true);
        PingPongProcess p = new PingPongProcess(pb.start());
        try {
            String ready = p.line();
            if (!ready.startsWith("ready ")) throw p.failed("expected its 'ready' line, read '" + ready + "'", null);
            return p;
        } catch (IOException | RuntimeException e) {
            p.process.destroyForcibly();
            closeQuietly(p.in, e);
            closeQuietly(p.out, e);
            throw e;
        }
    }

    private static void closeQuietly(java.io.Closeable c, Throwable failure) {
        try {
            c.close();
        } catch (IOException e) {
            failure.addSuppressed(e);
        }
    }

    /** The child process (for a test of what it does between segments). */
    ProcessHandle handle() {
        return process.toHandle();
    }

    /** Times one segment (the call returns when it has). */
    Segment segment() throws IOException {
        try {
            in.write("segment\n".getBytes(StandardCharsets.US_ASCII));
            in.flush();
        } catch (IOException e) {
            throw failed("could not ask for a segment (" + e.getMessage() + ")", e); // it ended: say what it printed
        }
        String line = line();
        Matcher m = SEGMENT.matcher(line);
        if (!m.matches()) throw failed("expected a 'segment ...' line, read '" + line + "'", null);
        return new Segment(Double.parseDouble(m.group(1)), Long.parseLong(m.group(2)), Long.parseLong(m.group(3)),
                Long.parseLong(m.group(4)));
    }

    private String line() throws IOException {
        String line = out.readLine();
        if (line == null) throw failed("it ended", null);
        transcript.add(line);
        return line;
    }

    private IllegalStateException failed(String what, Throwable cause) {
        StringBuilder rest = new StringBuilder();
        try {
            // A refused argument prints its reason and exits: give it the moment it takes.
            if (process.waitFor(5, TimeUnit.SECONDS)) {
                for (String l; (l = out.readLine()) != null; ) rest.append(l).append('\n');
            }
        } catch (IOException ignored) {
            // what it printed is only for the message
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        String exit = process.isAlive() ? "running" : "exit " + process.exitValue();
        return new IllegalStateException("C++ ping-pong (" + String.join(" ", process.info().arguments().map(List::of)
                .orElse(List.of())) + "): " + what + " (" + exit + "); it printed:\n" + String.join("\n", transcript)
                + (rest.length() > 0 ? "\n" + rest : ""), cause);
    }

    @Override
    public void close() throws IOException {
        try {
            try {
                in.close(); // end of its stdin: it stops its threads and exits
            } finally {
                if (!process.waitFor(10, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                    throw failed("it did not end within 10 s of the end of its stdin; killed", null);
                }
            }
            if (process.exitValue() != 0) throw failed("it failed", null);
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
            throw new IOException("interrupted waiting for the C++ ping-pong to end", e);
        } finally {
            out.close();
        }
    }
}
