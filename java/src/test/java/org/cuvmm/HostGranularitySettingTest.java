package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

import org.cuvmm.testing.ChildJvm;

/**
 * VMM_DESIGN.md section 6: "Bad values throw IllegalArgumentException in the form `name: value
 * (expected: ...)`", and Driver.select's javadoc: "@throws IllegalArgumentException for an
 * unknown mode or bad host settings". A cuvmm.host.granularity that is a whole number but not
 * a power of two >= 4096 was refused only natively, as a CudaException naming "host
 * granularity" (an independent review of the design document).
 */
class HostGranularitySettingTest {
    /** Child: selects the driver and prints what was thrown. */
    public static final class Probe {
        public static void main(String[] args) {
            try {
                Driver.get();
                System.out.println("SELECTED");
            } catch (RuntimeException e) {
                System.out.println("THROWN=" + e.getClass().getSimpleName() + " | " + e.getMessage());
            }
        }
    }

    private static void assertRefusedAsDocumented(String value) throws Exception {
        ChildJvm.Result r = ChildJvm.run(Probe.class,
                List.of("-Dcuvmm.driver=host", "-Dcuvmm.host.granularity=" + value), Map.of());
        assertTrue(r.output().contains("THROWN=IllegalArgumentException | cuvmm.host.granularity / "
                        + "CUVMM_HOST_GRANULARITY: " + value + " (expected: a power of two >= 4096"),
                "expected IllegalArgumentException 'cuvmm.host.granularity / CUVMM_HOST_GRANULARITY: " + value
                        + " (expected: ...)' as design section 6 says; got: " + r);
    }

    @Test
    void aGranularityThatIsNotAPowerOfTwoIsAnIllegalArgumentExceptionNamingTheSetting() throws Exception {
        assertRefusedAsDocumented("5000");
    }

    @Test
    void aGranularityBelow4096IsAnIllegalArgumentExceptionNamingTheSetting() throws Exception {
        assertRefusedAsDocumented("1024");
    }
}
