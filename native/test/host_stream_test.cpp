// Tests of the host driver's streams (native/host/stream_queue.*, streams.cpp, events.cpp,
// pinned.cpp, async_copies.cpp): ordering within and across streams, the legacy / blocking /
// non-blocking / per-thread rules, events, host functions, pageable vs pinned copies,
// destroy with queued work, the sticky fault (in a fork()ed child) and every misuse code.
// No wall-clock assertions and no sleeps as synchronization: a host function blocked on a
// Gate holds a stream, so "not yet" is observed with cuStreamQuery / cuEventQuery, and a call
// that must wait is seen asleep in the kernel (blocked_or_done) before the gate opens.
// Plain main(): one line per failed check, last "N passed, M failed"; non-zero on failure.
// CUVMM_TEST_NO_FORK=1 skips the fork()ed tests (the TSan build).
#include "host_stream_test_util.hpp"

namespace {

// FIFO within a stream, with the delay on: memset i then copy out to slot i, 24 times.
void test_fifo_order() {
    Dev d(0);
    Pinned out(64);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    host_set_stream_delay_micros(300);
    Gate g;  // holds the stream: "not done yet" is certain, not a matter of the delay
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
    for (int i = 1; i <= 24; ++i) {
        OK(T.cuMemsetD8Async(d.p, static_cast<unsigned char>(i), 16, s));
        OK(T.cuMemcpyDtoHAsync(out.p + i, d.p + 8, 1, s));
    }
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
    g.open();
    OK(T.cuStreamSynchronize(s));
    host_set_stream_delay_micros(0);
    int in_order = 0;
    for (int i = 1; i <= 24; ++i) in_order += out.p[i] == i;
    CHECK(in_order == 24);
    OK(T.cuStreamQuery(s));
    OK(T.cuStreamDestroy(s));
}

// An event recorded on s1 behind a gate; s2 waits for it, then reads the memory s1 wrote.
void test_events_across_streams() {
    Dev d(0);
    Pinned out(8);
    CUstream s1, s2, s3;
    CUevent e;
    OK(T.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(T.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    OK(T.cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    OK(T.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(T.cuEventQuery(e));  // never recorded: empty work
    OK(T.cuStreamWaitEvent(s2, e, 0));  // never recorded: no dependency
    OK(T.cuStreamSynchronize(s2));
    Gate g;
    OK(T.cuLaunchHostFunc(s1, Gate::fn, &g));
    OK(T.cuMemsetD8Async(d.p, 7, 8, s1));
    OK(T.cuEventRecord(e, s1));
    OK(T.cuStreamWaitEvent(s2, e, 0));
    OK(T.cuEventRecord(e, s3));  // re-record: s2 still waits for the capture made above
    OK(T.cuStreamSynchronize(s3));
    OK(T.cuMemcpyDtoHAsync(out.p, d.p, 8, s2));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s2));
    OK(T.cuEventQuery(e));  // now captures s3's (empty, done) work
    g.open();
    OK(T.cuStreamSynchronize(s2));
    CHECK(out.p[0] == 7 && out.p[7] == 7);
    OK(T.cuEventDestroy(e));
    for (CUstream s : {s1, s2, s3}) OK(T.cuStreamDestroy(s));
}

// Legacy vs blocking vs non-blocking vs per-thread, both directions.
void test_legacy_rules() {
    CUstream b, b2, nb;
    OK(T.cuStreamCreate(&b, CU_STREAM_DEFAULT));
    OK(T.cuStreamCreate(&b2, CU_STREAM_DEFAULT));
    OK(T.cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    {
        // Work queued on a blocking stream holds the legacy stream, not a non-blocking one.
        Gate g;
        Counter c;
        OK(T.cuLaunchHostFunc(b, Gate::fn, &g));
        OK(T.cuLaunchHostFunc(nullptr, Counter::fn, &c));
        OK(T.cuLaunchHostFunc(nb, Counter::fn, &c));
        CHECK(wait_done(nb));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(nullptr));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(CU_STREAM_LEGACY));
        CHECK(c.n.load() == 1);
        g.open();
        OK(T.cuStreamSynchronize(CU_STREAM_LEGACY));
        CHECK(c.n.load() == 2);
    }
    {
        // Work queued on the legacy stream holds later work of blocking streams (the
        // per-thread default stream included), not of non-blocking ones.
        Gate g;
        OK(T.cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::fn, &g));
        Counter c;
        OK(T.cuLaunchHostFunc(b2, Counter::fn, &c));
        OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Counter::fn, &c));
        OK(T.cuLaunchHostFunc(nb, Counter::fn, &c));
        CHECK(wait_done(nb));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(b2));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(CU_STREAM_PER_THREAD));
        CHECK(c.n.load() == 1);
        g.open();
        OK(T.cuStreamSynchronize(b2));
        OK(T.cuStreamSynchronize(CU_STREAM_PER_THREAD));
        CHECK(c.n.load() == 3);
    }
    {
        // A blocking stream queued BEFORE the legacy op does not wait for it.
        Gate g;
        Counter c;
        OK(T.cuLaunchHostFunc(b, Gate::fn, &g));
        OK(T.cuLaunchHostFunc(b2, Counter::fn, &c));
        CHECK(wait_done(b2));
        g.open();
        OK(T.cuStreamSynchronize(b));
    }
    for (CUstream s : {b, b2, nb}) OK(T.cuStreamDestroy(s));
}

// Each thread has its own per-thread default stream: one blocked does not hold another.
void test_per_thread_streams() {
    Gate g;
    std::atomic<int> phase{0};
    std::thread a([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Gate::fn, &g));
        phase = 1;
        OK(T.cuStreamSynchronize(CU_STREAM_PER_THREAD));
    });
    while (phase.load() == 0) std::this_thread::yield();
    Counter c;
    OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Counter::fn, &c));
    CHECK(wait_done(CU_STREAM_PER_THREAD));  // not held by thread a's gate
    CHECK(c.n.load() == 1);
    g.open();
    a.join();
}

// Query NOT_READY then SUCCESS, and the elapsed-time rules of cuda.h.
void test_query_and_elapsed() {
    CUstream s;
    CUevent t0, t1, nt, never;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(T.cuEventCreate(&t0, CU_EVENT_DEFAULT));
    OK(T.cuEventCreate(&t1, CU_EVENT_BLOCKING_SYNC));
    OK(T.cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    OK(T.cuEventCreate(&never, CU_EVENT_DEFAULT));
    float ms = -1;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuEventElapsedTime(nullptr, t0, t1));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventElapsedTime(&ms, t0, never));  // never recorded
    Gate g;
    OK(T.cuEventRecord(t0, s));
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
    OK(T.cuEventRecord(t1, s));
    OK(T.cuEventRecord(nt, s));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventQuery(t1));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventElapsedTime(&ms, t0, t1));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventElapsedTime(&ms, t0, nt));  // DISABLE_TIMING
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventElapsedTime(&ms, never, t1));
    g.open();
    OK(T.cuEventSynchronize(t1));
    OK(T.cuEventQuery(t1));
    OK(T.cuEventElapsedTime(&ms, t0, t1));
    CHECK(ms > 0.0f);  // t1 was stamped after the gate opened, well after t0
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventElapsedTime(&ms, nt, t1));
    OK(T.cuEventSynchronize(nt));  // the stream's last op
    OK(T.cuStreamQuery(s));
    for (CUevent e : {t0, t1, nt, never}) OK(T.cuEventDestroy(e));
    OK(T.cuStreamDestroy(s));
}

// Host functions run in stream order between copies; a CUDA call inside one is refused.
struct Probe {
    std::vector<int>* log;
    int id;
    CUresult inside = CUDA_SUCCESS;
    static void CUDA_CB fn(void* p) {
        auto* self = static_cast<Probe*>(p);
        self->log->push_back(self->id);
        CUstream t = nullptr;
        self->inside = T.cuStreamQuery(nullptr);
        if (self->inside == CUDA_ERROR_NOT_PERMITTED) self->inside = T.cuStreamCreate(&t, 0);
    }
};

void test_host_functions() {
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    std::vector<int> log;
    std::vector<Probe> probes;
    for (int i = 0; i < 10; ++i) probes.push_back({&log, i});
    host_set_stream_delay_micros(200);
    for (auto& p : probes) OK(T.cuLaunchHostFunc(s, Probe::fn, &p));
    OK(T.cuStreamSynchronize(s));
    host_set_stream_delay_micros(0);
    CHECK(log == std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    int refused = 0;
    for (auto& p : probes) refused += p.inside == CUDA_ERROR_NOT_PERMITTED;
    CHECK(refused == 10);
    OK(T.cuStreamQuery(s));  // the flag does not leak out of the host function
    OK(T.cuStreamDestroy(s));
}

// Pageable HtoD stages at the call; pageable DtoH is done at return; pinned is async.
void test_pageable_and_pinned() {
    Dev d(0);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    std::vector<unsigned char> src(4096, 'A');
    OK(T.cuMemcpyHtoDAsync(d.p, src.data(), src.size(), s));
    std::memset(src.data(), 'B', src.size());  // reuse at once: the device must see 'A'
    std::vector<unsigned char> back(4096, 0);
    OK(T.cuMemcpyDtoHAsync(back.data(), d.p, back.size(), s));  // pageable: done when it returns
    CHECK(back[0] == 'A' && back[4095] == 'A');
    OK(T.cuStreamQuery(s));
    Pinned pin(4096);
    std::memset(pin.p, 'C', 4096);
    {
        Gate g;  // pinned: queued behind the gate, the call returns
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuMemcpyHtoDAsync(d.p, pin.p, 4096, s));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
        g.open();
        OK(T.cuStreamSynchronize(s));
    }
    {
        Gate g;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuMemsetD8Async(d.p, 'D', 4096, s));
        OK(T.cuMemcpyDtoHAsync(pin.p, d.p, 4096, s));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
        CHECK(pin.p[0] == 'C');
        g.open();
        OK(T.cuStreamSynchronize(s));
        CHECK(pin.p[0] == 'D' && pin.p[4095] == 'D');
    }
    // A registered range counts as pinned too; unregistering waits for the queued copy.
    std::vector<unsigned char> reg(8192, 0);
    OK(T.cuMemHostRegister(reg.data(), reg.size(), CU_MEMHOSTREGISTER_PORTABLE));
    {
        Gate g;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuMemcpyDtoHAsync(reg.data(), d.p, 4096, s));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
        std::atomic<bool> done{false};
        std::atomic<pid_t> tid{0};
        std::thread t([&] {
            tid = this_tid();
            OK(T.cuMemHostUnregister(reg.data()));
            done = true;
        });
        while (tid.load() == 0) std::this_thread::yield();
        CHECK(!blocked_or_done(tid.load(), done));  // waits for the copy behind the gate
        g.open();
        t.join();
        CHECK(reg[0] == 'D' && reg[4095] == 'D');
    }
    // DtoD and memset order behind each other on one stream.
    OK(T.cuMemsetD8Async(d.p + 100, 'E', 10, s));
    OK(T.cuMemcpyDtoDAsync(d.p + 5000, d.p + 100, 10, s));
    unsigned char e[10] = {};
    OK(T.cuMemcpyDtoHAsync(e, d.p + 5000, 10, s));
    CHECK(e[0] == 'E' && e[9] == 'E');
    OK(T.cuStreamDestroy(s));
}

// Synchronous copies are legacy-stream operations: they wait for queued blocking work.
void test_sync_copy_is_legacy() {
    Dev d(0);
    CUstream b;
    OK(T.cuStreamCreate(&b, CU_STREAM_DEFAULT));
    OK(T.cuMemsetD8(d.p, 0, 64));
    Gate g;
    OK(T.cuLaunchHostFunc(b, Gate::fn, &g));
    OK(T.cuMemsetD8Async(d.p, 9, 64, b));
    unsigned char got = 0;
    std::atomic<bool> done{false};
    std::atomic<pid_t> tid{0};
    std::thread t([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        tid = this_tid();
        OK(T.cuMemcpyDtoH(&got, d.p + 10, 1));
        done = true;
    });
    while (tid.load() == 0) std::this_thread::yield();
    CHECK(!blocked_or_done(tid.load(), done));  // a copy that does not wait returns with the gate shut
    g.open();
    t.join();
    CHECK(got == 9);
    OK(T.cuStreamDestroy(b));
}

// ... but not for a non-blocking stream: with one held shut, a synchronous copy returns.
void test_sync_copy_ignores_non_blocking() {
    Dev d(0);
    CUstream nb;
    OK(T.cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    OK(T.cuMemsetD8(d.p, 5, 64));
    Gate g;
    OK(T.cuLaunchHostFunc(nb, Gate::fn, &g));
    OK(T.cuMemsetD8Async(d.p, 6, 64, nb));
    unsigned char got = 0;
    std::thread t;
    CHECK(returns_while_blocked(t, [&] { OK(T.cuMemcpyDtoH(&got, d.p, 1)); }));
    CHECK(got == 5);
    g.open();
    t.join();
    OK(T.cuStreamSynchronize(nb));
    OK(T.cuStreamDestroy(nb));
}

// cuCtxSynchronize waits for every stream of the device: created ones and the per-thread
// default streams of every thread.
void test_ctx_synchronize_waits_for_all() {
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    Gate g1, g2;
    Counter c;
    OK(T.cuLaunchHostFunc(s, Gate::fn, &g1));
    OK(T.cuLaunchHostFunc(s, Counter::fn, &c));
    std::atomic<bool> queued{false};
    std::thread other([&] {  // another thread's per-thread default stream
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Gate::fn, &g2));
        OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Counter::fn, &c));
        queued = true;
        OK(T.cuStreamSynchronize(CU_STREAM_PER_THREAD));
    });
    while (!queued.load()) std::this_thread::yield();
    std::atomic<bool> done{false};
    std::atomic<pid_t> tid{0};
    std::thread t([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        tid = this_tid();
        OK(T.cuCtxSynchronize());
        done = true;
    });
    while (tid.load() == 0) std::this_thread::yield();
    CHECK(!blocked_or_done(tid.load(), done));
    g1.open();  // the created stream finishes; the other thread's stream still holds
    OK(T.cuStreamSynchronize(s));
    CHECK(!blocked_or_done(tid.load(), done));
    g2.open();
    t.join();
    CHECK(c.n.load() == 2);
    other.join();
    OK(T.cuStreamDestroy(s));
}

}  // namespace

int main() {
    setup();
    test_fifo_order();
    test_events_across_streams();
    test_legacy_rules();
    test_per_thread_streams();
    test_query_and_elapsed();
    test_host_functions();
    test_pageable_and_pinned();
    test_sync_copy_is_legacy();
    test_sync_copy_ignores_non_blocking();
    test_ctx_synchronize_waits_for_all();
    run_more_tests();  // host_stream_test_more.cpp
    run_inline_tests();  // host_stream_test_inline.cpp
    // Exit with work still queued and workers running: no crash, no sanitizer report.
    static Dev* left = new Dev(0);  // reachable from a static, never unmapped
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    host_set_stream_delay_micros(1000);
    for (int i = 0; i < 200; ++i) OK(T.cuMemsetD8Async(left->p, static_cast<unsigned char>(i), 4096, s));
    static Counter at_exit;  // trivially destructible: a late host function still finds it
    OK(T.cuLaunchHostFunc(CU_STREAM_PER_THREAD, Counter::fn, &at_exit));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
    std::printf("host_stream_test: %d passed, %d failed\n", g_passed.load(), g_failed.load());
    return g_failed.load() == 0 ? 0 : 1;
}
