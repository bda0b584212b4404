package org.cuvmm.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * Tidy of issue 8: a message said in several places comes from one factory. The Java sites
 * call {@link ErrorMessages}; native code cannot, so its text is compared with the source.
 */
class ErrorMessagesTest {
    private static final long MiB = 1L << 20;

    @Test
    void exportOfImportedMemorySaysTheFactorysWords() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB);
             BufferDescriptor d = src.exportDescriptor();
             VirtualMemoryBuffer imported = r.importBuffer(d)) {
            IllegalStateException e = null;
            try {
                imported.exportDescriptor().close();
            } catch (IllegalStateException refused) {
                e = refused;
            }
            assertTrue(e != null, "the export of imported memory was refused");
            String prefix = "exportDescriptor: ";
            String subject = e.getMessage().substring(0, e.getMessage().indexOf(" covers "));
            assertTrue(subject.startsWith(prefix), e.getMessage());
            assertEquals(ErrorMessages.importedCannotBeExported(subject, " (chunk 1 of 1)"), e.getMessage());
        }
    }

    /** native/sharing.cpp refuses the same export in C++: it must say the same words. */
    @Test
    void nativeRefusalSaysTheSameWords() throws Exception {
        Path source = Path.of(System.getProperty("user.dir")).resolve("../native/sharing.cpp").normalize();
        // A source check: it runs in the build (module java's directory). The gpu-check bundle
        // carries compiled tests only, so there it skips, saying why.
        assumeTrue(Files.isRegularFile(source), "needs the source tree: " + source + " is not there (a packaged "
                + "test run, such as scripts/gpu-check's bundle)");
        // Adjacent C++ string literals ("a "  "b") are one string: join them, drop comment lines.
        String text = Files.readString(source).replaceAll("(?m)^\\s*//.*$", "").replaceAll("\"\\s*\"", "");
        assertTrue(text.contains("\"" + ErrorMessages.IMPORTED_CANNOT_BE_EXPORTED + "\""),
                source + " says, in its refusal of an imported chunk's export, exactly: "
                        + ErrorMessages.IMPORTED_CANNOT_BE_EXPORTED);
    }
}
