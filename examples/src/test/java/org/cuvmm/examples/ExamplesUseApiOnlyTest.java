package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

/**
 * The examples are what users copy, and users may run on the module path, where only the API
 * packages ({@code org.cuvmm}, {@code org.cuvmm.pool}, {@code org.cuvmm.ipc}) are exported. So
 * no example may name an internal package: it would compile and run here (the suites run on
 * the class path) and fail for the user.
 */
class ExamplesUseApiOnlyTest {
    private static final Pattern INTERNAL = Pattern.compile("\\borg\\.cuvmm\\.(ipc\\.)?internal\\b");

    @Test
    void noExampleNamesAnInternalPackage() throws IOException {
        Path sources = Path.of("src", "main", "java", "org", "cuvmm", "examples");
        List<Path> files;
        try (Stream<Path> s = Files.list(sources)) {
            files = s.filter(p -> p.toString().endsWith(".java")).sorted().collect(Collectors.toList());
        }
        assertTrue(files.size() >= 6, "the example sources were found in " + sources.toAbsolutePath() + ": " + files);
        List<String> offending = files.stream()
                .flatMap(f -> lines(f).stream().filter(l -> INTERNAL.matcher(l).find())
                        .map(l -> f.getFileName() + ": " + l.strip()))
                .collect(Collectors.toList());
        assertEquals(List.of(), offending, "lines of the examples that name an unexported package");
    }

    private static List<String> lines(Path f) {
        try {
            return Files.readAllLines(f);
        } catch (IOException e) {
            throw new AssertionError("cannot read " + f, e);
        }
    }
}
