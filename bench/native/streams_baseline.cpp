// The C++ baseline of the stream-copy benchmarks (bench/run-streams, StreamsReport): the
// floor the Java asynchronous copies are compared with, in the same run.
//
// Two kinds of floor, per size (64 KiB, 2 MiB, 64 MiB):
//   memcpy_<size>            a plain memcpy of the same bytes between two pre-faulted host
//                            buffers: the physical limit of any copy on the host driver,
//                            whose device memory is host memory (on a GPU it means nothing).
//   memcpy_pieces_<size>     the same bytes in memcpy calls of at most 2 MiB (the host
//                            driver's chunk: it copies chunk by chunk, and on this machine
//                            glibc's memcpy of 64 MiB in one call, with non-temporal stores,
//                            is slower than 2 MiB pieces); the report takes the faster of the
//                            two as the floor
//   memcpy_memfd_<size>      host driver only: memcpy from the cuMemHostAlloc source into a
//                            MAP_SHARED mapping of the device allocation's own memfd (exported
//                            with cuMemExportToShareableHandle, as vmm-ipc does): the very
//                            pages and memory kinds the host driver's copy touches, without
//                            the stream. The closest physical floor for the host-to-device copy.
//   htod_pinned_<size>       cuMemcpyHtoDAsync from cuMemHostAlloc memory, then
//                            cuStreamSynchronize: the driver calls of Java's
//                            copyFromAsync(PinnedHostBuffer) + Stream.synchronize(), through
//                            the driver table's function pointers, nothing of cuvmm between.
//   htod_pinned_recorded_<size>, dtoh_pinned_recorded_<size>  diagnostic: the pinned loops
//                            with the calls cuvmm's Java op adds for stream-ordered lifetimes
//                            (one cuEventRecord of the event the buffer and the pinned memory
//                            share for the stream, made in the copy's native call, and 2
//                            cuCtxGetCurrent: one for the copy and its record, one for the
//                            synchronize): every driver call the Java op makes, so Java minus
//                            this is JNI and the Java objects
//   htod_pinned_batch32x64KiB, htod_pinned_busy_batch32x64KiB  32 pinned copies of 64 KiB,
//                            one synchronize; the busy one first queues a no-op host function
//                            (the stream is busy: no copy can run inline on the host driver)
//   htod_pageable_<size>     the same from malloc'd (pageable) memory
//   dtoh_pinned_<size>       cuMemcpyDtoHAsync into cuMemHostAlloc memory, cuStreamSynchronize
//   dtoh_pageable_<size>     the same into pageable memory
// And for the overlap (64 MiB per copy, two device buffers, two pinned sources):
//   overlap_one_stream       both copies (cuMemcpyHtoDAsync x2) on one stream, one synchronize
//   overlap_two_streams      one copy on each of two streams, both synchronized
//   memcpy_two_threads       two threads each memcpy 64 MiB (in 2 MiB pieces) at once (each op starts and joins
//                            the two threads: about 0.1 ms against 10+ ms of copying): what
//                            the machine's memory allows two copies at once
//
// The driver is selected exactly as Java selects it (baseline_common.hpp); the streams are
// blocking (flag 0, priority 0), as Stream.create(0) makes them; the device memory is one
// reserve + create + map + set-access per buffer, set up before timing.
//
// Usage: cuvmm-streams-baseline [--warmup-rounds N] [--rounds N] [--round-ms N] [--only PREFIX]
// Output: "result name=... rounds_ns=a,b,c" per op (ns per op of each measured round) as the
// other baselines print it, and "live ..." (host driver) at the end.
#include "cuvmm/driver.hpp"
#include "baseline_common.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace {

using namespace cuvmm_bench;
using Clock = std::chrono::steady_clock;

#define CALL(op, name, ...)                                       \
    do {                                                          \
        CUresult rc_ = table.name(__VA_ARGS__);                   \
        if (rc_ != CUDA_SUCCESS) fail_call(#name, rc_, op);       \
    } while (0)

void CUDA_CB noop_host_fn(void*) {}

struct Settings {
    int warmup_rounds = 1;
    int rounds = 3;
    long round_ms = 500;
    std::string only;
};

// A mapped device buffer of `size` bytes (rounded up to the granularity).
struct DeviceBuffer {
    CUdeviceptr address = 0;
    size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
};

DeviceBuffer device_buffer(const cuvmm::DriverTable& table, size_t bytes, size_t granularity) {
    static const char* op = "setup";
    DeviceBuffer b;
    b.size = (bytes + granularity - 1) / granularity * granularity;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CALL(op, cuMemAddressReserve, &b.address, b.size, granularity, 0, 0);
    CALL(op, cuMemCreate, &b.handle, b.size, &prop, 0);
    CALL(op, cuMemMap, b.address, b.size, 0, b.handle, 0);
    CALL(op, cuMemSetAccess, b.address, b.size, &access, 1);
    return b;
}

void drop(const cuvmm::DriverTable& table, const DeviceBuffer& b) {
    static const char* op = "teardown";
    CALL(op, cuMemUnmap, b.address, b.size);
    CALL(op, cuMemRelease, b.handle);
    CALL(op, cuMemAddressFree, b.address, b.size);
}

// Page-aligned pageable memory, every page touched (no first-touch faults while timed).
unsigned char* pageable(size_t bytes, unsigned char fill) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes) != 0) die("posix_memalign failed for " + std::to_string(bytes) + " bytes");
    std::memset(p, fill, bytes);
    return static_cast<unsigned char*>(p);
}

unsigned char* pinned(const cuvmm::DriverTable& table, size_t bytes, unsigned char fill) {
    static const char* op = "setup";
    void* p = nullptr;
    CALL(op, cuMemHostAlloc, &p, bytes, CU_MEMHOSTALLOC_PORTABLE);
    std::memset(p, fill, bytes);
    return static_cast<unsigned char*>(p);
}

// Runs `op` in rounds of s.round_ms (the clock read after every op: ops take microseconds
// to milliseconds); returns each measured round's ns/op.
template <class Op>
std::vector<double> measure(const Settings& s, Op&& op) {
    std::vector<double> out;
    const auto round = std::chrono::milliseconds(s.round_ms);
    for (int i = 0; i < s.warmup_rounds + s.rounds; ++i) {
        long long ops = 0;
        const auto start = Clock::now();
        auto now = start;
        do {
            op();
            ++ops;
            now = Clock::now();
        } while (now - start < round);
        if (i >= s.warmup_rounds) {
            out.push_back(std::chrono::duration<double, std::nano>(now - start).count() / static_cast<double>(ops));
        }
    }
    return out;
}

void print_result(const std::string& name, size_t bytes, const std::vector<double>& rounds) {
    std::printf("result name=%s bytes=%zu rounds_ns=", name.c_str(), bytes);
    for (size_t i = 0; i < rounds.size(); ++i) std::printf("%s%.1f", i ? "," : "", rounds[i]);
    std::printf("\n");
    std::fflush(stdout);
}

volatile unsigned char g_sink = 0;

}  // namespace

int main(int argc, char** argv) {
    program = "cuvmm-streams-baseline";
    Settings s;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--warmup-rounds") s.warmup_rounds = static_cast<int>(parse_count(argc, argv, i, 0));
        else if (a == "--rounds") s.rounds = static_cast<int>(parse_count(argc, argv, i, 1));
        else if (a == "--round-ms") s.round_ms = parse_count(argc, argv, i, 1);
        else if (a == "--only" && i + 1 < argc) s.only = argv[++i];
        else if (a == "--help" || a == "-h") {
            std::printf("usage: cuvmm-streams-baseline [--warmup-rounds N (1)] [--rounds N (3)] [--round-ms N (500)] "
                        "[--only NAME_PREFIX]\n"
                        "ops: memcpy_, memcpy_pieces_, memcpy_memfd_ (host driver), htod_pinned_, htod_pinned_batch32x64KiB, htod_pinned_busy_batch32x64KiB, htod_pinned_recorded_, dtoh_pinned_recorded_, htod_pageable_, dtoh_pinned_, dtoh_pageable_ (each at 64KiB, "
                        "2MiB, 64MiB), overlap_one_stream, overlap_two_streams, memcpy_two_threads\n"
                        "driver: CUVMM_DRIVER=auto|cuda|host, CUVMM_HOST_DEVICES, CUVMM_HOST_GRANULARITY, "
                        "CUVMM_CUDA_LIBRARY\n");
            return 0;
        } else {
            die("unknown argument: " + a + " (try --help)");
        }
    }

    cuvmm::DriverKind kind = select_and_report_driver();

    const cuvmm::DriverTable& table = cuvmm::driver();
    static const char* op = "setup";
    CUdevice dev = 0;
    CALL(op, cuDeviceGet, &dev, 0);
    CUcontext ctx = nullptr;
    CALL(op, cuDevicePrimaryCtxRetain, &ctx, dev);
    CALL(op, cuCtxSetCurrent, ctx);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t granularity = 0;
    CALL(op, cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    CUstream a = nullptr, b = nullptr;
    CALL(op, cuStreamCreateWithPriority, &a, 0, 0);
    CALL(op, cuStreamCreateWithPriority, &b, 0, 0);
    // The event cuvmm records per stream for the buffer and the pinned memory of a copy (their
    // use tables share it), created as cuvmm creates its internal ones (Event.internal:
    // CU_EVENT_DISABLE_TIMING).
    CUevent e1 = nullptr;
    CALL(op, cuEventCreate, &e1, CU_EVENT_DISABLE_TIMING);
    std::printf("settings warmup_rounds=%d rounds=%d round_ms=%ld granularity=%zu\n", s.warmup_rounds, s.rounds,
                s.round_ms, granularity);
    std::fflush(stdout);

    const size_t big = size_t(64) << 20;
    DeviceBuffer d1 = device_buffer(table, big, granularity);
    DeviceBuffer d2 = device_buffer(table, big, granularity);
    unsigned char* pin1 = pinned(table, big, 0x5a);
    unsigned char* pin2 = pinned(table, big, 0xa5);
    unsigned char* page1 = pageable(big, 0x3c);
    unsigned char* page2 = pageable(big, 0xc3);

    // One check that the copies really move the bytes (not timed).
    CALL("check", cuMemcpyHtoDAsync, d1.address, pin1, big, a);
    CALL("check", cuMemcpyDtoHAsync, page2, d1.address, big, a);
    CALL("check", cuStreamSynchronize, a);
    if (page2[0] != 0x5a || page2[big - 1] != 0x5a) die("check: a pinned copy there and back changed the bytes");

    // Host driver: a CPU mapping of d1's memfd (the device address itself is PROT_NONE to the CPU).
    unsigned char* memfd_view = nullptr;
    int memfd = -1;
    if (kind == cuvmm::DriverKind::host) {
        CALL("setup", cuMemExportToShareableHandle, &memfd, d1.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        void* v = ::mmap(nullptr, d1.size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (v == MAP_FAILED) die("setup: mmap of the exported memfd failed");
        memfd_view = static_cast<unsigned char*>(v);
        if (memfd_view[0] != 0x5a) die("setup: the memfd mapping does not show the device buffer's bytes");
    }

    auto wanted = [&](const std::string& name) { return s.only.empty() || name.rfind(s.only, 0) == 0; };
    const std::pair<const char*, size_t> sizes[] = {{"64KiB", size_t(64) << 10}, {"2MiB", size_t(2) << 20},
                                                    {"64MiB", big}};
    for (const auto& [label, n] : sizes) {
        const size_t bytes = n;
        std::string name = std::string("memcpy_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                std::memcpy(page2, page1, bytes);
                g_sink = page2[bytes - 1];
            }));
        }
        name = std::string("memcpy_pieces_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                const size_t piece = size_t(2) << 20;
                for (size_t at = 0; at < bytes; at += piece) {
                    std::memcpy(page2 + at, page1 + at, std::min(piece, bytes - at));
                }
                g_sink = page2[bytes - 1];
            }));
        }
        name = std::string("memcpy_memfd_") + label;
        if (memfd_view != nullptr && wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                std::memcpy(memfd_view, pin1, bytes);
                g_sink = memfd_view[bytes - 1];
            }));
        }
        name = std::string("htod_pinned_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                CALL("htod_pinned", cuMemcpyHtoDAsync, d1.address, pin1, bytes, a);
                CALL("htod_pinned", cuStreamSynchronize, a);
            }));
        }
        // Small copies in a batch (64 KiB only): 32 copies of 64 KiB to successive offsets,
        // then one synchronize (bytes: all 32). "batch32": on an idle stream, where the host
        // driver runs each inline; "busy_batch32": behind a no-op host function, so the
        // stream is busy and all 32 go to its worker (one handoff for the batch).
        if (bytes == (size_t(64) << 10)) {
            for (bool busy : {false, true}) {
                name = std::string(busy ? "htod_pinned_busy_batch32x" : "htod_pinned_batch32x") + label;
                if (!wanted(name)) continue;
                print_result(name, 32 * bytes, measure(s, [&] {
                    if (busy) CALL("htod_pinned_batch", cuLaunchHostFunc, a, noop_host_fn, nullptr);
                    for (size_t k = 0; k < 32; ++k) {
                        CALL("htod_pinned_batch", cuMemcpyHtoDAsync, d1.address + k * bytes, pin1 + k * bytes, bytes, a);
                    }
                    CALL("htod_pinned_batch", cuStreamSynchronize, a);
                }));
            }
        }
        name = std::string("htod_pinned_recorded_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                CUcontext c = nullptr;
                CALL("htod_pinned_recorded", cuCtxGetCurrent, &c);
                CALL("htod_pinned_recorded", cuMemcpyHtoDAsync, d1.address, pin1, bytes, a);
                CALL("htod_pinned_recorded", cuEventRecord, e1, a);
                CALL("htod_pinned_recorded", cuCtxGetCurrent, &c);
                CALL("htod_pinned_recorded", cuStreamSynchronize, a);
            }));
        }
        name = std::string("htod_pageable_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                CALL("htod_pageable", cuMemcpyHtoDAsync, d1.address, page1, bytes, a);
                CALL("htod_pageable", cuStreamSynchronize, a);
            }));
        }
        name = std::string("dtoh_pinned_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                CALL("dtoh_pinned", cuMemcpyDtoHAsync, pin2, d1.address, bytes, a);
                CALL("dtoh_pinned", cuStreamSynchronize, a);
            }));
        }
        name = std::string("dtoh_pinned_recorded_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                CUcontext c = nullptr;
                CALL("dtoh_pinned_recorded", cuCtxGetCurrent, &c);
                CALL("dtoh_pinned_recorded", cuMemcpyDtoHAsync, pin2, d1.address, bytes, a);
                CALL("dtoh_pinned_recorded", cuEventRecord, e1, a);
                CALL("dtoh_pinned_recorded", cuCtxGetCurrent, &c);
                CALL("dtoh_pinned_recorded", cuStreamSynchronize, a);
            }));
        }
        name = std::string("dtoh_pageable_") + label;
        if (wanted(name)) {
            print_result(name, bytes, measure(s, [&] {
                CALL("dtoh_pageable", cuMemcpyDtoHAsync, page2, d1.address, bytes, a);
                CALL("dtoh_pageable", cuStreamSynchronize, a);
            }));
        }
    }
    if (wanted("overlap_one_stream")) {
        print_result("overlap_one_stream", 2 * big, measure(s, [&] {
            CALL("overlap_one_stream", cuMemcpyHtoDAsync, d1.address, pin1, big, a);
            CALL("overlap_one_stream", cuMemcpyHtoDAsync, d2.address, pin2, big, a);
            CALL("overlap_one_stream", cuStreamSynchronize, a);
        }));
    }
    if (wanted("overlap_two_streams")) {
        print_result("overlap_two_streams", 2 * big, measure(s, [&] {
            CALL("overlap_two_streams", cuMemcpyHtoDAsync, d1.address, pin1, big, a);
            CALL("overlap_two_streams", cuMemcpyHtoDAsync, d2.address, pin2, big, b);
            CALL("overlap_two_streams", cuStreamSynchronize, a);
            CALL("overlap_two_streams", cuStreamSynchronize, b);
        }));
    }
    if (wanted("memcpy_two_threads")) {
        print_result("memcpy_two_threads", 2 * big, measure(s, [&] {
            auto pieces = [](unsigned char* to, const unsigned char* from, size_t n) {
                const size_t piece = size_t(2) << 20;
                for (size_t at = 0; at < n; at += piece) std::memcpy(to + at, from + at, std::min(piece, n - at));
            };
            std::thread t([&] { pieces(pin2, pin1, big); });
            pieces(page2, page1, big);
            t.join();
            g_sink = page2[big - 1] ^ pin2[big - 1];
        }));
    }

    CALL("teardown", cuEventDestroy, e1);
    CALL("teardown", cuStreamDestroy, a);
    CALL("teardown", cuStreamDestroy, b);
    CALL("teardown", cuMemFreeHost, pin1);
    CALL("teardown", cuMemFreeHost, pin2);
    std::free(page1);
    std::free(page2);
    if (memfd_view != nullptr) {
        ::munmap(memfd_view, d1.size);
        ::close(memfd);
    }
    drop(table, d1);
    drop(table, d2);
    if (kind == cuvmm::DriverKind::host) {
        cuvmm::HostLiveCounts live = cuvmm::host_live_counts();
        std::printf("live allocations=%lld reservations=%lld mappings=%lld memfds=%lld\n", live.allocations,
                    live.reservations, live.mappings, live.memfds);
    }
    return 0;
}
