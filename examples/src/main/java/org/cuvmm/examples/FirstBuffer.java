package org.cuvmm.examples;

import java.io.PrintStream;
import java.util.Arrays;
import java.util.Random;

import org.cuvmm.AccessMode;
import org.cuvmm.Driver;
import org.cuvmm.GranularityKind;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;

/**
 * A first cuvmm program: allocate GPU memory, write to it, grow it, read it back.
 *
 * <p>Run it from the repository root with
 * {@code mvn -q -DskipTests install && mvn -q -pl examples exec:java}. Without an NVIDIA GPU
 * it runs on cuvmm's host driver, which behaves like the CUDA driver but keeps the memory in
 * the host: the program is the same either way.
 */
public final class FirstBuffer {
    private static final int MiB = 1 << 20;

    private FirstBuffer() {}

    public static void main(String[] args) {
        if (!run(System.out)) {
            System.exit(1);
        }
    }

    /** The whole example. Returns true when everything read back is what was written. */
    public static boolean run(PrintStream out) {
        // The driver is chosen once per process: the NVIDIA driver when libcuda.so.1 loads and
        // reports a device, else the host driver. Printing the reason saves guessing later,
        // for instance when a GPU machine silently fell back to the host driver.
        Driver driver = Driver.get();
        out.println("driver: " + driver.kind() + " " + driver.versionString() + " (" + driver.reason() + ")");

        // Options are fixed for the life of a resource, so every buffer it makes is alike.
        // This buffer is never handed to another process: no export handle is needed, which
        // also works on devices that cannot export POSIX file descriptors.
        VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder()
                .handleType(HandleType.NONE)
                .granularity(GranularityKind.RECOMMENDED)
                .selfAccess(AccessMode.READ_WRITE)
                .build();

        // try-with-resources closes in reverse order: buffers first, then the resource. A
        // buffer left unclosed is eventually released by a cleaner, with a warning: do not
        // rely on it, GPU memory runs out long before the heap does.
        boolean ok;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0, options);
             VirtualMemoryBuffer small = resource.allocate(1 * MiB)) {
            // Sizes are rounded up to the granularity (2 MiB on most GPUs); the rest of the
            // last chunk is mapped but not part of the buffer.
            out.printf("allocated %d bytes at 0x%x (%d mapped, granularity %d)%n", small.size(), small.address(),
                    small.mappedSize(), resource.granularity());

            // The CPU cannot touch device memory directly: copies go through the driver.
            byte[] data = new byte[1 * MiB];
            new Random(42).nextBytes(data);
            small.copyFrom(data);

            // Growing returns a NEW buffer; the old one stays valid and shares the first
            // megabyte with it. Nothing is copied: the driver maps one more chunk after the
            // buffer (GROWN_IN_PLACE) or maps every chunk into a new, larger range (MOVED).
            try (VirtualMemoryBuffer large = resource.modifyAllocation(small, 6 * MiB)) {
                out.printf("grew to %d bytes: %s, at 0x%x, %d chunks%n", large.size(), large.origin(),
                        large.address(), large.chunkCount());

                // The old bytes are visible through the new buffer...
                byte[] back = new byte[data.length];
                large.copyTo(back);
                boolean oldIntact = Arrays.equals(data, back);

                // ...and the new part is ours to use: fill it and read some of it back.
                large.fill(data.length, large.size() - data.length, (byte) 0x7F);
                byte[] tail = new byte[4096];
                large.copyTo(large.size() - tail.length, tail, 0, tail.length);
                boolean tailWritten = true;
                for (byte b : tail) tailWritten &= b == 0x7F;

                out.println("first 1 MiB intact after the grow: " + oldIntact);
                out.println("new part written and read back: " + tailWritten);
                ok = oldIntact && tailWritten;
            }
        }
        // Both buffers are closed here, so their memory is unmapped and released: each chunk
        // goes when the last buffer that maps it is closed, whichever order they close in.
        out.println(ok ? "OK" : "FAILED");
        return ok;
    }
}
