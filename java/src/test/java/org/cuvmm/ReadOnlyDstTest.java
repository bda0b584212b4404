package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.ObjectOutputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;

import org.junit.jupiter.api.Test;

/**
 * Review s7: copyTo(long, ByteBuffer) refuses a read-only dst with an anonymous subclass of
 * ReadOnlyBufferException declared inside an instance method: javac 17 gives it a this$0
 * field, so the exception holds the VirtualMemoryBuffer (kept reachable by whoever keeps the
 * exception) and cannot be serialized (VirtualMemoryBuffer is not Serializable), unlike any
 * other exception cuvmm throws.
 */
class ReadOnlyDstTest {
    @Test
    void theReadOnlyDstExceptionIsSerializable() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            ReadOnlyBufferException e = assertThrows(ReadOnlyBufferException.class,
                    () -> b.copyTo(0, ByteBuffer.allocate(16).asReadOnlyBuffer()));
            try (ObjectOutputStream out = new ObjectOutputStream(OutputStream.nullOutputStream())) {
                out.writeObject(e); // NotSerializableException: org.cuvmm.VirtualMemoryBuffer
            }
        }
    }
}
