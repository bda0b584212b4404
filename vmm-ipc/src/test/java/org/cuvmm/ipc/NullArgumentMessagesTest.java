package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Set;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A null argument to the sharing API reads as the core's do: {@code NullPointerException}
 * "NAME: null (expected: ...)", naming the argument. Until this test the server, the client
 * and their builders said only the bare name ({@code Objects.requireNonNull(x, "name")}: the
 * message "name"). Every public method of an open server, an open client and both builders that
 * takes an object is called reflectively with null for each object and a valid number for each
 * number; a method that accepts null on purpose is listed with the javadoc that says so.
 */
class NullArgumentMessagesTest {
    /** Methods whose javadoc gives null a meaning (or that only read and ignore a null), by name. */
    private static final Set<String> NULL_ALLOWED = Set.of(
            "removeListener", "removeDropListener", // removing nothing: a no-op, as Collection.remove(null)
            "equals");

    @Test
    void everyNullArgumentIsNamed() throws Exception {
        Path dir = Files.createTempDirectory("cuvmm-null-args");
        Path sock = dir.resolve("s");
        List<String> wrong = new ArrayList<>();
        int called = 0;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("frame", b);
            try (SharingClient client = SharingClient.connect(sock)) {
                for (Object o : new Object[] {SharingServer.builder(dir.resolve("unused")), server,
                        SharingClient.builder(sock), client}) {
                    called += callEach(o, wrong);
                }
            }
        } finally {
            Files.deleteIfExists(sock);
            Files.deleteIfExists(dir);
        }
        assertTrue(called >= 15, "methods called: " + called);
        if (!wrong.isEmpty()) fail("expected NullPointerException \"NAME: null (expected: ...)\":\n" + String.join("\n", wrong));
    }

    private static int callEach(Object target, List<String> wrong) throws IllegalAccessException {
        List<Method> methods = new ArrayList<>(Arrays.asList(target.getClass().getMethods()));
        methods.sort(Comparator.comparing(Method::toString));
        int called = 0;
        for (Method m : methods) {
            Class<?>[] types = m.getParameterTypes();
            if (Modifier.isStatic(m.getModifiers()) || m.getDeclaringClass() != target.getClass()
                    || NULL_ALLOWED.contains(m.getName()) || Arrays.stream(types).allMatch(Class::isPrimitive)) {
                continue;
            }
            Object[] args = new Object[types.length];
            for (int i = 0; i < types.length; i++) args[i] = valid(types[i]);
            called++;
            try {
                m.invoke(target, args);
                wrong.add(m + ": returned normally");
            } catch (InvocationTargetException e) {
                Throwable t = e.getCause();
                String msg = t.getMessage();
                if (!(t instanceof NullPointerException) || msg == null || !msg.matches("\\w+(\\.\\w+)*: null \\(expected: .*")) {
                    wrong.add(m + ": " + t);
                }
            }
        }
        return called;
    }

    /** Null for objects; for numbers, a value every method here accepts (1), so only the null is wrong. */
    private static Object valid(Class<?> type) {
        if (type == int.class) return 1;
        if (type == long.class) return 1L;
        if (type == boolean.class) return false;
        if (type.isPrimitive()) throw new AssertionError("an argument type this test does not know: " + type);
        return null;
    }
}
