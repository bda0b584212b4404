package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Method;

import javax.management.JMException;
import javax.management.ObjectName;
import javax.management.openmbean.CompositeData;

/**
 * The bytes a thread allocated on the Java heap so far ({@code
 * com.sun.management.ThreadMXBean.getThreadAllocatedBytes}), for counted allocation tests.
 * Reached by reflection: this module does not read {@code jdk.management} (and need not, for
 * its main code); core reflection does not need it to.
 *
 * <p>The bytes depend on the JVM's object layout: without compressed oops (a maximum heap of
 * 32 GB or more, the default on a machine with 128 GB of memory) or without compressed class
 * pointers, references and headers are wider. Measured with both off: 1.36x the bytes of a
 * cached round (1,472 against 1,082 on the client) and of a frame read (240 against 176),
 * which failed bounds set on the usual layout. {@link #bound(long)} scales a bound by {@link
 * #WIDE_LAYOUT} there, so a test fails on allocation, not on layout.
 */
final class ThreadAllocation {
    private final ThreadMXBean bean;
    private final Method allocated;
    private final long thread;

    private ThreadAllocation(ThreadMXBean bean, Method allocated, long thread) {
        this.bean = bean;
        this.allocated = allocated;
        this.thread = thread;
    }

    /** For the calling thread. */
    static ThreadAllocation current() {
        return of(Thread.currentThread());
    }

    static ThreadAllocation of(Thread t) {
        ThreadMXBean bean = ManagementFactory.getThreadMXBean();
        try {
            Class<?> ext = Class.forName("com.sun.management.ThreadMXBean");
            assertTrue(ext.isInstance(bean), "this JVM's ThreadMXBean cannot count allocated bytes");
            assertTrue((Boolean) ext.getMethod("isThreadAllocatedMemoryEnabled").invoke(bean),
                    "thread allocation counting is off in this JVM");
            return new ThreadAllocation(bean, ext.getMethod("getThreadAllocatedBytes", long.class), t.getId());
        } catch (ReflectiveOperationException e) {
            throw new AssertionError("no com.sun.management.ThreadMXBean: " + e, e);
        }
    }

    /** A bound's factor on a JVM with wide references or class pointers (see the class comment). */
    static final double WIDE_LAYOUT = 1.4;

    /**
     * {@code compactBound} (set on the usual layout: compressed oops and compressed class
     * pointers) as it is there, else scaled by {@link #WIDE_LAYOUT}.
     */
    static long bound(long compactBound) {
        return compactLayout() ? compactBound : Math.round(compactBound * WIDE_LAYOUT);
    }

    /** "" on the usual layout, else a note for a failure message. */
    static String layoutNote() {
        return compactLayout() ? "" : ", scaled for this JVM's wide object layout";
    }

    /** Compressed oops and compressed class pointers both on. */
    static boolean compactLayout() {
        return vmFlag("UseCompressedOops") && vmFlag("UseCompressedClassPointers");
    }

    /** A boolean HotSpot flag, through the platform MBean server (no {@code jdk.management} types here). */
    private static boolean vmFlag(String name) {
        try {
            CompositeData option = (CompositeData) ManagementFactory.getPlatformMBeanServer().invoke(
                    new ObjectName("com.sun.management:type=HotSpotDiagnostic"), "getVMOption", new Object[] {name},
                    new String[] {String.class.getName()});
            return Boolean.parseBoolean((String) option.get("value"));
        } catch (JMException | RuntimeException e) { // RuntimeMBeanException for an unknown flag
            throw new AssertionError("cannot read the JVM flag " + name + ": " + e, e);
        }
    }

    long bytes() {
        try {
            return (Long) allocated.invoke(bean, thread);
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }
}
