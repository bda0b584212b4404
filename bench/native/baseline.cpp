// The C++ baseline the JMH benchmarks are compared with: the same driver-table calls the
// Java path makes, in a plain loop, with nothing of ours in between.
//
// It selects the driver exactly as Java does (cuvmm::select_driver, auto / cuda / host from
// CUVMM_DRIVER, CUVMM_HOST_DEVICES, CUVMM_HOST_GRANULARITY, CUVMM_CUDA_LIBRARY), takes the
// installed table once (cuvmm::driver()) and calls its function pointers directly: no call
// counters, no Step, no shared_ptr boxes, no exceptions. That is the honest floor: what any
// program must pay for the same work on the same driver.
//
// Operations (per op, in this order; RatioReport checks the Java side makes the same calls):
//   allocate_close_<size>  cuCtxGetCurrent, cuMemAddressReserve, cuMemCreate, cuMemMap,
//                          cuMemSetAccess, then each of cuMemUnmap, cuMemRelease,
//                          cuMemAddressFree after its own cuCtxGetCurrent (cuvmm makes the
//                          context current for every teardown call, as the thread that
//                          drops the last reference may have none: VMM_DESIGN section 4, A3).
//                          Reservations get the granularity as explicit alignment (A2).
//   grow_in_place          one chunk mapped right after a 1-chunk base buffer, then dropped:
//                          cuCtxGetCurrent, cuMemAddressReserve (hint = end, lands there),
//                          cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease,
//                          cuMemAddressFree (each teardown call after a cuCtxGetCurrent)
//   move                   the range after the base is taken by a decoy reservation, so the
//                          grow reserves a new 2-chunk range, re-maps the base chunk, maps a
//                          new one, then everything new is dropped again:
//                          cuCtxGetCurrent, cuMemAddressReserve (hint, lands elsewhere),
//                          cuMemAddressFree, cuMemAddressReserve, 2 x (cuMemMap, cuMemSetAccess)
//                          with cuMemCreate before the second map, 2 x cuMemUnmap,
//                          cuMemRelease, cuMemAddressFree (each teardown call after a
//                          cuCtxGetCurrent)
//
// Diagnostic ops (not part of the ratio; run with --model or --only model_*): the same work
// through cuvmm's C++ object model (vmm.hpp: Range::allocate / Range::grow and the boxes'
// destructors, every call through CUVMM_CALL with its counter and Step), i.e. what the Java
// path runs below JNI. model_* minus the raw op is the cost of the C++ layer; Java minus
// model_* is the cost of JNI and the Java objects.
//   model_allocate_close_2MiB, model_allocate_close_64MiB, model_grow_in_place, model_move
//
// Timing mirrors the JMH settings RatioReport uses: a fixed number of warm-up rounds and
// measured rounds of a fixed duration each; a round's result is its elapsed time divided
// by the ops it completed; the reported value is the mean of the measured rounds.
//
// Usage: cuvmm-baseline [--warmup-rounds N] [--rounds N] [--round-ms N] [--only NAME] [--model]
// Output: line-oriented "key=value" records (see print_* below), parsed by RatioReport.
#include "cuvmm/driver.hpp"
#include "cuvmm/vmm.hpp"
#include "baseline_common.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace cuvmm_bench;
using cuvmm::Entry;
using cuvmm::kEntryCount;
using Clock = std::chrono::steady_clock;

// Calls per entry point, filled only by the counting instantiation of an op.
struct CallCounts {
    std::array<long long, kEntryCount> n{};
};

// One raw table call; counted only when kCount (the verification pass), never when timed.
#define BASELINE_CALL(kCount, counts, op, name, ...)                                 \
    do {                                                                             \
        if constexpr (kCount) ++(counts).n[static_cast<int>(Entry::name)];           \
        CUresult rc_ = table.name(__VA_ARGS__);                                      \
        if (rc_ != CUDA_SUCCESS) fail_call(#name, rc_, op);                          \
    } while (0)

struct Env {
    const cuvmm::DriverTable& table;
    CUcontext ctx;
    CUmemAllocationProp prop;  // what VirtualMemoryResourceOptions.defaults() builds for device 0
    CUmemAccessDesc access;    // self read-write, the defaults' only access descriptor
    size_t granularity;
};

// What DeviceContextScope does on every allocate / grow once the context is current (the
// caller had none of its own, so nothing is put back when the op ends).
template <bool kCount>
inline void make_current(const Env& e, CallCounts& c, const char* op) {
    const cuvmm::DriverTable& table = e.table;
    CUcontext current = nullptr;
    BASELINE_CALL(kCount, c, op, cuCtxGetCurrent, &current);
    if (current != e.ctx) BASELINE_CALL(kCount, c, op, cuCtxSetCurrent, e.ctx);
}

// allocate(size) then close(): reserve, create, map, set access; unmap, release, free.
template <bool kCount>
inline CUdeviceptr allocate_close(const Env& e, size_t size, CallCounts& c) {
    static const char* op = "allocate_close";
    const cuvmm::DriverTable& table = e.table;
    make_current<kCount>(e, c, op);
    CUdeviceptr p = 0;
    BASELINE_CALL(kCount, c, op, cuMemAddressReserve, &p, size, e.granularity, 0, 0);
    CUmemGenericAllocationHandle h = 0;
    BASELINE_CALL(kCount, c, op, cuMemCreate, &h, size, &e.prop, 0);
    BASELINE_CALL(kCount, c, op, cuMemMap, p, size, 0, h, 0);
    BASELINE_CALL(kCount, c, op, cuMemSetAccess, p, size, &e.access, 1);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemUnmap, p, size);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemRelease, h);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemAddressFree, p, size);
    return p;
}

// A mapped one-chunk buffer (the base a grow starts from).
struct Base {
    CUdeviceptr address = 0;
    CUmemGenericAllocationHandle handle = 0;
    CUdeviceptr decoy = 0;  // move only: the reservation occupying [address + g, address + 2g)
};

// grow(base, 2 chunks) in place, then close of the grown buffer (drops only the new chunk).
template <bool kCount>
inline CUdeviceptr grow_in_place(const Env& e, const Base& b, CallCounts& c) {
    static const char* op = "grow_in_place";
    const cuvmm::DriverTable& table = e.table;
    const size_t g = e.granularity;
    const CUdeviceptr end = b.address + g;
    make_current<kCount>(e, c, op);
    CUdeviceptr next = 0;
    BASELINE_CALL(kCount, c, op, cuMemAddressReserve, &next, g, g, end, 0);
    if (next != end) die("grow_in_place: the range after the base buffer is not free (landed elsewhere)");
    CUmemGenericAllocationHandle h = 0;
    BASELINE_CALL(kCount, c, op, cuMemCreate, &h, g, &e.prop, 0);
    BASELINE_CALL(kCount, c, op, cuMemMap, end, g, 0, h, 0);
    BASELINE_CALL(kCount, c, op, cuMemSetAccess, end, g, &e.access, 1);
    // close(): the grown range's new mapping goes; the base mapping stays with the base buffer.
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemUnmap, end, g);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemRelease, h);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemAddressFree, end, g);
    return b.address;
}

// grow(base, 2 chunks) blocked by the decoy: try in place, give that range back, reserve a
// new 2-chunk range, re-map the base chunk, create and map the new one; then close.
template <bool kCount>
inline CUdeviceptr move(const Env& e, const Base& b, CallCounts& c) {
    static const char* op = "move";
    const cuvmm::DriverTable& table = e.table;
    const size_t g = e.granularity;
    const CUdeviceptr end = b.address + g;
    make_current<kCount>(e, c, op);
    CUdeviceptr next = 0;
    BASELINE_CALL(kCount, c, op, cuMemAddressReserve, &next, g, g, end, 0);
    if (next == end) die("move: the range after the base buffer was free; the decoy does not block it");
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemAddressFree, next, g);
    CUdeviceptr r = 0;
    BASELINE_CALL(kCount, c, op, cuMemAddressReserve, &r, 2 * g, g, 0, 0);
    BASELINE_CALL(kCount, c, op, cuMemMap, r, g, 0, b.handle, 0);
    BASELINE_CALL(kCount, c, op, cuMemSetAccess, r, g, &e.access, 1);
    CUmemGenericAllocationHandle h = 0;
    BASELINE_CALL(kCount, c, op, cuMemCreate, &h, g, &e.prop, 0);
    BASELINE_CALL(kCount, c, op, cuMemMap, r + g, g, 0, h, 0);
    BASELINE_CALL(kCount, c, op, cuMemSetAccess, r + g, g, &e.access, 1);
    // close(): both new mappings go (in address order), then the new chunk, then the range.
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemUnmap, r, g);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemUnmap, r + g, g);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemRelease, h);
    make_current<kCount>(e, c, op);  // TeardownContextScope
    BASELINE_CALL(kCount, c, op, cuMemAddressFree, r, 2 * g);
    return r;
}

// Setup (not timed): a one-chunk base buffer with a free chunk after it, and for the move
// a decoy reservation in that chunk.
Base make_base(const Env& e, bool with_decoy) {
    const cuvmm::DriverTable& table = e.table;
    const size_t g = e.granularity;
    CallCounts unused;
    static const char* op = "setup";
    // Reserve 2 chunks anywhere and give them back, so the base can go at the start of a
    // range known to be free for 2 chunks.
    CUdeviceptr probe = 0;
    BASELINE_CALL(false, unused, op, cuMemAddressReserve, &probe, 2 * g, 0, 0, 0);
    BASELINE_CALL(false, unused, op, cuMemAddressFree, probe, 2 * g);
    Base b;
    BASELINE_CALL(false, unused, op, cuMemAddressReserve, &b.address, g, 0, probe, 0);
    BASELINE_CALL(false, unused, op, cuMemCreate, &b.handle, g, &e.prop, 0);
    BASELINE_CALL(false, unused, op, cuMemMap, b.address, g, 0, b.handle, 0);
    BASELINE_CALL(false, unused, op, cuMemSetAccess, b.address, g, &e.access, 1);
    if (with_decoy) {
        BASELINE_CALL(false, unused, op, cuMemAddressReserve, &b.decoy, g, 0, b.address + g, 0);
        if (b.decoy != b.address + g) die("setup: the decoy reservation did not land right after the base buffer");
    }
    return b;
}

void drop_base(const Env& e, const Base& b) {
    const cuvmm::DriverTable& table = e.table;
    const size_t g = e.granularity;
    CallCounts unused;
    static const char* op = "teardown";
    if (b.decoy != 0) BASELINE_CALL(false, unused, op, cuMemAddressFree, b.decoy, g);
    BASELINE_CALL(false, unused, op, cuMemUnmap, b.address, g);
    BASELINE_CALL(false, unused, op, cuMemRelease, b.handle);
    BASELINE_CALL(false, unused, op, cuMemAddressFree, b.address, g);
}

// ---- the same ops through cuvmm's C++ object model (diagnostic) ----

// A one-chunk base range at the start of a free 2-chunk range, and for the move a decoy
// range right after it; built with address hints, as GrowFixture does on the Java side.
struct ModelBase {
    cuvmm::RangeRef base;
    cuvmm::RangeRef decoy;
};

cuvmm::ChunkSpecRef hinted(const cuvmm::ChunkSpecRef& spec, CUdeviceptr hint) {
    auto s = std::make_shared<cuvmm::ChunkSpec>(*spec);
    s->address_hint = hint;
    return s;
}

ModelBase make_model_base(const Env& e, const cuvmm::ChunkSpecRef& spec, bool with_decoy) {
    const size_t g = e.granularity;
    CUdeviceptr start = cuvmm::Range::allocate(spec, 2 * g)->address();  // freed again at once
    ModelBase m;
    m.base = cuvmm::Range::allocate(hinted(spec, start), g);
    if (m.base->address() != start) die("model setup: the base range did not land at the probed free address");
    if (with_decoy) {
        m.decoy = cuvmm::Range::allocate(hinted(spec, start + g), g);
        if (m.decoy->address() != start + g) die("model setup: the decoy range did not land after the base");
    }
    return m;
}

inline CUdeviceptr model_allocate_close(const cuvmm::ChunkSpecRef& spec, size_t size) {
    cuvmm::RangeRef r = cuvmm::Range::allocate(spec, size);
    CUdeviceptr a = r->address();
    r.reset();
    return a;
}

inline CUdeviceptr model_grow(const cuvmm::ChunkSpecRef& spec, const ModelBase& m, cuvmm::GrowOutcome expected,
                              const char* op) {
    cuvmm::GrowOutcome outcome = cuvmm::GrowOutcome::alias;
    cuvmm::RangeRef grown = m.base->grow(spec, 2 * m.base->mapped_size(), outcome);
    if (outcome != expected) die(std::string(op) + ": the grow did not take the path this op measures");
    CUdeviceptr a = grown->address();
    grown.reset();
    return a;
}

// Calls one op makes, read from the library's own counters (CUVMM_CALL counts them).
template <class Op>
CallCounts counted_by_library(Op&& op) {
    cuvmm::reset_call_counts();
    op();
    CallCounts c;
    for (int i = 0; i < kEntryCount; ++i) c.n[i] = cuvmm::call_count(static_cast<Entry>(i));
    return c;
}

struct Settings {
    int warmup_rounds = 3;
    int rounds = 5;
    long round_ms = 1000;
    std::string only;
    bool model = false;  // also run the model_* diagnostic ops
};

// Volatile sink so the compiler keeps every op (each returns an address).
volatile CUdeviceptr g_sink = 0;

struct Result {
    std::vector<double> round_ns;  // ns/op of each measured round
    long long ops = 0;             // measured ops in total
};

// Runs `op` (inlined: a template, no indirect call) in rounds of s.round_ms each;
// returns the measured rounds' ns/op.
template <class Op>
Result measure(const Settings& s, Op&& op) {
    Result r;
    const auto round = std::chrono::milliseconds(s.round_ms);
    for (int i = 0; i < s.warmup_rounds + s.rounds; ++i) {
        long long ops = 0;
        const auto start = Clock::now();
        auto now = start;
        // The clock is read every 8 ops (about 20 ns against an op of microseconds).
        do {
            for (int k = 0; k < 8; ++k) g_sink = op();
            ops += 8;
            now = Clock::now();
        } while (now - start < round);
        const double ns = std::chrono::duration<double, std::nano>(now - start).count() / static_cast<double>(ops);
        if (i >= s.warmup_rounds) {
            r.round_ns.push_back(ns);
            r.ops += ops;
        }
    }
    return r;
}

void print_result(const char* name, const Result& r) {
    double sum = 0, mn = r.round_ns.front(), mx = r.round_ns.front();
    for (double v : r.round_ns) {
        sum += v;
        mn = std::min(mn, v);
        mx = std::max(mx, v);
    }
    const double mean = sum / static_cast<double>(r.round_ns.size());
    double var = 0;
    for (double v : r.round_ns) var += (v - mean) * (v - mean);
    const double sd = r.round_ns.size() > 1 ? std::sqrt(var / static_cast<double>(r.round_ns.size() - 1)) : 0.0;
    std::printf("result name=%s mean_ns=%.1f sd_ns=%.1f min_ns=%.1f max_ns=%.1f rounds=%zu ops=%lld rounds_ns=",
                name, mean, sd, mn, mx, r.round_ns.size(), r.ops);
    for (size_t i = 0; i < r.round_ns.size(); ++i) std::printf("%s%.1f", i ? "," : "", r.round_ns[i]);
    std::printf("\n");
    std::fflush(stdout);
}

void print_calls(const char* name, const CallCounts& c) {
    std::printf("calls name=%s", name);
    for (int i = 0; i < kEntryCount; ++i) {
        if (c.n[i] != 0) std::printf(" %s=%lld", cuvmm::entry_name(i), c.n[i]);
    }
    std::printf("\n");
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    Settings s;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--warmup-rounds") s.warmup_rounds = static_cast<int>(parse_count(argc, argv, i, 0));
        else if (a == "--rounds") s.rounds = static_cast<int>(parse_count(argc, argv, i, 1));
        else if (a == "--round-ms") s.round_ms = parse_count(argc, argv, i, 1);
        else if (a == "--only" && i + 1 < argc) s.only = argv[++i];
        else if (a == "--model") s.model = true;
        else if (a == "--help" || a == "-h") {
            std::printf("usage: cuvmm-baseline [--warmup-rounds N] [--rounds N] [--round-ms N] [--only NAME] [--model]\n"
                        "ops: allocate_close_2MiB allocate_close_64MiB grow_in_place move; with --model (or --only)\n"
                        "also model_allocate_close_2MiB model_allocate_close_64MiB model_grow_in_place model_move\n"
                        "driver: CUVMM_DRIVER=auto|cuda|host, CUVMM_HOST_DEVICES, CUVMM_HOST_GRANULARITY, "
                        "CUVMM_CUDA_LIBRARY\n");
            return 0;
        } else {
            die("unknown argument: " + a + " (try --help)");
        }
    }

    cuvmm::DriverKind kind = select_and_report_driver();

    const cuvmm::DriverTable& table = cuvmm::driver();
    CallCounts unused;
    static const char* op = "setup";
    // What VirtualMemoryResource.create(0) and its first allocate do: primary context of
    // device 0 made current, default allocation properties, granularity query.
    CUdevice dev = 0;
    BASELINE_CALL(false, unused, op, cuDeviceGet, &dev, 0);
    CUcontext ctx = nullptr;
    BASELINE_CALL(false, unused, op, cuDevicePrimaryCtxRetain, &ctx, dev);
    BASELINE_CALL(false, unused, op, cuCtxSetCurrent, ctx);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t granularity = 0;
    BASELINE_CALL(false, unused, op, cuMemGetAllocationGranularity, &granularity, &prop,
                  CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const Env env{table, ctx, prop, access, granularity};
    std::printf("settings warmup_rounds=%d rounds=%d round_ms=%ld granularity=%zu\n", s.warmup_rounds, s.rounds,
                s.round_ms, granularity);
    std::fflush(stdout);

    auto wanted = [&](const char* name) { return s.only.empty() || s.only == name; };
    CallCounts none;  // never written: the timed instantiations do not count

    const size_t mib = size_t(1) << 20;
    const std::pair<const char*, size_t> allocs[] = {{"allocate_close_2MiB", 2 * mib}, {"allocate_close_64MiB", 64 * mib}};
    for (const auto& [name, bytes] : allocs) {
        if (!wanted(name)) continue;
        if (bytes % granularity != 0) die(std::string(name) + ": size is not a multiple of the granularity");
        const size_t size = bytes;
        CallCounts c;
        allocate_close<true>(env, size, c);  // one counted op, the context already current
        print_calls(name, c);
        print_result(name, measure(s, [&] { return allocate_close<false>(env, size, none); }));
    }
    if (wanted("grow_in_place")) {
        const Base b = make_base(env, false);
        CallCounts c;
        grow_in_place<true>(env, b, c);
        print_calls("grow_in_place", c);
        print_result("grow_in_place", measure(s, [&] { return grow_in_place<false>(env, b, none); }));
        drop_base(env, b);
    }
    if (wanted("move")) {
        const Base b = make_base(env, true);
        CallCounts c;
        move<true>(env, b, c);
        print_calls("move", c);
        print_result("move", measure(s, [&] { return move<false>(env, b, none); }));
        drop_base(env, b);
    }
    // Diagnostic: the same ops through the object model. Only on request.
    auto wanted_model = [&](const char* name) { return s.only.empty() ? s.model : s.only == name; };
    auto spec = std::make_shared<cuvmm::ChunkSpec>();
    spec->prop = prop;
    spec->device = 0;
    spec->access = {access};
    spec->granularity = granularity;
    const cuvmm::ChunkSpecRef model_spec = spec;
    const std::pair<const char*, size_t> model_allocs[] = {{"model_allocate_close_2MiB", 2 * mib},
                                                           {"model_allocate_close_64MiB", 64 * mib}};
    for (const auto& [name, bytes] : model_allocs) {
        if (!wanted_model(name)) continue;
        const size_t size = bytes;
        model_allocate_close(model_spec, size);
        print_calls(name, counted_by_library([&] { model_allocate_close(model_spec, size); }));
        print_result(name, measure(s, [&] { return model_allocate_close(model_spec, size); }));
    }
    if (wanted_model("model_grow_in_place")) {
        const ModelBase m = make_model_base(env, model_spec, false);
        auto op = [&] { return model_grow(model_spec, m, cuvmm::GrowOutcome::in_place, "model_grow_in_place"); };
        print_calls("model_grow_in_place", counted_by_library(op));
        print_result("model_grow_in_place", measure(s, op));
    }
    if (wanted_model("model_move")) {
        const ModelBase m = make_model_base(env, model_spec, true);
        auto op = [&] { return model_grow(model_spec, m, cuvmm::GrowOutcome::moved, "model_move"); };
        print_calls("model_move", counted_by_library(op));
        print_result("model_move", measure(s, op));
    }

    if (kind == cuvmm::DriverKind::host) {
        cuvmm::HostLiveCounts live = cuvmm::host_live_counts();
        std::printf("live allocations=%lld reservations=%lld mappings=%lld memfds=%lld\n", live.allocations,
                    live.reservations, live.mappings, live.memfds);
    }
    return 0;
}
