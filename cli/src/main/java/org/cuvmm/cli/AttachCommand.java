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
        Path socket;
        String name;
        long seed;
        long writeSeed;
        try {
            // Every value is checked before connecting: a usage error takes no lease (exit 2).
            a = Arguments.parse(args, Set.of("socket", "name", "seed", "write-seed"), Set.of("verify"));
            socket = a.socketPath("socket");
            name = a.bufferName("name");
            if (a.has("verify") && !a.has("seed")) throw new IllegalArgumentException("--verify needs --seed N");
            if (a.has("seed") && !a.has("verify")) {
                throw new IllegalArgumentException("--seed only matters with --verify (add --verify, or drop --seed)");
            }
            seed = a.longValue("seed", 0);
            writeSeed = a.longValue("write-seed", 0);
        } catch (IllegalArgumentException e) {
            err.println("cuvmm attach: " + e.getMessage());
            return USAGE;
        }
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(socket, "cuvmm attach");
             Attachment attachment = client.attach(name, resource)) {
            VirtualMemoryBuffer buffer = attachment.buffer();
            out.println("attached '" + name + "': " + ByteSize.format(buffer.size()) + ", " + buffer.chunkCount()
                    + " chunk(s) at 0x" + Long.toHexString(buffer.address()) + " (lease " + attachment.leaseId() + ")");
            if (a.has("verify")) {
                long mismatch = BytePattern.firstMismatch(buffer, seed);
                if (mismatch >= 0) {
                    out.println("verify: FAILED at byte " + mismatch + " (pattern seed " + seed + ")");
                    return FAILED;
                }
                out.println("verify: OK, every byte matches pattern seed " + seed);
            }
            if (a.has("write-seed")) {
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
