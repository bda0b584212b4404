package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** CudaException's and HostFunctionException's javadoc, read as a user would. */
class CudaExceptionJavadocContractTest {
    /**
     * "The message names the call, the step of the operation it belonged to and the CUresult
     * name ... The same parts are available separately"; code(): the numeric CUresult of
     * resultName(); step(): "may be empty" (never null).
     */
    @Test
    void aDriverFailureNamesCallStepAndResult() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            CudaException e = assertThrows(CudaException.class, () -> r.allocate(Long.MAX_VALUE));
            assertMessageHasItsParts(e);
        }
    }

    /** The same for a refused import (a file that is not a memory handle). */
    @Test
    void aRefusedImportNamesCallStepAndResult() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            java.nio.file.Path f = java.nio.file.Files.createTempFile("cuvmm-not-memory", ".bin");
            try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(f.toFile(), "rw")) {
                raf.setLength(r.granularity());
                int fd = fdOf(raf);
                try (BufferDescriptor d = BufferDescriptor.fromFds(new int[] {fd}, new long[] {r.granularity()},
                        HandleType.POSIX_FD, r.granularity())) {
                    // "@throws CudaException when the driver refuses (an fd that is not a memory handle ...)"
                    assertMessageHasItsParts(assertThrows(CudaException.class, () -> r.importBuffer(d).close()));
                }
            } finally {
                java.nio.file.Files.deleteIfExists(f);
            }
        }
    }

    private static int fdOf(java.io.RandomAccessFile raf) throws Exception {
        // /proc/self/fd: the fd whose link names the file.
        java.nio.file.Path self = java.nio.file.Path.of("/proc/self/fd");
        try (var s = java.nio.file.Files.list(self)) {
            for (java.nio.file.Path p : (Iterable<java.nio.file.Path>) s::iterator) {
                try {
                    if (java.nio.file.Files.readSymbolicLink(p).toString().contains("cuvmm-not-memory")) {
                        return Integer.parseInt(p.getFileName().toString());
                    }
                } catch (java.io.IOException ignored) {
                    // gone meanwhile
                }
            }
        }
        throw new AssertionError("no fd for the temp file");
    }

    private static void assertMessageHasItsParts(CudaException e) {
        String m = e.getMessage();
        assertNotNull(e.call());
        assertFalse(e.call().isEmpty());
        assertNotNull(e.step(), "step() is null");
        assertNotNull(e.resultName());
        assertTrue(m.contains(e.call()), "message lacks the call " + e.call() + ": " + m);
        assertTrue(m.contains(e.resultName()), "message lacks the result " + e.resultName() + ": " + m);
        if (!e.step().isEmpty()) assertTrue(m.contains(e.step()), "message lacks the step " + e.step() + ": " + m);
        if (e.resultName().equals("CUDA_ERROR_INVALID_VALUE")) assertEquals(1, e.code());
        if (e.resultName().equals("CUDA_ERROR_OUT_OF_MEMORY")) assertEquals(2, e.code());
    }

    /**
     * HostFunctionException: "@param message what happened, naming the stream"; "Each was also
     * logged" aside, the message of the one synchronize() throws names the stream it came from.
     */
    @Test
    void aHostFunctionFailureNamesTheStream() {
        try (Stream s = Stream.create(0)) {
            s.launchHostFunction(() -> { throw new IllegalStateException("host boom"); });
            HostFunctionException e = assertThrows(HostFunctionException.class, s::synchronize);
            assertTrue(e.getMessage().contains(s.toString()), e.getMessage());
            assertEquals("host boom", e.getCause().getMessage());
            assertEquals(0, e.getSuppressed().length);
        }
    }
}
