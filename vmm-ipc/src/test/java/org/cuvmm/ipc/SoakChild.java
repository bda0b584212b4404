package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** A child JVM running {@code main} with a line protocol on stdin/stdout (as CachedSharingTest's Consumer). */
final class SoakChild implements AutoCloseable {
    final Process process;
    final String label;
    private final OutputStream stdin;
    private final List<String> lines = new ArrayList<>();
    private boolean ended;
    private final Thread pump;

    SoakChild(String label, Class<?> main, String... args) throws IOException {
        this.label = label;
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"), main.getName()));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        process = pb.start();
        stdin = process.getOutputStream();
        pump = new Thread(this::pump, "probe-child-output " + label);
        pump.setDaemon(true);
        pump.start();
    }

    private void pump() {
        try (java.io.BufferedReader r = new java.io.BufferedReader(
                new java.io.InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
            for (String l; (l = r.readLine()) != null; ) {
                synchronized (lines) {
                    lines.add(l);
                    lines.notifyAll();
                }
            }
        } catch (IOException ignored) {
            // gone
        } finally {
            synchronized (lines) {
                ended = true;
                lines.notifyAll();
            }
        }
    }

    String output() {
        synchronized (lines) {
            return String.join("\n", lines);
        }
    }

    List<String> linesStartingWith(String prefix) {
        synchronized (lines) {
            return lines.stream().filter(l -> l.startsWith(prefix)).toList();
        }
    }

    int count(String prefix) { return linesStartingWith(prefix).size(); }

    void command(String line) throws IOException {
        stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        stdin.flush();
    }

    /** The k-th line starting with prefix (k from 1). */
    String awaitLine(String prefix, int k, int seconds) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        synchronized (lines) {
            for (;;) {
                int seen = 0;
                for (String l : lines) {
                    if (l.startsWith(prefix) && ++seen == k) return l;
                }
                boolean failed = ended || lines.stream().anyMatch(l -> l.startsWith("FAILED"));
                if (failed) fail(label + " pid " + process.pid() + " ended waiting for " + prefix + " #" + k + ":\n"
                        + tail());
                long left = until - System.nanoTime();
                if (left <= 0) fail(label + " pid " + process.pid() + ": no " + prefix + " #" + k + " in " + seconds
                        + " s:\n" + tail());
                TimeUnit.NANOSECONDS.timedWait(lines, left);
            }
        }
    }

    private String tail() {
        int from = Math.max(0, lines.size() - 80);
        return String.join("\n", lines.subList(from, lines.size()));
    }

    private final java.util.Map<String, Integer> consumed = new java.util.HashMap<>();

    /** The next line with prefix after the ones already returned by next. */
    String next(String prefix, int seconds) throws InterruptedException {
        int k = consumed.merge(prefix, 1, Integer::sum);
        return awaitLine(prefix, k, seconds);
    }

    int exit(int seconds) throws IOException, InterruptedException {
        command("exit");
        if (!process.waitFor(seconds, TimeUnit.SECONDS)) fail(label + " did not exit in " + seconds + " s:\n" + tail());
        pump.join(10_000);
        return process.exitValue();
    }

    @Override
    public void close() throws InterruptedException {
        if (process.isAlive()) process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
        try {
            stdin.close();
        } catch (IOException ignored) {
            // gone
        }
        pump.join(10_000);
    }

    /** A STAT line's numeric field. */
    static long field(String statLine, String key) {
        for (String w : statLine.split(" ")) {
            if (w.startsWith(key + "=")) return Long.parseLong(w.substring(key.length() + 1));
        }
        throw new IllegalArgumentException(key + " not in " + statLine);
    }
}
