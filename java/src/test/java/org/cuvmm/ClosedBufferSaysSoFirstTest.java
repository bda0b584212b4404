package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The class javadoc's rule for a closed {@link VirtualMemoryBuffer}: every method that uses the
 * buffer throws {@link IllegalStateException} saying it is closed, checked before its arguments,
 * so null or out-of-range arguments to a closed buffer still read "is closed". Every public
 * method is called reflectively with 0 for each number and null for each object, then again with
 * empty arrays for the arrays (a varargs call with no argument); only the
 * methods the javadoc names as usable after close are left out. A method added later is covered
 * without a change here.
 */
class ClosedBufferSaysSoFirstTest {
    /** Answering after close (the class javadoc): the plain accessors, and the close methods (idempotent). */
    private static final Set<String> USABLE_AFTER_CLOSE = Set.of("size", "origin", "resource", "isClosed",
            "isClosePending", "leaseCount", "toString", "close", "closeWhenUnused");

    /**
     * Both handle types: a buffer that cannot be exported (NONE) must say "is closed" too, not
     * that it was allocated without POSIX_FD (exportDescriptor said that: an independent probe).
     */
    @ParameterizedTest
    @EnumSource(value = HandleType.class, names = {"POSIX_FD", "NONE"})
    void everyMethodOfAClosedBufferSaysItIsClosedWhateverItsArguments(HandleType handleType) throws Exception {
        VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder().handleType(handleType).build();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, options)) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            b.close();
            List<Method> methods = new ArrayList<>(Arrays.asList(VirtualMemoryBuffer.class.getMethods()));
            methods.sort(Comparator.comparing(Method::toString));
            List<String> wrong = new ArrayList<>();
            int called = 0;
            for (boolean emptyArrays : new boolean[] {false, true}) for (Method m : methods) {
                if (Modifier.isStatic(m.getModifiers()) || m.getDeclaringClass() != VirtualMemoryBuffer.class
                        || USABLE_AFTER_CLOSE.contains(m.getName())) {
                    continue;
                }
                if (emptyArrays && Arrays.stream(m.getParameterTypes()).noneMatch(Class::isArray)) continue;
                Object[] args = new Object[m.getParameterCount()];
                Class<?>[] types = m.getParameterTypes();
                for (int i = 0; i < args.length; i++) args[i] = neutral(types[i], emptyArrays);
                called++;
                try {
                    m.invoke(b, args);
                    wrong.add(m + (emptyArrays ? " (empty arrays)" : "") + ": returned normally");
                } catch (InvocationTargetException e) {
                    Throwable t = e.getCause();
                    if (!(t instanceof IllegalStateException) || t.getMessage() == null
                            || !t.getMessage().contains(" is closed")) {
                        wrong.add(m + (emptyArrays ? " (empty arrays)" : "") + ": " + t);
                    }
                }
            }
            assertTrue(called > 30, "public methods called: " + called);
            if (!wrong.isEmpty()) fail("on a closed " + handleType + " buffer, expected IllegalStateException \"... is "
                    + "closed\":\n" + String.join("\n", wrong));
        }
    }

    /**
     * The close methods are idempotent "whatever the stream": on a closed buffer they return,
     * also given null (close(null) threw NullPointerException there: an independent probe). On
     * an open buffer a null stream is still refused, naming the argument (BufferContractTest).
     */
    @Test
    void theCloseMethodsOfAClosedBufferReturnWhateverTheirArguments() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            b.close();
            int called = 0;
            for (Method m : VirtualMemoryBuffer.class.getMethods()) {
                if (Modifier.isStatic(m.getModifiers()) || !m.getName().startsWith("close")) continue;
                Object[] args = new Object[m.getParameterCount()];
                Class<?>[] types = m.getParameterTypes();
                for (int i = 0; i < args.length; i++) args[i] = neutral(types[i], false);
                try {
                    m.invoke(b, args);
                } catch (InvocationTargetException e) {
                    fail(m + " on a closed buffer threw " + e.getCause(), e.getCause());
                }
                called++;
            }
            assertEquals(3, called, "close(), close(Stream), closeWhenUnused()");
            assertTrue(b.isClosed());
        }
    }

    /**
     * {@link VirtualMemoryResource#modifyAllocation}'s buffer closed between its closed check and
     * the grow (another thread's close): the grow's own refusal names the argument too, as the
     * check does, where it said only "... is closed; it cannot be used after close()". The grow is
     * called directly (the window between the two cannot be hit on purpose from outside).
     */
    @Test
    void aBufferClosedAfterModifyAllocationsCheckIsNamedAsItsArgument() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(r.granularity());
            String named = b.toString(); // a closed buffer's toString says closed; the message names it as it was
            b.close();
            java.lang.reflect.Field spec = VirtualMemoryResource.class.getDeclaredField("spec");
            spec.setAccessible(true);
            IllegalStateException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalStateException.class,
                    () -> b.grow((org.cuvmm.internal.jni.NativeSpecHandle) spec.get(r), 2 * r.granularity(), 0));
            assertTrue(e.getMessage().startsWith("buffer: " + named + " is closed (expected: an open one;"), e.getMessage());
        }
    }

    private static Object neutral(Class<?> type, boolean emptyArrays) {
        if (!type.isPrimitive()) {
            return emptyArrays && type.isArray() ? java.lang.reflect.Array.newInstance(type.getComponentType(), 0) : null;
        }
        if (type == boolean.class) return false;
        if (type == byte.class) return (byte) 0;
        if (type == int.class) return 0;
        if (type == long.class) return 0L;
        assertEquals(Object.class, type, "an argument type this test does not know");
        return null;
    }
}
