package org.cuvmm.cli;

import java.util.Locale;

/** Byte counts as people read them: "3 MiB", "62.7 GiB", "512 B". */
public final class ByteSize {
    private static final String[] UNITS = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

    private ByteSize() {}

    /** Binary units; whole numbers print without decimals, others with one. */
    public static String format(long bytes) {
        if (bytes < 1024) return bytes + " B";
        int unit = 0;
        double v = bytes;
        while (v >= 1024 && unit < UNITS.length - 1) {
            v /= 1024;
            unit++;
        }
        long exact = 1L << (10 * unit);
        if (bytes % exact == 0) return (bytes / exact) + " " + UNITS[unit];
        return String.format(Locale.ROOT, "%.1f %s", v, UNITS[unit]);
    }
}
