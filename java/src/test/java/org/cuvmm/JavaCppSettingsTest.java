package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.bytedeco.javacpp.Pointer;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.ChildJvm;

/** JavaCPP's physical-memory check (a /proc/self/statm read per Pointer) is off in cuvmm. */
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
}
