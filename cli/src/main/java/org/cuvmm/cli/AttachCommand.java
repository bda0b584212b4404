package org.cuvmm.cli;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;

import org.cuvmm.CudaException;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.ipc.internal.BytePattern;

/**
 * {@code cuvmm attach --socket PATH --name NAME [--verify --seed N] [--write-seed M]}:
 * imports a served buffer, optionally verifies the pattern of seed N, optionally overwrites
 * it with the pattern of seed M (the serving process sees the write: it is the same
 * memory), then releases it.
 */
final class AttachCommand implements Command {
    @Override
    public String name() { return "attach"; }

    @Override
    public String summary() {
        return "import a served buffer: --socket PATH --name NAME [--verify --seed N] [--write-seed M]";
    }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        Arguments a;
        try {
            a = Arguments.parse(args, Set.of("socket", "name", "seed", "write-seed"), Set.of("verify"));
            a.required("socket");
            a.required("name");
            if (a.has("verify") && !a.has("seed")) throw new IllegalArgumentException("--verify needs --seed N");
        } catch (IllegalArgumentException e) {
            err.println("cuvmm attach: " + e.getMessage());
            return USAGE;
        }
        String name = a.required("name");
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(Path.of(a.required("socket")), "cuvmm attach");
             Attachment attachment = client.attach(name, resource)) {
            VirtualMemoryBuffer buffer = attachment.buffer();
            out.println("attached '" + name + "': " + ByteSize.format(buffer.size()) + ", " + buffer.chunkCount()
                    + " chunk(s) at 0x" + Long.toHexString(buffer.address()) + " (lease " + attachment.leaseId() + ")");
            if (a.has("verify")) {
                long seed = a.longValue("seed", 0);
                long mismatch = BytePattern.firstMismatch(buffer, seed);
                if (mismatch >= 0) {
                    out.println("verify: FAILED at byte " + mismatch + " (pattern seed " + seed + ")");
                    return FAILED;
                }
                out.println("verify: OK, every byte matches pattern seed " + seed);
            }
            if (a.has("write-seed")) {
                long writeSeed = a.longValue("write-seed", 0);
                BytePattern.fill(buffer, writeSeed);
                out.println("wrote pattern seed " + writeSeed + " over the whole buffer");
            }
            out.println("released");
            return OK;
        } catch (IOException | CudaException | IllegalArgumentException | IllegalStateException e) {
            err.println("cuvmm attach: " + e.getMessage());
            return FAILED;
        }
    }
}
