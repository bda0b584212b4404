package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.util.Locale;
import java.util.Set;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Driver's (and Device's, DriverCounters') javadoc, read as a user would: the promises no other test checks. */
class DriverJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /** select: "selecting the kind already running returns it"; get() returns that same driver. */
    @Test
    void selectingTheRunningKindReturnsIt() {
        Driver d = Driver.get();
        assertSame(d, Driver.get());
        assertSame(d, Driver.select(d.kind().name().toLowerCase(Locale.ROOT)));
        assertSame(d, Driver.select("auto"));
    }

    /** select: "CudaException when ... another kind already runs", a driver error naming the call and result. */
    @Test
    void selectingAnotherKindThrowsCudaException() {
        Driver d = Driver.get();
        String other = d.kind() == DriverKind.HOST ? "cuda" : "host";
        CudaException e = assertThrows(CudaException.class, () -> Driver.select(other));
        assertNames(e, e.call(), e.resultName());
        assertFalse(e.resultName().isEmpty());
        assertTrue(e.resultName().startsWith("CUDA_ERROR_"), e.resultName());
        assertSame(d, Driver.get(), "the refused select changed nothing");
    }

    /** select: "IllegalArgumentException for an unknown mode", naming the value and the choices. */
    @Test
    void anUnknownModeIsRefused() {
        assertNames(assertThrows(IllegalArgumentException.class, () -> Driver.select("gpu")), "gpu", "auto", "cuda", "host");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Driver.select(null)), "null");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Driver.select("")), "auto");
    }

    /** versionString: version() as "12.4" for 12040. */
    @Test
    void versionStringMatchesVersion() {
        Driver d = Driver.get();
        int v = d.version();
        assertEquals(v / 1000 + "." + (v % 1000) / 10, d.versionString());
        assertTrue(d.versionString().matches("\\d+\\.\\d+"), d.versionString());
    }

    /** describe(): one of three texts, matching kind() and isHostLibrary(); isHostLibrary false on host. */
    @Test
    void describeMatchesKind() {
        Driver d = Driver.get();
        if (d.kind() == DriverKind.HOST) {
            assertFalse(d.isHostLibrary());
            assertEquals("host driver (memfd/mmap simulation, no GPU)", d.describe());
        } else if (d.isHostLibrary()) {
            assertEquals("cuda driver API over the host library (no GPU)", d.describe());
        } else {
            assertEquals("NVIDIA driver (cuda)", d.describe());
        }
        assertNotNull(d.reason());
        assertFalse(d.reason().isEmpty());
    }

    /** requestedMode(): the property first, naming where it came from. */
    @Test
    void requestedModeNamesItsSource() {
        String old = System.getProperty("cuvmm.driver");
        try {
            System.setProperty("cuvmm.driver", " host ");
            assertEquals("host (system property cuvmm.driver)", Driver.requestedMode());
            System.clearProperty("cuvmm.driver");
            String env = System.getenv("CUVMM_DRIVER");
            if (env == null || env.isBlank()) assertTrue(Driver.requestedMode().startsWith("auto (default"), Driver.requestedMode());
            else assertEquals(env.trim() + " (environment variable CUVMM_DRIVER)", Driver.requestedMode());
        } finally {
            if (old == null) System.clearProperty("cuvmm.driver");
            else System.setProperty("cuvmm.driver", old);
        }
    }

    /** device(ordinal): IAE naming the ordinal; devices are numbered; counts agree. */
    @Test
    void devicesAndOrdinals() {
        Driver d = Driver.get();
        assertEquals(d.devices().size(), d.deviceCount());
        for (int i = 0; i < d.deviceCount(); i++) {
            assertEquals(i, d.device(i).ordinal());
            assertSame(d.devices().get(i), d.device(i));
        }
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.device(d.deviceCount())), "device",
                String.valueOf(d.deviceCount()));
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.device(-1)), "device", "-1");
        assertThrows(UnsupportedOperationException.class, () -> d.devices().clear());
    }

    /** canAccessPeer: false for a device and itself; true between distinct host devices; IAE for a bad ordinal. */
    @Test
    void canAccessPeer() {
        Driver d = Driver.get();
        assertFalse(d.canAccessPeer(0, 0));
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.canAccessPeer(0, d.deviceCount())), "device");
        assertNames(assertThrows(IllegalArgumentException.class, () -> d.canAccessPeer(-1, 0)), "device");
        Assumptions.assumeTrue(d.kind() == DriverKind.HOST && d.deviceCount() >= 2, "two host-driver devices");
        assertTrue(d.canAccessPeer(0, 1));
        assertTrue(d.canAccessPeer(1, 0));
    }

    /** addAllocationReleaseListener(null): NPE naming the listener. */
    @Test
    void aNullListenerIsRefused() {
        assertNames(assertThrows(NullPointerException.class, () -> Driver.get().addAllocationReleaseListener(null)),
                "listener");
    }

    /** Device: supportedHandleTypes is NONE plus what it supports, unmodifiable; host devices say so in the name. */
    @Test
    void deviceReports() {
        Driver d = Driver.get();
        for (Device dev : d.devices()) {
            Set<HandleType> types = dev.supportedHandleTypes();
            assertTrue(types.contains(HandleType.NONE));
            assertEquals(dev.supportsPosixFileDescriptorHandles(), types.contains(HandleType.POSIX_FD));
            assertEquals(dev.supportsFabricHandles(), types.contains(HandleType.FABRIC));
            assertThrows(UnsupportedOperationException.class, () -> types.add(HandleType.FABRIC));
            assertTrue(dev.totalMemory() > 0);
            assertNotNull(dev.name());
            if (d.kind() == DriverKind.HOST) {
                assertTrue(dev.name().toLowerCase(Locale.ROOT).contains("host"), dev.name());
                assertTrue(dev.supportsVirtualMemoryManagement());
            }
        }
    }

    /** DriverCounters: calls(name) is an entry of calls(); an unknown name is IAE naming it; totalCalls the sum. */
    @Test
    void countersCalls() {
        DriverCounters c = Driver.get().counters();
        assertSame(c, Driver.get().counters());
        java.util.Map<String, Long> all = c.calls();
        assertTrue(all.containsKey("cuMemCreate"), all.keySet().toString());
        assertTrue(c.calls("cuMemCreate") >= 0);
        assertNames(assertThrows(IllegalArgumentException.class, () -> c.calls("cuNoSuchCall")), "entryPoint",
                "cuNoSuchCall", "cuMemCreate");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long before = c.calls("cuMemCreate");
            long liveBefore = c.liveAllocations();
            try (VirtualMemoryBuffer b = r.allocate(1)) {
                assertEquals(before + 1, c.calls("cuMemCreate"));
                assertEquals(liveBefore + 1, c.liveAllocations());
                if (Driver.get().kind() == DriverKind.HOST) {
                    assertEquals(c.hostAllocations(), c.hostMemfds(), "one memfd per live allocation");
                    assertTrue(c.hostMappings() >= 1);
                    assertTrue(c.hostReservations() >= 1);
                } else {
                    assertEquals(0, c.hostAllocations());
                    assertEquals(0, c.hostMemfds());
                }
            }
            assertEquals(liveBefore, c.liveAllocations());
        }
    }

    /** CudaException: the parts given are returned. */
    @Test
    void cudaExceptionParts() {
        CudaException e = new CudaException(1, "CUDA_ERROR_INVALID_VALUE", "cuMemMap", "mapping chunk 2 of 3",
                "cuMemMap failed while mapping chunk 2 of 3: CUDA_ERROR_INVALID_VALUE");
        assertEquals(1, e.code());
        assertEquals("CUDA_ERROR_INVALID_VALUE", e.resultName());
        assertEquals("cuMemMap", e.call());
        assertEquals("mapping chunk 2 of 3", e.step());
        assertTrue(e.getMessage().startsWith("cuMemMap failed"));
        assertTrue(new HostFunctionException("m", e).getCause() == e);
    }

    /** A real driver error: the message names the call, the step and the CUresult name (the class comment). */
    @Test
    void aDriverErrorNamesCallStepAndResult() {
        try (Event start = Event.create(0); Event end = Event.create(0)) {
            CudaException e = assertThrows(CudaException.class, () -> end.elapsedMillis(start));
            assertFalse(e.call().isEmpty());
            assertNames(e, e.call(), e.resultName());
            if (!e.step().isEmpty()) assertNames(e, e.step());
            assertEquals(400, e.code(), "CUDA_ERROR_INVALID_HANDLE is 400");
        }
    }

    /** LeakDetection: the property name; capturingAllocationSites reads it at each call. */
    @Test
    void leakDetectionReadsThePropertyEachTime() {
        assertEquals("cuvmm.leakDetection.captureStack", LeakDetection.CAPTURE_PROPERTY);
        String old = System.getProperty(LeakDetection.CAPTURE_PROPERTY);
        try {
            System.setProperty(LeakDetection.CAPTURE_PROPERTY, "true");
            assertTrue(LeakDetection.capturingAllocationSites());
            System.setProperty(LeakDetection.CAPTURE_PROPERTY, "false");
            assertFalse(LeakDetection.capturingAllocationSites());
            System.clearProperty(LeakDetection.CAPTURE_PROPERTY); // "any other value, or none, is false"
            assertFalse(LeakDetection.capturingAllocationSites());
        } finally {
            if (old == null) System.clearProperty(LeakDetection.CAPTURE_PROPERTY);
            else System.setProperty(LeakDetection.CAPTURE_PROPERTY, old);
        }
        assertTrue(LeakDetection.reportedLeaks() >= 0);
        java.util.List<String> recent = LeakDetection.recentReports();
        assertTrue(recent.size() <= 16);
        // A leak of an earlier test may be reported between two reads (the cleaner's thread):
        // once one report exists the last one is never null again; no equality across reads.
        if (!recent.isEmpty()) assertNotNull(LeakDetection.lastReport());
        assertThrows(UnsupportedOperationException.class, () -> recent.add("x"));
    }
}
