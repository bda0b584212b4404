package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.bytedeco.javacpp.Pointer;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.ChildJvm;

/**
 * JavaCPP's physical-memory check (a /proc/self/statm read per Pointer) is off in cuvmm, unless the
 * application set it.
 */
class JavaCppSettingsTest {
    /** Child: the first cuvmm call of a fresh JVM, then JavaCPP's view of its setting. */
    public static final class Child {
        public static void main(String[] args) {
            Driver.get();
            System.out.println("MAX_PHYSICAL=" + Pointer.maxPhysicalBytes());
        }
    }

    @Test
    void maxPhysicalBytesIsZeroFromTheFirstCall() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(Child.class, List.of(), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("MAX_PHYSICAL=0"), r.toString());
    }

    /** The setting is JVM-wide, so an application's own value wins, in either spelling JavaCPP reads. */
    @Test
    void anExplicitSettingIsNeverOverridden() throws Exception {
        for (String property : List.of("org.bytedeco.javacpp.maxPhysicalBytes", "org.bytedeco.javacpp.maxphysicalbytes")) {
            ChildJvm.Result r = TestSupport.runChild(Child.class, List.of("-D" + property + "=123456789"), Map.of());
            assertEquals(0, r.exitCode(), r.toString());
            assertTrue(r.output().contains("MAX_PHYSICAL=123456789"), property + ": " + r);
        }
    }
}
