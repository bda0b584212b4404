// host_stream_test, third part: small copies and memsets on an idle stream run inline on the
// caller's thread (async_copies.cpp, stream_queue.hpp begin_inline / kInlineMaxBytes).
// Taken when it should be (counted with inline_op_count(); a stream that only saw inline ops
// has no worker) and not otherwise (too big, delay set, stream busy, legacy / blocking
// rules, a pending cuStreamWaitEvent, host functions); while an inline op runs (held by the
// test seam set_inline_test_hook) the stream is busy for everyone: FIFO for another thread's
// op, query / synchronize / events / cuCtxSynchronize / destroy, unmap and cuMemFreeHost
// wait; errors as when queued (sticky fault met by the op, an exception in it).
#include "host_stream_test_util.hpp"

#include "host/stream_queue.hpp"

#include <cstdlib>
#include <new>

// Counts operator new calls made on this thread while armed (test_inline_allocates_nothing).
// Replaces the global operator new / delete of the whole host_stream_test binary; unarmed it
// only allocates (malloc / free, the pair ASan and TSan intercept).
thread_local bool tl_count_new = false;
thread_local long tl_new_calls = 0;

void* operator new(std::size_t n) {
    if (tl_count_new) ++tl_new_calls;
    if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

using host::inline_op_count;
using host::kInlineMaxBytes;

host::StreamRef internal(CUstream s) {
    host::Queues& q = host::queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    return host::resolve_stream(q, s, 0);
}

bool has_worker(CUstream s) {
    host::StreamRef r = internal(s);
    std::lock_guard<std::mutex> lock(host::queues().mutex);
    return r && r->worker;
}

// The seam: counts the inline ops it sees; `hold` makes the next one wait on `gate` (30 s
// bound), `throw_bad_alloc` makes it throw.
struct Hold {
    std::atomic<int> calls{0};
    std::atomic<bool> hold{false};
    std::atomic<bool> throw_bad_alloc{false};
    Gate gate;
    static void fn(void* p) {
        auto* h = static_cast<Hold*>(p);
        ++h->calls;
        if (h->throw_bad_alloc.load()) throw std::bad_alloc();
        if (h->hold.exchange(false)) Gate::fn(&h->gate);
    }
    Hold() { host::set_inline_test_hook(&Hold::fn, this); }
    ~Hold() { host::set_inline_test_hook(nullptr, nullptr); }
    void wait_entered() {
        for (int i = 0; i < 10000 && !gate.entered.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        CHECK(gate.entered.load());
    }
};

// Every kind of copy and the memset, on an idle created stream, the legacy stream and a
// blocking stream: inline, right at return, and no worker thread for a stream that only saw
// inline ops. The threshold is inclusive: kInlineMaxBytes inline, one byte more queued.
void test_inline_taken() {
    Dev d(0);
    Pinned pin(8192);
    std::vector<unsigned char> pageable(4096, 'P');
    std::vector<unsigned char> back(4096, 0);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const uint64_t before = inline_op_count();
    OK(T.cuMemsetD8Async(d.p, 'M', 4096, s));
    OK(T.cuMemcpyDtoHAsync(pin.p, d.p, 4096, s));
    CHECK(pin.p[0] == 'M' && pin.p[4095] == 'M');  // done at return: it ran inline
    std::memset(pin.p, 'H', 4096);
    OK(T.cuMemcpyHtoDAsync(d.p + 4096, pin.p, 4096, s));
    OK(T.cuMemcpyDtoDAsync(d.p + 8192, d.p + 4096, 4096, s));
    OK(T.cuMemcpyDtoHAsync(pin.p + 4096, d.p + 8192, 4096, s));
    CHECK(pin.p[4096] == 'H' && pin.p[8191] == 'H');
    OK(T.cuMemcpyHtoDAsync(d.p, pageable.data(), 4096, s));
    OK(T.cuMemcpyDtoHAsync(back.data(), d.p, 4096, s));
    CHECK(back[0] == 'P' && back[4095] == 'P');
    CHECK(inline_op_count() == before + 7);
    OK(T.cuStreamQuery(s));
    CHECK(!has_worker(s));  // every op ran on this thread
    OK(T.cuStreamSynchronize(s));
    OK(T.cuStreamDestroy(s));

    CUstream b;
    OK(T.cuStreamCreate(&b, CU_STREAM_DEFAULT));
    OK(T.cuStreamSynchronize(nullptr));  // whatever earlier tests left on the legacy stream
    const uint64_t before2 = inline_op_count();
    OK(T.cuMemsetD8Async(d.p, 1, 64, nullptr));
    OK(T.cuMemsetD8Async(d.p, 2, 64, b));
    OK(T.cuMemsetD8Async(d.p, 3, 64, CU_STREAM_PER_THREAD));
    CHECK(inline_op_count() == before2 + 3);
    CHECK(!has_worker(b));
    OK(T.cuStreamDestroy(b));

    // The threshold, inclusive.
    Dev big(0, kInlineMaxBytes + (size_t(64) << 10));
    CUstream t;
    OK(T.cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    const uint64_t before3 = inline_op_count();
    OK(T.cuMemsetD8Async(big.p, 4, kInlineMaxBytes, t));
    CHECK(inline_op_count() == before3 + 1);
    CHECK(!has_worker(t));
    OK(T.cuMemsetD8Async(big.p, 5, kInlineMaxBytes + 1, t));
    CHECK(inline_op_count() == before3 + 1);  // queued: bigger copies let two streams overlap
    CHECK(has_worker(t));
    OK(T.cuStreamSynchronize(t));
    unsigned char last = 0;
    OK(T.cuMemcpyDtoH(&last, big.p + kInlineMaxBytes, 1));
    CHECK(last == 5);
    OK(T.cuStreamDestroy(t));
}

// The inline path's per-op cost is bookkeeping beside a small memcpy: a copy or memset run
// inline, and the synchronize and query after it, make no heap allocation (no list of
// pieces, dependencies or barrier built per call), for every kind of op, on a created stream.
// Counted with operator new on this thread (the op runs on it).
void test_inline_allocates_nothing() {
    Dev d(0);
    Pinned pin(8192);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(T.cuMemsetD8Async(d.p, 0, 4096, s));  // first touch: the private view is mapped
    OK(T.cuStreamSynchronize(s));
    const uint64_t before = inline_op_count();
    tl_new_calls = 0;
    tl_count_new = true;
    for (int i = 0; i < 100; ++i) {
        T.cuMemcpyHtoDAsync(d.p, pin.p, 4096, s);
        T.cuStreamSynchronize(s);
        T.cuMemcpyDtoHAsync(pin.p + 4096, d.p, 4096, s);
        T.cuMemcpyDtoDAsync(d.p + 4096, d.p, 4096, s);
        T.cuMemsetD8Async(d.p + 8192, 7, 4096, s);
        T.cuStreamQuery(s);
    }
    tl_count_new = false;
    const long calls = tl_new_calls;
    CHECK(inline_op_count() == before + 400);
    if (calls != 0) std::printf("  operator new calls in 400 inline ops + 100 synchronize + 100 query: %ld\n", calls);
    CHECK(calls == 0);
    OK(T.cuStreamSynchronize(s));
    OK(T.cuStreamDestroy(s));
}

struct ThreadId {
    std::atomic<pid_t> tid{0};
    static void CUDA_CB fn(void* p) { static_cast<ThreadId*>(p)->tid = this_tid(); }
};

// Not inline: the delay set, a busy stream, the legacy rule both ways, a pending
// cuStreamWaitEvent, a host function (always the worker's).
void test_inline_not_taken() {
    Dev d(0);
    Pinned out(64);
    {
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        host_set_stream_delay_micros(1);  // any delay: ordering bugs must stay visible
        const uint64_t before = inline_op_count();
        OK(T.cuMemsetD8Async(d.p, 6, 64, s));
        CHECK(inline_op_count() == before);
        CHECK(has_worker(s));
        OK(T.cuStreamSynchronize(s));
        host_set_stream_delay_micros(0);
        OK(T.cuMemsetD8Async(d.p, 7, 64, s));  // idle again, no delay: inline
        CHECK(inline_op_count() == before + 1);
        OK(T.cuStreamDestroy(s));
    }
    {
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        Gate g;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        const uint64_t before = inline_op_count();
        OK(T.cuMemsetD8Async(d.p, 8, 64, s));
        OK(T.cuMemcpyDtoHAsync(out.p, d.p, 64, s));
        CHECK(inline_op_count() == before);
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
        CHECK(out.p[0] == 0);
        g.open();
        OK(T.cuStreamSynchronize(s));
        CHECK(out.p[0] == 8);
        OK(T.cuStreamDestroy(s));
    }
    {
        ThreadId id;
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        const uint64_t before = inline_op_count();
        OK(T.cuLaunchHostFunc(s, ThreadId::fn, &id));
        OK(T.cuStreamSynchronize(s));
        CHECK(id.tid.load() != 0 && id.tid.load() != this_tid());
        CHECK(inline_op_count() == before);
        OK(T.cuStreamDestroy(s));
    }
    CUstream b, nb;
    OK(T.cuStreamCreate(&b, CU_STREAM_DEFAULT));
    OK(T.cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    {
        // Legacy work pending: a blocking stream's op depends on it, a non-blocking one's not.
        Gate g;
        OK(T.cuLaunchHostFunc(CU_STREAM_LEGACY, Gate::fn, &g));
        const uint64_t before = inline_op_count();
        OK(T.cuMemsetD8Async(d.p, 9, 64, b));
        CHECK(inline_op_count() == before);
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(b));
        OK(T.cuMemsetD8Async(d.p + 64, 9, 64, nb));
        CHECK(inline_op_count() == before + 1);
        g.open();
        OK(T.cuStreamSynchronize(b));
    }
    {
        // Blocking-stream work pending: a legacy-stream op depends on it.
        Gate g;
        OK(T.cuLaunchHostFunc(b, Gate::fn, &g));
        const uint64_t before = inline_op_count();
        OK(T.cuMemsetD8Async(d.p, 10, 64, nullptr));
        CHECK(inline_op_count() == before);
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(nullptr));
        g.open();
        OK(T.cuStreamSynchronize(nullptr));
    }
    {
        // A pending cuStreamWaitEvent: the copy waits for the event's work.
        CUstream s1;
        CUevent e;
        OK(T.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
        OK(T.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        Gate g;
        OK(T.cuLaunchHostFunc(s1, Gate::fn, &g));
        OK(T.cuMemsetD8Async(d.p, 11, 64, s1));
        OK(T.cuEventRecord(e, s1));
        OK(T.cuStreamWaitEvent(nb, e, 0));
        std::memset(out.p, 0, 64);
        const uint64_t before = inline_op_count();
        OK(T.cuMemcpyDtoHAsync(out.p, d.p, 64, nb));
        CHECK(inline_op_count() == before);
        CHECK(out.p[0] == 0);
        g.open();
        OK(T.cuStreamSynchronize(nb));
        CHECK(out.p[0] == 11);
        OK(T.cuStreamWaitEvent(nb, e, 0));  // complete already: no op, the stream stays idle
        OK(T.cuMemsetD8Async(d.p, 12, 64, nb));
        CHECK(inline_op_count() == before + 1);
        OK(T.cuEventDestroy(e));
        OK(T.cuStreamDestroy(s1));
    }
    OK(T.cuStreamDestroy(b));
    OK(T.cuStreamDestroy(nb));
}

// An inline op held in flight on thread A: the stream is busy for everyone. Another thread's
// op queued meanwhile runs after it (FIFO: it depends on the inline op, which the worker
// waits for), query and events say NOT_READY, synchronize and cuCtxSynchronize wait.
void test_inline_op_in_flight() {
    Dev d(0);
    Pinned out(64);
    CUstream s;
    CUevent e;
    OK(T.cuStreamCreate(&s, CU_STREAM_DEFAULT));  // blocking: the legacy stream waits for it too
    OK(T.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(T.cuStreamSynchronize(nullptr));
    Hold h;
    h.hold = true;
    std::thread a([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        OK(T.cuMemsetD8Async(d.p, 1, 64, s));  // inline, held in the seam
    });
    h.wait_entered();
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(s));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuStreamQuery(nullptr));
    OK(T.cuEventRecord(e, s));
    EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventQuery(e));
    std::thread b([&] {  // another enqueuer: queued behind the inline op, not inline
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        OK(T.cuMemsetD8Async(d.p, 2, 64, s));
        OK(T.cuMemcpyDtoHAsync(out.p, d.p, 64, s));
    });
    b.join();
    CHECK(h.calls.load() == 1);
    {
        host::StreamRef r = internal(s);
        host::Queues& q = host::queues();
        std::lock_guard<std::mutex> lock(q.mutex);
        // The worker must wait for the inline op (seq 1 of s) before it runs the memset: the
        // op is still queued, with that dependency.
        bool waits = false;
        if (!r->queue.empty()) {
            for (auto& dep : r->queue.front().deps) waits |= dep.first == r && dep.second >= 1;
        }
        CHECK(waits);
    }
    std::atomic<bool> synced{false}, ctx_synced{false};
    std::atomic<pid_t> tid{0}, ctx_tid{0};
    std::thread c([&] {
        tid = this_tid();
        OK(T.cuStreamSynchronize(s));
        synced = true;
    });
    std::thread x([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        ctx_tid = this_tid();
        OK(T.cuCtxSynchronize());
        ctx_synced = true;
    });
    while (tid.load() == 0 || ctx_tid.load() == 0) std::this_thread::yield();
    CHECK(!blocked_or_done(tid.load(), synced));
    CHECK(!blocked_or_done(ctx_tid.load(), ctx_synced));
    h.gate.open();
    a.join();
    c.join();
    x.join();
    CHECK(synced.load() && ctx_synced.load());
    OK(T.cuStreamSynchronize(s));
    CHECK(out.p[0] == 2 && out.p[63] == 2);
    unsigned char last = 0;
    OK(T.cuMemcpyDtoH(&last, d.p + 63, 1));
    CHECK(last == 2);  // the queued memset ran after the inline one, not before
    OK(T.cuEventQuery(e));
    OK(T.cuEventDestroy(e));
    OK(T.cuStreamDestroy(s));
}

// Destroyed while its inline op runs: the handle goes at once, but cuCtxSynchronize still
// waits for the op (the stream stays on its device's list until the op ends).
void test_destroy_during_inline() {
    Dev d(0);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    Hold h;
    h.hold = true;
    std::thread a([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        OK(T.cuMemsetD8Async(d.p, 1, 64, s));
    });
    h.wait_entered();
    OK(T.cuStreamDestroy(s));
    EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuStreamQuery(s));
    std::atomic<bool> done{false};
    std::atomic<pid_t> tid{0};
    std::thread x([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        tid = this_tid();
        OK(T.cuCtxSynchronize());
        done = true;
    });
    while (tid.load() == 0) std::this_thread::yield();
    CHECK(!blocked_or_done(tid.load(), done));
    h.gate.open();
    a.join();
    x.join();
    OK(T.cuCtxSynchronize());
}

// An unmap of the memory an inline op writes waits for it (the op holds the registry lock
// shared, as a worker's op does); cuMemFreeHost of its pinned source waits for it (the op
// counts a use of the pinned range, as a queued one does).
void test_unmap_and_free_wait_for_inline() {
    {
        Dev d(0);
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        Hold h;
        h.hold = true;
        std::thread a([&] {
            OK(T.cuCtxSetCurrent(g_ctx[0]));
            OK(T.cuMemsetD8Async(d.p, 1, 4096, s));
        });
        h.wait_entered();
        std::atomic<bool> done{false};
        std::atomic<pid_t> tid{0};
        std::thread u([&] {
            tid = this_tid();
            d.unmap();
            done = true;
        });
        while (tid.load() == 0) std::this_thread::yield();
        CHECK(!blocked_or_done(tid.load(), done));
        h.gate.open();
        a.join();
        u.join();
        OK(T.cuStreamSynchronize(s));  // no fault: the op ran before the unmap
        OK(T.cuStreamDestroy(s));
    }
    in_child("cuMemFreeHost waits for an inline copy", [] {
        alarm(10);
        Dev d(0);
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        void* v = nullptr;
        OK(T.cuMemHostAlloc(&v, 1 << 16, 0));
        Hold h;
        h.hold = true;
        std::thread a([&] {
            OK(T.cuCtxSetCurrent(g_ctx[0]));
            OK(T.cuMemcpyHtoDAsync(d.p, v, 1 << 16, s));
        });
        h.wait_entered();
        std::atomic<bool> freed{false};
        std::atomic<pid_t> tid{0};
        std::thread f([&] {
            tid = this_tid();
            OK(T.cuMemFreeHost(v));
            freed = true;
        });
        while (tid.load() == 0) std::this_thread::yield();
        CHECK(!blocked_or_done(tid.load(), freed));
        h.gate.open();
        a.join();
        f.join();
        OK(T.cuStreamSynchronize(s));
        OK(T.cuStreamDestroy(s));
    });
}

// Several threads enqueue on one stream at once (inline and queued ops mix): each thread's
// ops run in its order, query never says anything but SUCCESS / NOT_READY.
void test_concurrent_enqueuers() {
    constexpr int kThreads = 4;
    constexpr int kRounds = 150;
    Dev d(0);
    Pinned out(kThreads * 256);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_DEFAULT));
    const uint64_t before = inline_op_count();
    std::atomic<int> bad{0}, running{kThreads};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            OK(T.cuCtxSetCurrent(g_ctx[0]));
            CUevent e;
            OK(T.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
            const CUdeviceptr mine = d.p + static_cast<CUdeviceptr>(t) * 256;
            for (int i = 1; i <= kRounds; ++i) {
                OK(T.cuMemsetD8Async(mine, static_cast<unsigned char>(i), 256, s));
                OK(T.cuMemcpyDtoHAsync(out.p + t * 256, mine, 256, s));
                if (i % 5 == 0) {
                    OK(T.cuEventRecord(e, s));
                    OK(T.cuEventSynchronize(e));
                    if (out.p[t * 256] != i || out.p[t * 256 + 255] != i) ++bad;
                }
            }
            OK(T.cuEventDestroy(e));
            --running;
        });
    }
    std::thread q([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        while (running.load() > 0) {
            CUresult r = T.cuStreamQuery(s);
            if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) ++bad;
            std::this_thread::yield();
        }
    });
    for (auto& th : threads) th.join();
    q.join();
    OK(T.cuStreamSynchronize(s));
    CHECK(bad.load() == 0);
    CHECK(inline_op_count() > before);  // the first op found the stream idle
    OK(T.cuStreamDestroy(s));
}

// Errors as when queued. The device's sticky fault, set by another stream's op while an
// inline DtoH is held: the op is skipped; the call returns what a queued one returns
// (pinned: SUCCESS; pageable: it waits for its op, so the sticky error), later calls the
// sticky error. An exception in the inline op becomes the sticky error (bad_alloc: OUT_OF_MEMORY).
void fault_while_held(bool pageable) {
    alarm(10);
    Dev d(0);
    Dev gone(0);
    Pinned pin(64);
    std::vector<unsigned char> page(64, 0);
    unsigned char* dst = pageable ? page.data() : pin.p;
    OK(T.cuMemsetD8(d.p, 'X', 64));
    CUstream s, s2;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(T.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    Gate g2;
    OK(T.cuLaunchHostFunc(s2, Gate::fn, &g2));
    OK(T.cuMemsetD8Async(gone.p, 1, 64, s2));  // faults when it runs: unmapped below
    gone.unmap();
    Hold h;
    h.hold = true;
    CUresult inline_rc = CUDA_ERROR_UNKNOWN;
    std::thread a([&] {
        OK(T.cuCtxSetCurrent(g_ctx[0]));
        inline_rc = T.cuMemcpyDtoHAsync(dst, d.p, 64, s);
    });
    h.wait_entered();
    g2.open();
    bool faulted = false;  // bounded poll for s2's fault
    for (int i = 0; i < 10000 && !faulted; ++i) {
        faulted = T.cuStreamQuery(s2) == CUDA_ERROR_ILLEGAL_ADDRESS;
        if (!faulted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(faulted);
    h.gate.open();
    a.join();
    CHECK(inline_rc == (pageable ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS));
    CHECK(dst[0] == 0);  // skipped: the context is dead
    EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuStreamSynchronize(s));
    EXPECT_RC(CUDA_ERROR_ILLEGAL_ADDRESS, T.cuMemsetD8Async(d.p, 0, 64, s));
    std::fflush(stdout);
    _exit(g_failed.load());  // the dead context's objects are not cleaned up
}

void test_inline_errors() {
    in_child("a fault met by a held inline DtoH into pinned memory", [] { fault_while_held(false); });
    in_child("a fault met by a held inline DtoH into pageable memory", [] { fault_while_held(true); });
    in_child("an exception in an inline op is the sticky error", [] {
        alarm(10);
        Dev d(0);
        CUstream s;
        OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        Hold h;
        h.throw_bad_alloc = true;
        OK(T.cuMemsetD8Async(d.p, 1, 64, s));  // as queued: the call succeeds
        CHECK(h.calls.load() == 1);
        EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuStreamSynchronize(s));
        EXPECT_RC(CUDA_ERROR_OUT_OF_MEMORY, T.cuStreamQuery(s));
        std::fflush(stdout);
        _exit(g_failed.load());
    });
}

// A refused small op on an idle stream (a null host pointer, an unmapped device range)
// returns the code a queued op's call returns, runs nothing inline and leaves the stream idle
// (async_copies.cpp: the op begun inline ends as an empty one): a query succeeds, an event
// recorded next is complete at once, the next small op runs inline. Events recorded behind
// queued work: a DISABLE_TIMING one (no stamp taken) completes in order and is refused by
// cuEventElapsedTime; a timed one is stamped when its op runs.
void test_inline_refused_and_records() {
    Dev d(0);
    Pinned pin(4096);
    CUstream s;
    OK(T.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const uint64_t before = inline_op_count();
    const CUdeviceptr unmapped = 0x1000;
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoDAsync(d.p, nullptr, 64, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoHAsync(nullptr, d.p, 64, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyDtoDAsync(d.p, unmapped, 64, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemsetD8Async(unmapped, 1, 64, s));
    EXPECT_RC(CUDA_ERROR_INVALID_VALUE, T.cuMemcpyHtoDAsync(unmapped, pin.p, 64, s));
    CHECK(inline_op_count() == before);
    CHECK(!has_worker(s));
    OK(T.cuStreamQuery(s));
    CUevent e;
    OK(T.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OK(T.cuEventRecord(e, s));
    OK(T.cuEventQuery(e));
    OK(T.cuMemsetD8Async(d.p, 5, 64, s));
    CHECK(inline_op_count() == before + 1);
    OK(T.cuMemcpyDtoHAsync(pin.p, d.p, 64, s));
    CHECK(inline_op_count() == before + 2);
    CHECK(pin.p[63] == 5);
    {
        Gate g;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuEventRecord(e, s));
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventQuery(e));
        float ms = -1;
        EXPECT_RC(CUDA_ERROR_INVALID_HANDLE, T.cuEventElapsedTime(&ms, e, e));
        g.open();
        OK(T.cuEventSynchronize(e));
        OK(T.cuEventQuery(e));
    }
    CUevent t0, t1;
    OK(T.cuEventCreate(&t0, CU_EVENT_DEFAULT));
    OK(T.cuEventCreate(&t1, CU_EVENT_DEFAULT));
    OK(T.cuEventRecord(t0, s));  // idle: stamped at the call
    {
        Gate g;
        OK(T.cuLaunchHostFunc(s, Gate::fn, &g));
        OK(T.cuEventRecord(t1, s));  // queued: stamped when it runs
        float ms = -1;
        EXPECT_RC(CUDA_ERROR_NOT_READY, T.cuEventElapsedTime(&ms, t0, t1));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a gap between the stamps, not a synchronization
        g.open();
        OK(T.cuEventSynchronize(t1));
        OK(T.cuEventElapsedTime(&ms, t0, t1));
        CHECK(ms > 0.0f);  // stamped when its op ran, after t0's stamp
    }
    OK(T.cuEventDestroy(t0));
    OK(T.cuEventDestroy(t1));
    OK(T.cuEventDestroy(e));
    OK(T.cuStreamDestroy(s));
}

}  // namespace

void run_inline_tests() {
    test_inline_taken();
    test_inline_allocates_nothing();
    test_inline_not_taken();
    test_inline_op_in_flight();
    test_destroy_during_inline();
    test_unmap_and_free_wait_for_inline();
    test_concurrent_enqueuers();
    test_inline_errors();
    test_inline_refused_and_records();
}
