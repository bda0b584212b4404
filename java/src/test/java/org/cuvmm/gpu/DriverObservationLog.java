package org.cuvmm.gpu;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;

/**
 * Where {@link DriverObservationsTest} writes what the real driver did, and what
 * {@link GpuCheckSummary} reads back. Kept apart from the test so that the summary loads
 * without the JavaCPP CUDA presets the test needs.
 */
final class DriverObservationLog {
    private DriverObservationLog() {}

    /** The audit entries DriverObservationsTest observes, in order; the summary reports each. */
    static final List<String> ENTRIES = List.of("A4", "A7", "B20", "B21", "B33", "B34", "B45", "B50");

    /** The observing test class's simple name, to find its results in the reports. */
    static final String TEST_CLASS = "DriverObservationsTest";

    /** System property naming the observations file (set by scripts/gpu-check's run.sh). */
    static final String FILE_PROPERTY = "cuvmm.gpu.observations";

    /**
     * Prints one observation line ("B21 ...") and appends it to the file named by
     * {@link #FILE_PROPERTY}, when set.
     */
    static void record(String entry, String observation) {
        String line = entry + " " + observation.replace('\n', ' ');
        System.out.println("observed: " + line);
        String file = System.getProperty(FILE_PROPERTY);
        if (file == null || file.isBlank()) return;
        try {
            Files.write(Path.of(file), List.of(line), StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException(FILE_PROPERTY + ": " + file + " (expected: a writable file)", e);
        }
    }
}
