package org.cuvmm.cli.demo;

import java.io.PrintStream;
import java.nio.charset.Charset;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.cuvmm.cli.ByteSize;

/** Prints the demo's steps as an aligned table. */
public final class StepTable {
    private StepTable() {}

    public static void print(List<DemoStep> steps, PrintStream out) {
        List<String[]> rows = new ArrayList<>();
        rows.add(new String[] {"step", "outcome", "address", "size", "mapped", "chunks", "time (" + micro() + ")",
                "check"});
        for (DemoStep s : steps) {
            rows.add(new String[] {
                s.step(),
                s.outcome(),
                s.address() < 0 ? "-" : String.format("0x%012x", s.address()),
                s.size() < 0 ? "-" : ByteSize.format(s.size()),
                s.mapped() < 0 ? "-" : ByteSize.format(s.mapped()),
                s.chunks() < 0 ? "-" : Integer.toString(s.chunks()),
                s.nanos() < 0 ? "-" : String.format(Locale.ROOT, "%.1f", s.nanos() / 1000.0),
                (s.ok() ? "" : "FAILED: ") + s.check()});
        }
        int columns = rows.get(0).length;
        int[] width = new int[columns];
        for (String[] r : rows) {
            for (int c = 0; c < columns; c++) width[c] = Math.max(width[c], r[c].length());
        }
        boolean first = true;
        for (String[] r : rows) {
            StringBuilder line = new StringBuilder();
            for (int c = 0; c < columns; c++) {
                // Numbers right-aligned, words left-aligned; the last column is not padded.
                boolean numeric = c == 3 || c == 4 || c == 5 || c == 6;
                String cell = c == columns - 1 ? r[c]
                        : numeric ? pad(r[c], width[c], true) : pad(r[c], width[c], false);
                line.append(cell);
                if (c < columns - 1) line.append("  ");
            }
            out.println(line.toString().stripTrailing());
            if (first) {
                StringBuilder rule = new StringBuilder();
                for (int c = 0; c < columns; c++) {
                    rule.append("-".repeat(width[c]));
                    if (c < columns - 1) rule.append("  ");
                }
                out.println(rule);
                first = false;
            }
        }
    }

    private static String pad(String s, int width, boolean right) {
        String fill = " ".repeat(Math.max(0, width - s.length()));
        return right ? fill + s : s + fill;
    }

    /** "µs" where the console can show it, else "us" (a C locale turns µ into '?'). */
    private static String micro() {
        String name = System.getProperty("sun.stdout.encoding", System.getProperty("native.encoding"));
        try {
            Charset cs = name == null ? Charset.defaultCharset() : Charset.forName(name);
            return cs.newEncoder().canEncode('\u00b5') ? "\u00b5s" : "us";
        } catch (RuntimeException e) {
            return "us";
        }
    }
}
