// Tests of cuvmm's object model (native/range.cpp, reservation.cpp, mapping.cpp,
// allocation.cpp, transfer.cpp) over the host driver, for what cuvmm itself must do right
// on a real driver: the arguments it passes and the calls it makes, observed by a spy that
// wraps some host driver entry points (the installed table is patched in place; every
// wrapper forwards to the host driver's own entry point).
//
//   A1  an allocate whose address hint the driver refuses retries once with no hint
//   A2  cuMemAddressReserve always gets an explicit alignment, max(option, granularity)
//   A3  unmap, release and address-free run with the resource's context current, also on
//       a thread that never had one (the cleaner's, a fresh thread)
//   A4  a copy or fill on a range its device may not access is refused by cuvmm before any
//       driver copy call (the async ones too, for the device of their stream)
//   A9  a cuDriverGetVersion failure refuses the cuda driver, naming the call and the CUresult
//   S1  stream, event and pinned-memory boxes make exactly one undo call each (none for the
//       borrowed default streams); a host function's trampoline waits for its token
//   C1  checked copies (checked_copy.hpp) of a file mapping whose file was truncated stop at
//       the first lost page, both ways, with no signal; a whole mapping copies whole
//   I1  (issue 11) allocation ids: non-zero, distinct, kept by a grow; release notices queue
//       the id only while on, in release order, after cuMemRelease; export_chunk_fds makes one
//       export call per chunk named and checks before any call
//
// Plain main(): one line per failed check, then "N passed, M failed"; non-zero exit on failure.
#include "cuvmm/checked_copy.hpp"
#include "cuvmm/cuda_errors.hpp"
#include "cuvmm/driver.hpp"
#include "cuvmm/release_notices.hpp"
#include "cuvmm/sharing.hpp"
#include "cuvmm/stream.hpp"
#include "cuvmm/transfer.hpp"
#include "cuvmm/vmm.hpp"

#include <dlfcn.h>
#include <sys/mman.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace cuvmm;

namespace {

int g_passed = 0;
int g_failed = 0;
size_t G = 0;

void check_true(bool ok, const char* expr, int line) {
    if (ok) {
        ++g_passed;
    } else {
        ++g_failed;
        std::printf("FAIL line %d: %s\n", line, expr);
    }
}
#define CHECK(cond) check_true((cond), #cond, __LINE__)

// ---- the spy ----------------------------------------------------------------------------

DriverTable g_real;  // the host driver's entry points, as installed

struct ReserveCall {
    size_t alignment;
    CUdeviceptr hint;
    CUresult result;
};
std::vector<ReserveCall> g_reserves;
CUresult g_hinted_reserve_fails_with = CUDA_SUCCESS;  // when set, every call with a hint returns it
int g_teardown_calls = 0;         // cuMemUnmap + cuMemRelease + cuMemAddressFree
int g_teardown_without_ctx = 0;   // ... of which ran with no current context

void note_teardown() {
    ++g_teardown_calls;
    CUcontext ctx = nullptr;
    if (g_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) ++g_teardown_without_ctx;
}

CUresult CUDAAPI spy_reserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
    CUresult rc = addr != 0 && g_hinted_reserve_fails_with != CUDA_SUCCESS
                          ? g_hinted_reserve_fails_with
                          : g_real.cuMemAddressReserve(ptr, size, alignment, addr, flags);
    g_reserves.push_back({alignment, addr, rc});
    return rc;
}
CUresult CUDAAPI spy_unmap(CUdeviceptr ptr, size_t size) {
    note_teardown();
    return g_real.cuMemUnmap(ptr, size);
}
CUresult CUDAAPI spy_release(CUmemGenericAllocationHandle h) {
    note_teardown();
    return g_real.cuMemRelease(h);
}
CUresult CUDAAPI spy_free(CUdeviceptr ptr, size_t size) {
    note_teardown();
    return g_real.cuMemAddressFree(ptr, size);
}

void install_spy() {
    // driver() is the process's installed table (a non-const object behind a const
    // reference); only this single-threaded test patches it, before any concurrent use.
    DriverTable& t = const_cast<DriverTable&>(driver());
    g_real = t;
    t.cuMemAddressReserve = spy_reserve;
    t.cuMemUnmap = spy_unmap;
    t.cuMemRelease = spy_release;
    t.cuMemAddressFree = spy_free;
}

void reset_spy() {
    g_reserves.clear();
    g_teardown_calls = 0;
    g_teardown_without_ctx = 0;
}

// ---- helpers ----------------------------------------------------------------------------

CUmemAccessDesc self_access(int device, CUmemAccess_flags flags) {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device;
    d.flags = flags;
    return d;
}

ChunkSpecRef make_spec(int device, std::vector<CUmemAccessDesc> access, size_t alignment = 0, CUdeviceptr hint = 0) {
    auto spec = std::make_shared<ChunkSpec>();
    spec->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    spec->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    spec->prop.location.id = device;
    spec->device = device;
    spec->access = std::move(access);
    spec->granularity = G;
    spec->alignment = alignment;
    spec->address_hint = hint;
    return spec;
}

ChunkSpecRef rw_spec(int device, size_t alignment = 0, CUdeviceptr hint = 0) {
    return make_spec(device, {self_access(device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)}, alignment, hint);
}

// A free address that is a multiple of `align`, found by reserving and freeing (host
// driver directly, not counted by the spy).
CUdeviceptr free_address(size_t align, size_t size) {
    CUdeviceptr p = 0;
    if (g_real.cuMemAddressReserve(&p, size, align, 0, 0) != CUDA_SUCCESS) return 0;
    g_real.cuMemAddressFree(p, size);
    return p;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- A1 ---------------------------------------------------------------------------------

void test_hint_fallback() {
    const size_t align = 4 * G;
    const CUdeviceptr base = free_address(align, 16 * G);
    CHECK(base != 0 && base % align == 0);

    // An honoured hint: one reservation call, exactly there.
    reset_spy();
    RangeRef r = Range::allocate(rw_spec(0, align, base), G);
    CHECK(r->address() == base);
    CHECK(g_reserves.size() == 1);
    r.reset();

    // A hint the driver refuses (not a multiple of the alignment: INVALID_VALUE, B22):
    // allocate still succeeds, with a second call that has no hint.
    reset_spy();
    try {
        r = Range::allocate(rw_spec(0, align, base + G), G);
        CHECK(r->address() != 0 && r->address() % align == 0);
    } catch (const DriverError& e) {
        CHECK(!"allocate with a refused hint threw");
        std::printf("  %s\n", e.what());
    }
    CHECK(g_reserves.size() == 2);
    if (g_reserves.size() == 2) {
        CHECK(g_reserves[0].hint == base + G && g_reserves[0].result == CUDA_ERROR_INVALID_VALUE);
        CHECK(g_reserves[1].hint == 0 && g_reserves[1].result == CUDA_SUCCESS);
    }
    r.reset();

    // No hint: one call, never a retry.
    reset_spy();
    r = Range::allocate(rw_spec(0), G);
    CHECK(g_reserves.size() == 1);
    r.reset();

    // Only a failure a retry without the hint can cure is retried: a refused hint
    // (INVALID_VALUE, above) or no room where the hint points (OUT_OF_MEMORY). Any other
    // code (here NOT_SUPPORTED) reaches the caller after one call.
    for (CUresult code : {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_SUPPORTED}) {
        reset_spy();
        g_hinted_reserve_fails_with = code;
        CUresult thrown = CUDA_SUCCESS;
        try {
            r = Range::allocate(rw_spec(0, align, base), G);
        } catch (const DriverError& e) {
            thrown = e.code();
        }
        g_hinted_reserve_fails_with = CUDA_SUCCESS;
        r.reset();
        if (code == CUDA_ERROR_OUT_OF_MEMORY) {
            CHECK(thrown == CUDA_SUCCESS && g_reserves.size() == 2);
        } else {
            CHECK(thrown == code && g_reserves.size() == 1);
        }
    }
    CHECK(object_counts().reservations == 0 && object_counts().mappings == 0);
}


// ---- A2 ---------------------------------------------------------------------------------

void test_explicit_alignment() {
    // Option 0 and an option below the granularity: the driver gets the granularity.
    for (size_t option : {size_t(0), size_t(4096)}) {
        reset_spy();
        RangeRef r = Range::allocate(rw_spec(0, option), G);
        CHECK(g_reserves.size() == 1 && g_reserves[0].alignment == G);
        // The grow probe (a hint at the range's end) asks for the granularity too.
        reset_spy();
        GrowOutcome outcome = GrowOutcome::alias;
        RangeRef grown = r->grow(r->spec(), 2 * G, outcome);
        CHECK(!g_reserves.empty() && g_reserves[0].alignment == G && g_reserves[0].hint == r->address() + G);
        for (const auto& call : g_reserves) CHECK(call.alignment != 0);
    }
    // An option above the granularity is passed as is, also for a moved grow.
    const size_t align = 4 * G;
    reset_spy();
    RangeRef r = Range::allocate(rw_spec(0, align), G);
    CHECK(g_reserves.size() == 1 && g_reserves[0].alignment == align);
    CUdeviceptr blocker = 0;  // occupies the address right after the range: the grow moves
    CHECK(g_real.cuMemAddressReserve(&blocker, G, 0, r->address() + G, 0) == CUDA_SUCCESS);
    // The blocker lands there unless something else of the process already sits there (seen
    // under Maven): either way the address after the range is taken and the grow must move.
    reset_spy();
    GrowOutcome outcome = GrowOutcome::alias;
    RangeRef moved = r->grow(r->spec(), 2 * G, outcome);
    CHECK(outcome == GrowOutcome::moved);
    CHECK(g_reserves.size() == 2 && g_reserves.back().alignment == align && moved->address() % align == 0);
    g_real.cuMemAddressFree(blocker, G);
}

// ---- A3 ---------------------------------------------------------------------------------

void test_teardown_context() {
    RangeRef r = Range::allocate(rw_spec(1), G);  // device 1: not the default context
    reset_spy();
    // The last reference drops on a fresh thread, which has no current context.
    std::thread cleaner([&r] {
        CUcontext before = reinterpret_cast<CUcontext>(1);
        g_real.cuCtxGetCurrent(&before);
        CHECK(before == nullptr);
        r.reset();
    });
    cleaner.join();
    CHECK(g_teardown_calls == 3);  // unmap, release, address free
    CHECK(g_teardown_without_ctx == 0);
    CHECK(cleanup_failure_count() == 0);
}

// ---- A4 ---------------------------------------------------------------------------------

// Runs `op`, which must throw a DriverError whose message has every part in `parts`, and
// must not reach the driver's copy entry point `entry`.
template <class Op>
void expect_refused(Op op, Entry entry, std::vector<std::string> parts, int line) {
    const long long before = call_count(entry);
    std::string what;
    try {
        op();
    } catch (const DriverError& e) {
        what = e.what();
        check_true(e.code() == CUDA_ERROR_INVALID_VALUE, "refusal code is CUDA_ERROR_INVALID_VALUE", line);
    }
    check_true(!what.empty(), "the copy was refused", line);
    check_true(call_count(entry) == before, "no driver copy call was made", line);
    for (const auto& part : parts) {
        if (!contains(what, part)) {
            ++g_failed;
            std::printf("FAIL line %d: message lacks \"%s\": %s\n", line, part.c_str(), what.c_str());
        } else {
            ++g_passed;
        }
    }
}

void test_copies_checked_before_the_driver() {
    std::vector<unsigned char> host(G, 7);
    RangeRef rw = Range::allocate(rw_spec(0), 2 * G);
    RangeRef read_only = Range::allocate(make_spec(0, {self_access(0, CU_MEM_ACCESS_FLAGS_PROT_READ)}), 2 * G);
    RangeRef none = Range::allocate(make_spec(0, {}), G);
    RangeRef on_one = Range::allocate(rw_spec(1), G);  // device 0 has no access to it

    char name[96];
    std::snprintf(name, sizeof name, "VirtualMemoryBuffer[0x%llx, %zu bytes]",
                  static_cast<unsigned long long>(read_only->address()), read_only->size());
    expect_refused([&] { copy_host_to_range(*read_only, 0, host.data(), 16); }, Entry::cuMemcpyHtoD,
                   {"device 0 has READ access", name, "needs READ_WRITE", "Refused by cuvmm"}, __LINE__);
    expect_refused([&] { fill_range(*read_only, G, 16, 1); }, Entry::cuMemsetD8,
                   {"device 0 has READ access", "chunk 1 of 1"}, __LINE__);
    expect_refused([&] { copy_range_to_range(*read_only, 0, *rw, 0, 16); }, Entry::cuMemcpyDtoD,
                   {"READ access to the destination"}, __LINE__);
    expect_refused([&] { copy_range_to_host(*none, 0, host.data(), 16); }, Entry::cuMemcpyDtoH,
                   {"device 0 has no access to the source", "needs READ"}, __LINE__);
    expect_refused([&] { copy_range_to_range(*rw, 0, *on_one, 0, 16); }, Entry::cuMemcpyDtoD,
                   {"device 0 has no access to the source"}, __LINE__);

    // What the access allows still reaches the driver and works.
    const long long reads = call_count(Entry::cuMemcpyDtoH);
    copy_range_to_host(*read_only, 0, host.data(), 16);
    copy_host_to_range(*rw, 0, host.data(), G);
    copy_range_to_range(*on_one, 0, *on_one, G / 2, 16);
    CHECK(call_count(Entry::cuMemcpyDtoH) == reads + 1);

    // A chunk added by a grow with other options has its own access: the check is per chunk.
    GrowOutcome outcome = GrowOutcome::alias;
    RangeRef grown = rw->grow(make_spec(0, {self_access(0, CU_MEM_ACCESS_FLAGS_PROT_READ)}), 3 * G, outcome);
    copy_host_to_range(*grown, 0, host.data(), G);  // chunk 1: READWRITE
    expect_refused([&] { copy_host_to_range(*grown, 2 * G, host.data(), 16); }, Entry::cuMemcpyHtoD,
                   {"chunk 2 of 2"}, __LINE__);
}
// ---- S1 ---------------------------------------------------------------------------------

void test_stream_boxes() {
    const long long creates = call_count(Entry::cuStreamCreateWithPriority);
    const long long destroys = call_count(Entry::cuStreamDestroy);
    {
        StreamRef s = Stream::create(1, CU_STREAM_NON_BLOCKING, 0);
        StreamRef legacy = Stream::legacy(0);
        StreamRef per_thread = Stream::per_thread(0);
        CHECK(s->owned() && !legacy->owned() && !per_thread->owned());
        CHECK(legacy->handle() == CU_STREAM_LEGACY && per_thread->handle() == CU_STREAM_PER_THREAD);
        std::thread dropper([&s] { s.reset(); });  // a thread with no current context
        dropper.join();
    }
    CHECK(call_count(Entry::cuStreamCreateWithPriority) == creates + 1);
    CHECK(call_count(Entry::cuStreamDestroy) == destroys + 1);

    const long long event_destroys = call_count(Entry::cuEventDestroy);
    {
        StreamRef s = Stream::create(0, CU_STREAM_DEFAULT, 0);
        EventRef e = Event::create(0, CU_EVENT_DISABLE_TIMING);
        CHECK(e->query(Step{"query"}));  // never recorded: complete
        e->record(*s, Step{"record"});
        e->synchronize(Step{"sync"});
        CHECK(e->query(Step{"query"}));
    }
    CHECK(call_count(Entry::cuEventDestroy) == event_destroys + 1);

    const long long frees = call_count(Entry::cuMemFreeHost);
    const long long unregisters = call_count(Entry::cuMemHostUnregister);
    std::vector<unsigned char> mine(G);
    {
        PinnedHostRef p = PinnedHost::allocate(G);
        PinnedHostRef r = PinnedHost::register_memory(mine.data(), mine.size());
        CHECK(!p->registered() && r->registered() && r->address() == mine.data());
    }
    CHECK(call_count(Entry::cuMemFreeHost) == frees + 1);
    CHECK(call_count(Entry::cuMemHostUnregister) == unregisters + 1);

    // A4 for the async copies: checked for the stream's device, before the driver.
    StreamRef on_zero = Stream::create(0, CU_STREAM_NON_BLOCKING, 0);
    StreamRef on_one = Stream::create(1, CU_STREAM_NON_BLOCKING, 0);
    RangeRef read_only = Range::allocate(make_spec(0, {self_access(0, CU_MEM_ACCESS_FLAGS_PROT_READ)}), G);
    RangeRef zero_only = Range::allocate(rw_spec(0), G);
    std::vector<unsigned char> host(G, 3);
    expect_refused([&] { copy_host_to_range_async(*read_only, 0, host.data(), 16, *on_zero); }, Entry::cuMemcpyHtoDAsync,
                   {"device 0 has READ access", "needs READ_WRITE"}, __LINE__);
    expect_refused([&] { fill_range_async(*zero_only, 0, 16, 1, *on_one); }, Entry::cuMemsetD8Async,
                   {"device 1 has no access to the destination"}, __LINE__);
    expect_refused([&] { copy_range_to_host_async(*zero_only, 0, host.data(), 16, *on_one); }, Entry::cuMemcpyDtoHAsync,
                   {"device 1 has no access to the source"}, __LINE__);
    fill_range_async(*zero_only, 0, G, 9, *on_zero);
    copy_range_to_host_async(*zero_only, 0, host.data(), G, *on_zero);
    on_zero->synchronize(Step{"sync"});
    CHECK(host[0] == 9 && host[G - 1] == 9);

    // A host function: the stream waits until the dispatcher (here a plain thread) says done.
    launch_host_function(*on_zero, 42, Step{"launch"});
    const long long token = next_host_function(10000);
    CHECK(token == 42);
    CHECK(host_functions_pending() == 1);
    CHECK(!on_zero->query(Step{"query"}));  // held by the trampoline
    host_function_done(7);                   // an unknown token is ignored
    CHECK(!on_zero->query(Step{"query"}));
    host_function_done(token);
    on_zero->synchronize(Step{"sync"});
    CHECK(host_functions_pending() == 0);
    CHECK(next_host_function(0) == 0);
}

// RecordAfter (transfer.hpp): an async op and its stream-use records under one context scope
// (one cuCtxGetCurrent); `queued` says whether the op was queued, also when a record fails
// after it (the caller must then wait for the stream); an event of another device is refused
// before any driver call; a zero-length op records without queueing.
CUresult g_record_fails_with = CUDA_SUCCESS;
CUresult CUDAAPI spy_record(CUevent e, CUstream s) {
    return g_record_fails_with != CUDA_SUCCESS ? g_record_fails_with : g_real.cuEventRecord(e, s);
}

void test_records_after_async() {
    StreamRef s = Stream::create(0, CU_STREAM_NON_BLOCKING, 0);
    EventRef e1 = Event::create(0, CU_EVENT_DISABLE_TIMING);
    EventRef e2 = Event::create(0, CU_EVENT_DISABLE_TIMING);
    EventRef other = Event::create(1, CU_EVENT_DISABLE_TIMING);
    RangeRef r = Range::allocate(rw_spec(0), G);
    std::vector<unsigned char> host(G, 0);
    bool queued = false;
    s->synchronize(Step{"sync"});
    const long long ctx = call_count(Entry::cuCtxGetCurrent), rec = call_count(Entry::cuEventRecord),
                    fills = call_count(Entry::cuMemsetD8Async);
    fill_range_async(*r, 0, G, 4, *s, RecordAfter{e1.get(), e2.get(), &queued});
    CHECK(queued);
    CHECK(call_count(Entry::cuMemsetD8Async) == fills + 1);
    CHECK(call_count(Entry::cuEventRecord) == rec + 2);
    CHECK(call_count(Entry::cuCtxGetCurrent) == ctx + 1);  // one context scope for the op and its records
    e2->synchronize(Step{"sync"});
    copy_range_to_host_async(*r, 0, host.data(), G, *s, RecordAfter{e1.get(), nullptr, &queued});
    s->synchronize(Step{"sync"});
    CHECK(host[0] == 4 && host[G - 1] == 4);

    queued = true;
    const long long fills2 = call_count(Entry::cuMemsetD8Async);
    expect_refused([&] { fill_range_async(*r, 0, 16, 1, *s, RecordAfter{other.get(), nullptr, &queued}); },
                   Entry::cuMemsetD8Async, {"an event of device 1 cannot be recorded on a stream of device 0"}, __LINE__);
    CHECK(call_count(Entry::cuMemsetD8Async) == fills2);

    queued = true;
    const long long rec2 = call_count(Entry::cuEventRecord);
    copy_host_to_range_async(*r, 0, host.data(), 0, *s, RecordAfter{e1.get(), nullptr, &queued});
    CHECK(!queued);  // nothing to queue
    CHECK(call_count(Entry::cuEventRecord) == rec2 + 1);

    DriverTable& t = const_cast<DriverTable&>(driver());
    t.cuEventRecord = spy_record;
    g_record_fails_with = CUDA_ERROR_LAUNCH_FAILED;
    queued = false;
    bool threw = false;
    try {
        fill_range_async(*r, 0, G, 6, *s, RecordAfter{e1.get(), nullptr, &queued});
    } catch (const DriverError& err) {
        threw = err.code() == CUDA_ERROR_LAUNCH_FAILED && err.call() == "cuEventRecord";
    }
    g_record_fails_with = CUDA_SUCCESS;
    t.cuEventRecord = g_real.cuEventRecord;
    CHECK(threw);
    CHECK(queued);  // the fill is in the stream, unrecorded: the caller waits for the stream
    s->synchronize(Step{"sync"});
    copy_range_to_host(*r, 0, host.data(), G);
    CHECK(host[0] == 6 && host[G - 1] == 6);
}

}  // namespace

void on_timeout(int) {
    static const char msg[] = "FAIL: timed out\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(3);
}

// ---- A9 ---------------------------------------------------------------------------------

// load_cuda_driver over a stand-in libcuda whose cuDriverGetVersion fails (fake_cuda.cpp,
// built by run-host-driver-test.sh, path in CUVMM_FAKE_CUDA): a refusal naming the call and
// the CUresult, not a driver of version 0.
void test_driver_version_checked() {
    const char* fake = std::getenv("CUVMM_FAKE_CUDA");
    if (fake == nullptr || *fake == '\0') {
        std::printf("skipped test_driver_version_checked: CUVMM_FAKE_CUDA not set\n");
        return;
    }
    // Held open here too, so the stand-in's counters outlive the loader's dlclose.
    void* lib = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != nullptr);
    DriverTable t;
    std::string reason;
    CHECK(!load_cuda_driver(t, fake, reason));
    CHECK(contains(reason, "cuDriverGetVersion") && contains(reason, "CUDA_ERROR_OPERATING_SYSTEM"));
    if (!contains(reason, "cuDriverGetVersion")) std::printf("  reason: %s\n", reason.c_str());
    // Every entry point was asked for the legacy default stream's version (audit A.1 #4).
    if (lib != nullptr) {
        auto flags = reinterpret_cast<void (*)(long*, long*)>(dlsym(lib, "fake_cuda_lookup_flags"));
        CHECK(flags != nullptr);
        long lookups = 0, legacy = 0;
        if (flags != nullptr) flags(&lookups, &legacy);
        CHECK(lookups > 0 && legacy == lookups);
        if (legacy != lookups) std::printf("  lookups %ld, with LEGACY_STREAM %ld\n", lookups, legacy);
        dlclose(lib);
    }
}

// ---- I1 ---------------------------------------------------------------------------------

void test_allocation_ids_and_release_notices() {
    auto posix = std::make_shared<ChunkSpec>(*rw_spec(0));
    posix->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    RangeRef a = Range::allocate(posix, G);
    RangeRef b = Range::allocate(posix, G);
    const uint64_t id_a = a->mappings()[0]->allocation()->id();
    const uint64_t id_b = b->mappings()[0]->allocation()->id();
    CHECK(id_a != 0 && id_b != 0 && id_a != id_b);
    GrowOutcome outcome{};
    RangeRef grown = a->grow(posix, 3 * G, outcome);
    CHECK(grown->mappings().size() == 2 && grown->mappings()[0]->allocation()->id() == id_a);
    const uint64_t id_new = grown->mappings()[1]->allocation()->id();
    CHECK(id_new != id_a && id_new != id_b && id_new != 0);

    // Partial export: one call per chunk named; refusals before any call.
    reset_call_counts();
    std::vector<int> fds = export_chunk_fds(*grown, {1});
    CHECK(fds.size() == 1 && call_count(Entry::cuMemExportToShareableHandle) == 1);
    for (int fd : fds) close(fd);
    bool refused = false;
    try {
        export_chunk_fds(*grown, {0, 0});
    } catch (const DriverError& e) {
        refused = contains(e.what(), "named twice");
    }
    CHECK(refused);
    refused = false;
    try {
        export_chunk_fds(*grown, {2});
    } catch (const DriverError& e) {
        refused = contains(e.what(), "chunk index 2");
    }
    CHECK(refused);
    CHECK(call_count(Entry::cuMemExportToShareableHandle) == 1);
    CHECK(export_chunk_fds(*grown, {}).empty());

    // Off (the default): nothing queued.
    uint64_t out[8] = {};
    b.reset();
    CHECK(take_released_allocations(out, 8, 0) == 0);
    // On: queued after the release, in release order; a grow's alias keeps the first chunk.
    set_release_notices(true);
    a.reset();
    CHECK(take_released_allocations(out, 8, 0) == 0);  // `grown` still maps chunk a
    grown.reset();
    const uint64_t seq_before = release_notice_sequence();
    uint64_t seqs[8] = {};
    size_t n = take_released_allocations(out, 8, 1000, seqs);
    CHECK(n == 2 && ((out[0] == id_a && out[1] == id_new) || (out[0] == id_new && out[1] == id_a)));
    // Sequence numbers: increasing in queue order, the last one is what release_notice_sequence read.
    CHECK(n == 2 && seqs[0] + 1 == seqs[1] && seqs[1] == seq_before);
    // Off again drops what is queued and wakes a waiting taker at once.
    RangeRef c = Range::allocate(posix, G);
    c.reset();
    set_release_notices(false);
    CHECK(take_released_allocations(out, 8, 0) == 0);
    set_release_notices(true);
    std::thread taker([&] { take_released_allocations(out, 8, 60000); });
    set_release_notices(false);
    taker.join();  // within the test's alarm: turning notices off ends the wait
    CHECK(release_notices_dropped() == 0);
}

// C1: no SIGBUS reaches the process (it would end this test): the kernel reports the page.
void test_checked_copies_of_a_truncated_mapping() {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t size = 8 * page;
    char path[] = "/tmp/cuvmm-checked-copy-XXXXXX";
    int fd = ::mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    ::unlink(path);
    CHECK(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED) {
        ::close(fd);
        return;
    }
    std::memset(m, 7, size);
    std::vector<char> buf(size, 0);
    CHECK(copy_from_mapping(buf.data(), m, size) == static_cast<long long>(size));
    CHECK(buf[0] == 7 && buf[size - 1] == 7);
    std::memset(buf.data(), 9, size);
    CHECK(copy_to_mapping(m, buf.data(), size) == static_cast<long long>(size));
    CHECK(static_cast<char*>(m)[size - 1] == 9);

    CHECK(::ftruncate(fd, static_cast<off_t>(3 * page)) == 0);  // pages 3..7 are gone
    CHECK(copy_from_mapping(buf.data(), m, size) == static_cast<long long>(3 * page));
    CHECK(copy_to_mapping(m, buf.data(), size) == static_cast<long long>(3 * page));
    CHECK(copy_from_mapping(buf.data(), static_cast<char*>(m) + 4 * page, page) == 0);  // first page gone: 0
    CHECK(copy_to_mapping(static_cast<char*>(m) + 4 * page, buf.data(), page) == 0);
    CHECK(copy_from_mapping(buf.data(), m, 0) == 0);
    ::munmap(m, size);
    ::close(fd);
}

int main() {
    std::signal(SIGALRM, on_timeout);
    alarm(120);
    DriverSelection sel;
    sel.mode = DriverMode::host;
    sel.host.device_count = 2;
    select_driver(sel);
    G = sel.host.granularity;
    install_spy();

    test_checked_copies_of_a_truncated_mapping();
    test_hint_fallback();
    test_explicit_alignment();
    test_teardown_context();
    test_copies_checked_before_the_driver();
    test_driver_version_checked();
    test_stream_boxes();
    test_records_after_async();
    test_allocation_ids_and_release_notices();

    ObjectCounts c = object_counts();
    CHECK(c.allocations == 0 && c.reservations == 0 && c.mappings == 0 && c.ranges == 0);
    HostLiveCounts h = host_live_counts();
    CHECK(h.allocations == 0 && h.reservations == 0 && h.mappings == 0 && h.memfds == 0);
    CHECK(cleanup_failure_count() == 0);
    std::printf("vmm_test: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
