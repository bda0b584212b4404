package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Method;

/**
 * The bytes a thread allocated on the Java heap so far ({@code
 * com.sun.management.ThreadMXBean.getThreadAllocatedBytes}), for counted allocation tests.
 * Reached by reflection: this module does not read {@code jdk.management} (and need not, for
 * its main code); core reflection does not need it to.
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

    long bytes() {
        try {
            return (Long) allocated.invoke(bean, thread);
        } catch (ReflectiveOperationException e) {
            throw new AssertionError(e);
        }
    }
}
