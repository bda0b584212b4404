package org.cuvmm.cli.demo;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * One row of the demo table. Numbers that do not apply to a step are negative and print
 * as "-".
 *
 * @param step what was done
 * @param outcome the buffer's origin, or what happened
 * @param address the buffer's base address
 * @param size bytes asked for
 * @param mapped bytes mapped (sum of the chunks)
 * @param chunks physical allocations mapped into the buffer
 * @param nanos time of the cuvmm call itself (not of the checks), from {@link System#nanoTime()}
 * @param check what was verified, or what went wrong
 * @param ok false when a check failed
 */
public record DemoStep(String step, String outcome, long address, long size, long mapped, int chunks, long nanos,
                       String check, boolean ok) {

    /** A step that produced {@code buffer}. */
    public static DemoStep of(String step, String outcome, VirtualMemoryBuffer buffer, long nanos, String check,
                              boolean ok) {
        return new DemoStep(step, outcome, buffer.address(), buffer.size(), buffer.mappedSize(), buffer.chunkCount(),
                nanos, check, ok);
    }

    /** A step that produced no buffer (closing, for example). */
    public static DemoStep withoutBuffer(String step, String outcome, long nanos, String check, boolean ok) {
        return new DemoStep(step, outcome, -1, -1, -1, -1, nanos, check, ok);
    }
}
