// The second half of host_stream_test: destroy with queued work, the sticky fault, pinned
// memory rules, 8 threads with their own streams, and every misuse code of the stream,
// event, host function, async copy and pinned entry points.
#include "host_stream_test_util.hpp"

#include "host/stream_queue.hpp"

#include "fd_limit_test_util.hpp"

#include <sys/mman.h>

#include <new>

namespace {

// cuStreamDestroy / cuEventDestroy with queued work return at once; the work still runs.
void test_destroy_with_queued_work() {
    Dev d(0);
    Pinned out(16);
    CUstream s;
    CUevent done, pending;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(T.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    OK(T.cuEventCreate(&pending, 0));
    Gate g;
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
    OK(T.cuMemsetD8Async(d.p, 3, 16, s));
    OK(T.cuMemcpyDtoHAsync(out.p, d.p, 16, s));
    OK(T.cuEventRecord(pending, s));
    OK(T.cuEventRecord(done, s));
    OK(T.cuEventDestroy(pending));  // record still pending: returns at once (the gate is shut)
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventQuery(pending));
    OK(T.cuStreamDestroy(s));  // queued work: returns at once, handle invalid at once
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamQuery(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamSynchronize(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuLaunchHostFunc(s, Counter::fn, nullptr));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventQuery(done));
    CHECK(out.p[0] == 0);
    g.open();
    bool drained = false;  // the destroyed stream drains its queue (bounded poll: a lost queue fails, not hangs)
    for (int i = 0; i < 10000 && !drained; ++i) {
        drained = T.cuEventQuery(done) == CUDA_SUCCESS;
        if (!drained) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(drained);
    CHECK(out.p[0] == 3 && out.p[15] == 3);
    OK(T.cuEventDestroy(done));
}

// An op whose memory was unmapped before it ran faults the device for good.
void test_sticky_fault() {
    in_child("sticky ILLEGAL_ADDRESS", [] {
        Dev d(0);
        Dev other(1);
        CUstream s, s1;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        OK(T.cuCtxSetCurrent(g_ctx[1]));
        OK(T.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        Gate g;
        Counter after;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuMemsetD8Async(d.p, 1, 64, s));  // valid now
        OK(T.cuLaunchHostFunc(s, Counter::fn, &after));
        d.unmap();  // does not wait for the queued memset
        g.open();
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuStreamSynchronize(s));
        CHECK(after.n.load() == 0);  // host functions are not called after the fault
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuStreamQuery(s));
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuCtxSynchronize());
        CUstream t;
        CUevent e;
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuStreamCreate(&t, 0));
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuEventCreate(&e, 0));
        unsigned char b = 0;
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuMemcpyHtoD(other.p, &b, 1));
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuMemsetD8Async(other.p, 1, 1, nullptr));
        // Device 1 is untouched.
        OK(T.cuCtxSetCurrent(g_ctx[1]));
        OK(T.cuMemsetD8Async(other.p, 2, 8, s1));
        OK(T.cuStreamSynchronize(s1));
        OK(T.cuMemcpyDtoH(&b, other.p + 7, 1));
        CHECK(b == 2);
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        // cuStreamDestroy reports the sticky error (cuda.h: errors of earlier async work) and
        // destroys the stream all the same.
        EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuStreamDestroy(s));
        EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamDestroy(s));
        OK(T.cuStreamDestroy(s1));  // device 1 is fine
        std::fflush(stdout);
        _exit(g_failed.load());  // device 0 is dead: skip the destructors' driver calls
    });
}

// cuMemFreeHost of memory a queued copy targets waits for the copy (never a write into
// unmapped memory, which would crash the child).
void test_free_pinned_waits() {
    in_child("cuMemFreeHost waits for queued copies", [] {
        Dev d(0);
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        void* v = nullptr;
        OK(T.cuMemHostAlloc(&v, 1 << 20, 0));
        Gate g;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuMemcpyDtoHAsync(v, d.p, 1 << 16, s));
        std::atomic<bool> freed{false};
        std::atomic<pid_t> tid{0};
        std::thread t([&] {
            tid = this_tid();
            OK(T.cuMemFreeHost(v));
            freed = true;
        });
        while (tid.load() == 0) std::this_thread::yield();
        CHECK(!blocked_or_done(tid.load(), freed));  // a free that does not wait returns now
        g.open();
        t.join();
        OK(T.cuStreamSynchronize(s));
        OK(T.cuStreamDestroy(s));
    });
}

// fork() while a worker holds a stream (a gate) with work queued behind it: the child has no
// worker, so it forgets the parent's work (nothing of it runs there) and its sync, free and
// new work return. alarm() bounds a hang (the child is killed: the check fails).
void test_fork_forgets_parent_work() {
    if (const char* e = std::getenv("CUVMM_TEST_NO_FORK"); e && *e == '1') return;
    Dev d(0);
    Pinned pin(4096);
    OK(T.cuMemsetD8(d.p, 0, 64));
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    Gate g;
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
    OK(T.cuMemsetD8Async(d.p, 1, 64, s));
    OK(T.cuMemcpyDtoHAsync(pin.p, d.p, 64, s));  // a pending use of the pinned range
    while (!g.entered.load()) std::this_thread::yield();
    in_child("fork: child forgets the parent's queued work", [&] {
        alarm(10);
        OK(T.cuStreamSynchronize(s));
        OK(T.cuCtxSynchronize());
        OK(T.cuStreamQuery(s));
        unsigned char b = 9;
        OK(T.cuMemcpyDtoH(&b, d.p, 1));
        CHECK(b == 0);  // the parent's memset did not run in the child
        Counter c;
        OK(T.cuLaunchHostFunc(s, Counter::fn, &c));  // a new worker, in the child
        OK(T.cuStreamSynchronize(s));
        CHECK(c.n.load() == 1);
        void* v = nullptr;
        OK(T.cuMemHostAlloc(&v, 4096, 0));
        OK(T.cuMemFreeHost(v));
        OK(T.cuMemFreeHost(pin.p));  // the parent's pending copy is not the child's
        std::fflush(stdout);
        _exit(g_failed.load());  // the parent's objects are the parent's to clean up
    });
    g.open();
    OK(T.cuStreamSynchronize(s));
    unsigned char b = 0;
    OK(T.cuMemcpyDtoH(&b, d.p, 1));
    CHECK(b == 1 && pin.p[0] == 1);  // the parent's work ran in the parent
    OK(T.cuStreamDestroy(s));
}

// fork() while a worker runs a long memset (holding the registry lock shared): the child's
// cuMemUnmap (exclusive) must not wait for a holder that does not exist in the child.
void test_fork_during_copy() {
    if (const char* e = std::getenv("CUVMM_TEST_NO_FORK"); e && *e == '1') return;
    size_t big_size = size_t(32) << 20;
    Dev mapped(0, big_size);  // unmapped, released and freed at the end, after the stream
    const CUdeviceptr big = mapped.p;
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 4; ++i) {
        Dev small(0);
        Counter c;
        OK(T.cuLaunchHostFunc(s, Counter::fn, &c));
        for (int k = 0; k < 4; ++k) OK(T.cuMemsetD8Async(big, static_cast<unsigned char>(k), big_size, s));
        while (c.n.load() == 0) std::this_thread::yield();  // the memsets start now: the fork lands in one
        in_child("fork during a queued memset: the child's unmap returns", [&] {
            alarm(10);
            small.unmap();
            std::fflush(stdout);
            _exit(g_failed.load());
        });
        OK(T.cuStreamSynchronize(s));
    }
    OK(T.cuStreamDestroy(s));
}

// An exception out of queued work does not end the process: it becomes the device's sticky
// error (bad_alloc: OUT_OF_MEMORY; anything else: LAUNCH_FAILED), later work is skipped.
void test_throwing_host_function() {
    in_child("a throwing host function faults its device", [] {
        alarm(10);
        CUstream s0, s1;
        OK(T.cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
        OK(T.cuCtxSetCurrent(g_ctx[1]));
        OK(T.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
        Counter after;
        Gate g1, g0;  // everything is queued before the throw (a launch after it is refused)
        OK(T.cuLaunchHostFunc(s1, Gate::fn, &g1));
        OK(T.cuLaunchHostFunc(s1, [](void*) { throw std::bad_alloc(); }, nullptr));
        OK(T.cuLaunchHostFunc(s1, Counter::fn, &after));
        g1.open();
        EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuStreamSynchronize(s1));
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        OK(T.cuLaunchHostFunc(s0, Gate::fn, &g0));
        OK(T.cuLaunchHostFunc(s0, [](void*) { throw 42; }, nullptr));
        OK(T.cuLaunchHostFunc(s0, Counter::fn, &after));
        g0.open();
        EXPECT_RC(CUDA_ERROR_LAUNCH_FAILED, T.cuStreamSynchronize(s0));
        EXPECT_RC(CUDA_ERROR_LAUNCH_FAILED, T.cuCtxSynchronize());
        CHECK(after.n.load() == 0);
        std::fflush(stdout);
        _exit(g_failed.load());  // both devices are dead
    });
}

// Device memory located in host RAM (cuMemCreate HOST_NUMA, CPU access granted) is
// page-locked on a GPU: copies to and from it are fully asynchronous (no staging, no wait).
void test_host_located_vmm_is_pinned() {
    size_t g = size_t(64) << 10;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    OK(T.cuMemCreate(&h, g, &prop, 0));
    OK(T.cuMemAddressReserve(&va, g, 0, 0, 0));
    OK(T.cuMemMap(va, g, 0, h, 0));
    CUmemAccessDesc acc[2] = {};
    acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc[0].location.id = 0;
    acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    acc[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    acc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(T.cuMemSetAccess(va, g, acc, 2));
    auto* hp = reinterpret_cast<unsigned char*>(va);
    Dev d(0);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    std::memset(hp, 'A', 4096);
    Gate g1;
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g1));
    std::thread t1;
    CHECK(returns_while_blocked(t1, [&] { OK(T.cuMemcpyHtoDAsync(d.p, hp, 4096, s)); }));  // no wait for the stream
    std::memset(hp, 'B', 4096);  // not staged: the copy reads the source when it runs
    g1.open();
    t1.join();
    OK(T.cuStreamSynchronize(s));
    unsigned char got = 0;
    OK(T.cuMemcpyDtoH(&got, d.p + 4095, 1));
    CHECK(got == 'B');
    OK(T.cuMemsetD8(d.p, 'Z', 4096));
    Gate g2;
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g2));
    std::thread t2;
    CHECK(returns_while_blocked(t2, [&] { OK(T.cuMemcpyDtoHAsync(hp, d.p, 4096, s)); }));  // queued, not waited for
    CHECK(hp[0] == 'B');
    g2.open();
    t2.join();
    OK(T.cuStreamSynchronize(s));
    CHECK(hp[0] == 'Z' && hp[4095] == 'Z');
    OK(T.cuStreamDestroy(s));
    OK(T.cuMemUnmap(va, g));
    OK(T.cuMemRelease(h));
    OK(T.cuMemAddressFree(va, g));
}

// cuMemHostRegister refuses memory it could not pin (unmapped, PROT_NONE, read-only: a later
// copy into it would crash the worker) and READ_ONLY, which the host devices do not support.
void test_register_checks_memory() {
    int ro = -1;
    OK(T.cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 0));
    CHECK(ro == 0);
    std::vector<char> mem(8192);
    EXPECT_RC(CUDA_ERROR_NOT_SUPPORTED, T.cuMemHostRegister(mem.data(), 4096, CU_MEMHOSTREGISTER_READ_ONLY));
    long page = sysconf(_SC_PAGESIZE);
    void* none = mmap(nullptr, 4 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(none != MAP_FAILED);
    auto* c = static_cast<char*>(none);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(c, 4 * page, 0));  // PROT_NONE
    CHECK(mprotect(c, page, PROT_READ) == 0);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(c, page, 0));  // read-only
    CHECK(mprotect(c + page, 2 * page, PROT_READ | PROT_WRITE) == 0);
    OK(T.cuMemHostRegister(c + page + 16, page, 0));  // read-write, not page-aligned
    OK(T.cuMemHostUnregister(c + page + 16));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(c + page, 3 * page, 0));  // runs into PROT_NONE
    CHECK(munmap(c + 2 * page, page) == 0);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(c + page, 2 * page, 0));  // runs into a hole
    munmap(c, 4 * page);
    // At the fd limit /proc/self/maps cannot be opened: OPERATING_SYSTEM (an OS call failed),
    // not INVALID_VALUE, which blamed the caller's memory (an independent probe). The limit is
    // lowered to the lowest free descriptor, so every new fd fails with EMFILE.
    cuvmm_test::AtFdLimit limit;
    CHECK(limit.lowered());
    CUresult at_limit = T.cuMemHostRegister(mem.data(), 4096, 0);
    limit.restore();
    EXPECT_RC(CUDA_ERROR_OPERATING_SYSTEM, at_limit);
    OK(T.cuMemHostRegister(mem.data(), 4096, 0));  // below the limit again: registered
    OK(T.cuMemHostUnregister(mem.data()));
}

// The last cuDevicePrimaryCtxRelease resets the context: the streams and events created in
// it are no longer handles; work queued on them still drains.
void test_context_reset_ends_streams() {
    OK(T.cuCtxSetCurrent(g_ctx[1]));
    CUstream s;
    CUevent e;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(T.cuEventCreate(&e, 0));
    Gate g;
    Counter c;
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
    OK(T.cuLaunchHostFunc(s, Counter::fn, &c));
    OK(T.cuCtxSetCurrent(nullptr));
    OK(T.cuDevicePrimaryCtxRelease(1));  // setup()'s only retain: the context is reset
    Counter late;
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuLaunchHostFunc(s, Counter::fn, &late));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamQuery(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventRecord(e, s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventQuery(e));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventSynchronize(e));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventDestroy(e));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamDestroy(s));
    g.open();
    for (int i = 0; i < 10000 && c.n.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(c.n.load() == 1);  // the queued work drained
    CHECK(late.n.load() == 0);
    OK(T.cuDevicePrimaryCtxRetain(&g_ctx[1], 1));
    OK(T.cuCtxSetCurrent(g_ctx[0]));
}

// A thread's per-thread default streams leave the device's stream list when the thread
// ends: at once when they never had a worker, when the worker has drained otherwise.
void test_per_thread_streams_of_dead_threads() {
    auto& q = cuvmm::host::queues();
    auto count = [&] {
        std::lock_guard<std::mutex> l(q.mutex);
        return q.all[0].size();
    };
    // Streams an earlier test destroyed leave the list only when their workers have drained
    // (and an earlier test's dead threads' streams likewise): wait for every destroyed stream
    // to leave first (bounded), so `before` counts only live streams, which nothing but this
    // test changes from here on. Taken while one was still draining, `before` was one too high
    // and the check below failed under load.
    auto settled = [&] {
        std::lock_guard<std::mutex> l(q.mutex);
        for (auto& s : q.all[0]) {
            if (s->destroyed) return false;
        }
        return true;
    };
    for (int i = 0; i < 10000 && !settled(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(settled());
    size_t before = count();
    for (int i = 0; i < 20; ++i) {
        std::thread([] {
            OK(T.cuCtxSetCurrent(g_ctx[0]));
            OK(T.cuStreamSynchronize(CU_STREAM_PER_THREAD));  // made, never given work
        }).join();
    }
    CHECK(count() == before);
    Counter c;
    for (int i = 0; i < 20; ++i) {
        std::thread([&] {
            OK(T.cuCtxSetCurrent(g_ctx[0]));
            OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Counter::fn, &c));  // starts a worker
        }).join();
    }
    bool gone = false;  // the workers drain and leave (bounded poll)
    for (int i = 0; i < 10000 && !gone; ++i) {
        gone = count() == before;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(gone);
    CHECK(c.n.load() == 20);
}

// A large pageable HtoD copy is staged in bounded pieces (one queued op each, at most two
// staged ahead), and the pieces land at the right offsets.
void test_pageable_htod_in_pieces() {
    const size_t n = (size_t(8) << 20) + 12345;
    size_t big_size = size_t(9) << 20;
    Dev mapped(0, big_size);  // unmapped, released and freed at the end, after the stream
    const CUdeviceptr big = mapped.p;
    std::vector<unsigned char> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + (i >> 20));
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    auto& q = cuvmm::host::queues();
    auto submitted = [&] {
        std::lock_guard<std::mutex> l(q.mutex);
        return q.streams.at(reinterpret_cast<uintptr_t>(s))->submitted;
    };
    uint64_t before = submitted();
    OK(T.cuMemcpyHtoDAsync(big, src.data(), n, s));
    std::memset(src.data(), 0, n);  // staged: the device must not see this
    CHECK(submitted() - before == 9);  // 8 whole MiB pieces and a tail
    OK(T.cuStreamSynchronize(s));
    std::vector<unsigned char> back(n);
    OK(T.cuMemcpyDtoH(back.data(), big, n));
    size_t good = 0;
    for (size_t i = 0; i < n; ++i) good += back[i] == static_cast<unsigned char>(i * 7 + (i >> 20));
    CHECK(good == n);
    OK(T.cuStreamDestroy(s));
}

void test_pinned_rules() {
    void* p = nullptr;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostAlloc(nullptr, 4096, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostAlloc(&p, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostAlloc(&p, 4096, 0x10));
    OK(T.cuMemHostAlloc(&p, 4096,
                        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED));
    CHECK(p != nullptr);
    EXPECT_RC(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, T.cuMemHostUnregister(p));  // allocated, not registered
    EXPECT_RC(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, T.cuMemHostRegister(p, 16, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemFreeHost(static_cast<char*>(p) + 1));
    OK(T.cuMemFreeHost(p));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemFreeHost(p));
    std::vector<char> mem(1 << 16);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemFreeHost(mem.data()));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(nullptr, 16, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(mem.data(), 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(mem.data(), 16, 0x10));
    OK(T.cuMemHostRegister(mem.data() + 1024, 1024, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    EXPECT_RC(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, T.cuMemHostRegister(mem.data(), 1025, 0));
    EXPECT_RC(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, T.cuMemHostRegister(mem.data() + 2047, 10, 0));
    OK(T.cuMemHostRegister(mem.data() + 2048, 10, 0));  // adjacent is fine
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemFreeHost(mem.data() + 1024));  // registered, not allocated
    EXPECT_RC(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, T.cuMemHostUnregister(mem.data() + 1025));
    OK(T.cuMemHostUnregister(mem.data() + 1024));
    OK(T.cuMemHostUnregister(mem.data() + 2048));
    EXPECT_RC(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, T.cuMemHostUnregister(mem.data() + 1024));
    Dev d(0);
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemHostRegister(reinterpret_cast<void*>(d.p), 16, 0));  // device VA
    std::thread([&] {  // no current context
        void* q = nullptr;
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuMemHostAlloc(&q, 4096, 0));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuMemHostRegister(mem.data(), 16, 0));
    }).join();
}

// 8 threads, each with its own stream and slice, fill / copy out / count in a loop.
void test_eight_threads() {
    Dev d(0);
    Pinned out(8 * 256);
    Counter c;
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            OK(T.cuCtxSetCurrent(g_ctx[0]));
            CUstream s;
            OK(T.cuStreamCreate(&s, t % 2 ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT));
            CUdeviceptr mine = d.p + static_cast<CUdeviceptr>(t) * 256;
            for (int i = 1; i <= 40; ++i) {
                OK(T.cuMemsetD8Async(mine, static_cast<unsigned char>(i), 256, s));
                OK(T.cuMemcpyDtoHAsync(out.p + t * 256, mine, 256, s));
                OK(T.cuLaunchHostFunc(s, Counter::fn, &c));
                if (i % 10 == 0) {
                    OK(T.cuStreamSynchronize(s));
                    if (out.p[t * 256] != i || out.p[t * 256 + 255] != i) ++bad;
                }
            }
            OK(T.cuStreamDestroy(s));
        });
    }
    for (auto& th : threads) th.join();
    CHECK(bad.load() == 0);
    CHECK(c.n.load() == 8 * 40);
}

void test_misuse_codes() {
    CUstream s = nullptr;
    CUevent e = nullptr, e1 = nullptr;
    auto junk_s = reinterpret_cast<CUstream>(uintptr_t(0x4242));
    auto junk_e = reinterpret_cast<CUevent>(uintptr_t(0x4343));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuStreamCreateWithPriority(nullptr, 0, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuStreamCreateWithPriority(&s, 7, 0));
    OK(T.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100));  // clamped, not refused
    OK(T.cuStreamDestroy(s));
    OK(T.cuStreamCreateWithPriority(&s, 0, 100));
    int least = 9, greatest = 9;
    OK(T.cuCtxGetStreamPriorityRange(&least, &greatest));
    CHECK(least == 0 && greatest == -5);
    OK(T.cuCtxGetStreamPriorityRange(nullptr, nullptr));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamQuery(junk_s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamDestroy(CU_STREAM_LEGACY));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamDestroy(CU_STREAM_PER_THREAD));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuEventCreate(nullptr, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuEventCreate(&e, 0x10));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuEventCreate(&e, CU_EVENT_INTERPROCESS));
    OK(T.cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamWaitEvent(s, junk_e, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamWaitEvent(junk_s, e, 0));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuStreamWaitEvent(s, e, CU_EVENT_WAIT_EXTERNAL));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventRecord(junk_e, s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventRecord(e, junk_s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventQuery(junk_e));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventSynchronize(junk_e));
    OK(T.cuEventSynchronize(e));  // never recorded
    OK(T.cuCtxSetCurrent(g_ctx[1]));
    OK(T.cuEventCreate(&e1, 0));
    OK(T.cuCtxSetCurrent(g_ctx[0]));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventRecord(e1, s));  // event of another context
    OK(T.cuEventRecord(e, s));
    OK(T.cuEventDestroy(e));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventDestroy(e));
    OK(T.cuEventDestroy(e1));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuLaunchHostFunc(s, nullptr, nullptr));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuLaunchHostFunc(junk_s, Counter::fn, nullptr));
    // Async copies: the synchronous copies' rules, plus the stream handle.
    Dev d(0);
    unsigned char buf[64] = {};
    OK(T.cuMemcpyHtoDAsync(d.p, buf, 0, s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuMemcpyHtoDAsync(d.p, buf, 1, junk_s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoDAsync(d.p + d.size - 8, buf, 64, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoDAsync(d.p, nullptr, 64, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoHAsync(buf, d.p + d.size, 1, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoHAsync(reinterpret_cast<void*>(d.p), d.p, 1, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoDAsync(d.p, d.p + d.size, 1, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemsetD8Async(d.p - 1, 0, 1, s));
    Dev other(1);  // device 0 has no access to it
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemsetD8Async(other.p, 0, 1, s));
    std::thread([&] {  // no current context
        CUstream t = nullptr;
        CUevent te = nullptr;
        int l = 0;
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuStreamCreateWithPriority(&t, 0, 0));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuEventCreate(&te, 0));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuCtxGetStreamPriorityRange(&l, nullptr));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuStreamQuery(nullptr));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuMemsetD8Async(d.p, 0, 1, s));
        EXPECT_RC(CUDA_ERROR_INVALID_CONTEXT, T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Counter::fn, nullptr));
    }).join();
    OK(T.cuStreamSynchronize(s));
    OK(T.cuStreamDestroy(s));
}

// The test seam host_fail_next_event_record: only the armed stream's next record fails, once,
// leaving the event's previous record in place; arming with CUDA_SUCCESS disarms.
void test_injected_record_failure() {
    Dev d(0);
    CUstream a, b;
    CUevent e;
    OK(T.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    OK(T.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    OK(T.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    Gate g;
    OK(T.cuLaunchHostFunc(b, Gate::fn, &g));
    host_fail_next_event_record(a, CUDA_ERROR_OUT_OF_MEMORY);
    OK(T.cuEventRecord(e, b));  // another stream: not consumed
    EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuEventRecord(e, a));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventQuery(e));  // the record on b (gated) stays the event's
    OK(T.cuEventRecord(e, a));                           // once only
    OK(T.cuEventQuery(e));
    host_fail_next_event_record(a, CUDA_ERROR_OUT_OF_MEMORY);
    host_fail_next_event_record(a, CUDA_SUCCESS);  // disarmed
    OK(T.cuEventRecord(e, a));
    g.open();
    OK(T.cuStreamSynchronize(b));
    OK(T.cuEventDestroy(e));
    OK(T.cuStreamDestroy(a));
    OK(T.cuStreamDestroy(b));
}

}  // namespace

void run_more_tests() {
    test_destroy_with_queued_work();
    test_sticky_fault();
    test_free_pinned_waits();
    test_fork_forgets_parent_work();
    test_fork_during_copy();
    test_throwing_host_function();
    test_host_located_vmm_is_pinned();
    test_register_checks_memory();
    test_context_reset_ends_streams();
    test_per_thread_streams_of_dead_threads();
    test_pageable_htod_in_pieces();
    test_pinned_rules();
    test_eight_threads();
    test_misuse_codes();
    test_injected_record_failure();
}
