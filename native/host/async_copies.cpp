// Host driver entry points for the stream-ordered copies and memset. Arguments are checked
// at the call exactly as the synchronous ones (same rules, same codes), for the stream's
// device; the op checks again when it runs, under the shared registry lock held across the
// memcpy (an unmap waits for a running op, never crashes it). If the memory is no longer
// mapped or accessible by then, the op faults: CUDA_ERROR_ILLEGAL_ADDRESS becomes the
// device's sticky error (stream_queue.hpp). A small op on an idle stream runs inline on the
// caller's thread instead (enqueue, kInlineMaxBytes), checked and copied under one hold of
// the registry lock, with the outcome a queued op would have.
//
// Host memory (CUDA "API synchronization behavior"): a host range inside one pinned range
// (pinned.cpp), or inside mapped VMM memory the CPU may access (HOST / HOST_NUMA located,
// page-locked on a GPU), is fully asynchronous. From pageable memory, HtoD waits for the stream,
// stages the source into driver-owned memory (bounded pieces) and returns once queued (the caller may reuse
// its buffer at once); DtoH to pageable memory returns only when the copy is done. DtoD and
// memset are fully asynchronous.
#include "host/stream_queue.hpp"

#include <cstring>

namespace cuvmm {
namespace host {
namespace {

enum class Kind { htod, dtoh, dtod, memset };

struct CopyArgs {
    Kind kind;
    uintptr_t dst;
    uintptr_t src;
    size_t n;
    unsigned char value;
};

// The synchronous copies' checks, for device `dev`. `check_host` false: the host side is
// driver-owned staging (nothing to check). Registry mutex held (shared).
bool args_ok(State& st, const CopyArgs& a, int dev, bool check_host) {
    switch (a.kind) {
        case Kind::htod:
            return (!check_host || host_range_ok(st, reinterpret_cast<const void*>(a.src), a.n, kReadBit)) &&
                   device_range_ok(st, a.dst, a.n, dev, kReadWrite);
        case Kind::dtoh:
            return (!check_host || host_range_ok(st, reinterpret_cast<const void*>(a.dst), a.n, kReadWrite)) &&
                   device_range_ok(st, a.src, a.n, dev, kReadBit);
        case Kind::dtod:
            return device_range_ok(st, a.src, a.n, dev, kReadBit) && device_range_ok(st, a.dst, a.n, dev, kReadWrite);
        case Kind::memset:
            return device_range_ok(st, a.dst, a.n, dev, kReadWrite);
    }
    return false;
}

// The copy itself, arguments checked. Registry mutex held (shared). A failure becomes the
// device's sticky error: the op cannot report to its caller any more.
void copy_checked(State& st, const CopyArgs& a, int dev, const unsigned char* staged) {
    CUresult rc = CUDA_SUCCESS;
    switch (a.kind) {
        case Kind::htod:
            rc = device_write(st, a.dst, staged ? staged : reinterpret_cast<const void*>(a.src), a.n);
            break;
        case Kind::dtoh: rc = device_read(st, reinterpret_cast<void*>(a.dst), a.src, a.n); break;
        case Kind::dtod: rc = device_copy(st, a.dst, a.src, a.n); break;
        case Kind::memset: rc = device_fill(st, a.dst, a.value, a.n); break;
    }
    // The views were mapped when the op was queued (views_ready); only memory mapped anew at
    // these addresses since then can still lack one. The op cannot report to its caller any
    // more: like any failure of queued work, it becomes the device's sticky error.
    if (rc != CUDA_SUCCESS) set_sticky_error(dev, rc);
}

// Runs on the worker: re-check, then copy; a failed re-check faults the device.
void execute(const CopyArgs& a, int dev, const unsigned char* staged) {
    if (sticky_error(dev) != CUDA_SUCCESS) return;  // the context is dead: skipped
    Shared lock(g_state->mutex);
    State& st = *g_state;
    if (!args_ok(st, a, dev, staged == nullptr)) {
        set_sticky_error(dev, CUDA_ERROR_ILLEGAL_ADDRESS);
        return;
    }
    copy_checked(st, a, dev, staged);
}

// The private views of the device ranges `a` touches (views.cpp), mapped at the call.
CUresult views_ready(State& st, const CopyArgs& a) {
    switch (a.kind) {
        case Kind::htod:
        case Kind::memset: return device_prepare(st, a.dst, a.n);
        case Kind::dtoh: return device_prepare(st, a.src, a.n);
        case Kind::dtod:
            if (CUresult r = device_prepare(st, a.dst, a.n)) return r;
            return device_prepare(st, a.src, a.n);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

// Pageable HtoD: waits for the stream, then copies the source into driver-owned staging in
// pieces of at most kStagePiece bytes, each queued as its own op, with at most two pieces
// staged and not yet run (two buffers, reused: the piece before last must have run before
// its buffer takes the next one). Returns once the last piece is queued (the caller may
// reuse its buffer); memory stays bounded however large the copy. Another thread's work
// queued on the same stream meanwhile may land between two pieces (the order of two
// threads' work on one stream is theirs to fix anyway). Queue mutex held via `lock`.
constexpr size_t kStagePiece = size_t(1) << 20;

CUresult stage_pageable_htod(std::unique_lock<std::mutex>& lock, const StreamRef& s, const CopyArgs& a, int dev) {
    Queues& q = queues();
    wait_for(lock, barrier_of(q, s));  // pageable HtoD: the stream first
    std::shared_ptr<std::vector<unsigned char>> buffers[2];
    uint64_t queued[2] = {0, 0};  // seq of the piece last staged in each buffer
    const auto* src = reinterpret_cast<const unsigned char*>(a.src);
    size_t k = 0;
    for (size_t off = 0; off < a.n; off += kStagePiece, ++k) {
        const size_t m = a.n - off < kStagePiece ? a.n - off : kStagePiece;
        auto& buf = buffers[k % 2];
        if (queued[k % 2] != 0) wait_for(lock, {{s, queued[k % 2]}});  // its op ran and dropped it
        lock.unlock();
        {
            Shared reg(g_state->mutex);  // no reservation appears under the source meanwhile
            if (!host_range_ok(*g_state, src + off, m, kReadBit)) return CUDA_ERROR_INVALID_VALUE;
            try {
                if (!buf) buf = std::make_shared<std::vector<unsigned char>>(m);
                std::memcpy(buf->data(), src + off, m);
            } catch (const std::bad_alloc&) {
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
        lock.lock();
        if (CUresult r = sticky_error(dev)) return r;
        CopyArgs piece = a;
        piece.dst += off;
        piece.src += off;
        piece.n = m;
        Op op;
        op.skip_on_fault = false;  // execute() skips itself
        op.run = [piece, dev, staged = buf] { execute(piece, dev, staged->data()); };
        uint64_t seq = submit(q, s, std::move(op));
        if (seq == 0) return CUDA_ERROR_OUT_OF_MEMORY;
        queued[k % 2] = seq;
    }
    return CUDA_SUCCESS;
}

// The copy itself on the caller's thread, arguments checked (the inline path): the views are
// found (and mapped, the first time) on the way, so a view that cannot be mapped is returned
// (CUDA_ERROR_OUT_OF_MEMORY, nothing copied), as views_ready returns it for a queued op.
// Registry mutex held (shared).
CUresult copy_now(State& st, const CopyArgs& a) {
    switch (a.kind) {
        case Kind::htod: return device_write(st, a.dst, reinterpret_cast<const void*>(a.src), a.n);
        case Kind::dtoh: return device_read(st, reinterpret_cast<void*>(a.dst), a.src, a.n);
        case Kind::dtod: return device_copy(st, a.dst, a.src, a.n);
        case Kind::memset: return device_fill(st, a.dst, a.value, a.n);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

// One hold of the registry lock (shared) for the context and argument checks and an inline
// op, and, inside it, one hold of the queue mutex for the stream look-up, the checks and
// begin_inline (lock order registry -> queue, as everywhere). The checks and their codes come
// in lookup_stream's and stream_context's order, then the arguments'.
CUresult enqueue(CUstream hStream, const CopyArgs& a) {
    const bool special = hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD;
    StreamRef s;  // a copy: used after the queue mutex is released
    const void* host = a.kind == Kind::htod   ? reinterpret_cast<const void*>(a.src)
                       : a.kind == Kind::dtoh ? reinterpret_cast<const void*>(a.dst)
                                              : nullptr;
    bool device_memory = false;  // the host range is mapped VMM memory the CPU may touch
    Queues& q = queues();
    int dev;
    {
        Shared lock(g_state->mutex);
        int cur = 0;
        const bool has_context = current_device(*g_state, &cur);
        std::unique_lock<std::mutex> ql(q.mutex, std::defer_lock);
        if (special) {  // lookup_stream: the default streams need a live current context
            if (!has_context) return CUDA_ERROR_INVALID_CONTEXT;
            if (CUresult r = sticky_error(cur)) return r;
        }
        ql.lock();
        const StreamRef* sp = resolve_stream_ref(q, hStream, cur);
        if (sp == nullptr) return CUDA_ERROR_INVALID_HANDLE;
        // stream_context's checks: copies need a current context, whatever the stream.
        if (!has_context) return CUDA_ERROR_INVALID_CONTEXT;
        if (CUresult r = sticky_error(cur)) return r;
        dev = (*sp)->device;
        if (CUresult r = sticky_error(dev)) return r;
        if (a.n == 0) return CUDA_SUCCESS;
        s = *sp;
        // Inline: a small op on an idle stream (no delay, nothing queued or running, no
        // implicit dependency pending) runs here, under the registry lock that checks it (no
        // re-check needed: nothing can be unmapped meanwhile), instead of paying the handoff to
        // the worker and back (kInlineMaxBytes, stream_queue.hpp). The stream is busy from
        // begin_inline on; if the arguments turn out wrong, or a view cannot be mapped, the op
        // ends as an empty one (end_inline ran=false) and the call returns the code a queued op's
        // call returns. A pinned range counts the use, as for a queued op, so cuMemFreeHost
        // waits. Outcome as if queued: a failure of the copy is the sticky error, the call
        // succeeds (pageable DtoH returns the sticky error: it returns only once its op has run).
        // A host range touching a reservation is mapped VMM memory the CPU may touch (once
        // args_ok accepts it: device memory located in host RAM, HOST / HOST_NUMA, which a GPU
        // page-locks): fully asynchronous, like pinned memory, and never a pinned range.
        device_memory = host != nullptr && overlaps_reservation(*g_state, reinterpret_cast<uintptr_t>(host), a.n);
        if (a.n <= kInlineMaxBytes && begin_inline(q, s)) {
            // One look-up of the pinned range: its entry stays while its use is counted.
            PinnedRange* range = host != nullptr && !device_memory ? pinned_acquire(q, host, a.n) : nullptr;
            const bool pageable_dtoh = host != nullptr && range == nullptr && !device_memory && a.kind == Kind::dtoh;
            ql.unlock();
            CUresult rc = args_ok(*g_state, a, dev, true) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
            bool ran = false;
            if (rc == CUDA_SUCCESS) {
                ran = true;
                run_guarded(dev, [&] {
                    call_inline_test_hook();
                    // Skipped once the context is dead, as a queued op would be.
                    if (sticky_error(dev) != CUDA_SUCCESS) return;
                    rc = copy_now(*g_state, a);
                    ran = rc == CUDA_SUCCESS;  // else a view could not be mapped: nothing copied
                });
            }
            ql.lock();
            if (range != nullptr) pinned_release(q, range);
            end_inline(q, s, ran);
            if (rc != CUDA_SUCCESS) return rc;
            return pageable_dtoh ? sticky_error(dev) : CUDA_SUCCESS;
        }
        ql.unlock();
        // Queued: an unmap before it runs makes it fault (execute re-checks), as on a GPU.
        if (!args_ok(*g_state, a, dev, true)) return CUDA_ERROR_INVALID_VALUE;
        if (CUresult r = views_ready(*g_state, a)) return r;
    }
    std::unique_lock<std::mutex> lock(q.mutex);
    const bool registered = host != nullptr && !device_memory && pinned_use(q, host, a.n, true);
    const bool pinned = registered || device_memory;
    if (host != nullptr && !pinned && a.kind == Kind::htod) return stage_pageable_htod(lock, s, a, dev);
    Op op;
    op.skip_on_fault = false;  // execute() skips itself; the pinned use must be released either way
    op.run = [a, dev, registered, host] {
        struct Release {  // also when execute() throws (the worker makes that a sticky error)
            bool pinned;
            const void* host;
            ~Release() {
                if (!pinned) return;
                Queues& qq = queues();
                std::lock_guard<std::mutex> release(qq.mutex);
                pinned_release(qq, host);
            }
        } release{registered, host};
        execute(a, dev, nullptr);
    };
    uint64_t seq = submit(q, s, std::move(op));
    if (seq == 0) {
        if (registered) pinned_release(q, host);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (host != nullptr && !pinned && a.kind == Kind::dtoh) {
        wait_for(lock, {{s, seq}});  // pageable DtoH: done when it returns
        return sticky_error(dev);
    }
    return CUDA_SUCCESS;
}

}  // namespace

namespace entry {

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream hStream) {
    CUVMM_REQUIRE_INIT();
    return enqueue(hStream, {Kind::htod, static_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes, 0});
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream hStream) {
    CUVMM_REQUIRE_INIT();
    return enqueue(hStream, {Kind::dtoh, reinterpret_cast<uintptr_t>(dst), static_cast<uintptr_t>(src), bytes, 0});
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream hStream) {
    CUVMM_REQUIRE_INIT();
    return enqueue(hStream, {Kind::dtod, static_cast<uintptr_t>(dst), static_cast<uintptr_t>(src), bytes, 0});
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream hStream) {
    CUVMM_REQUIRE_INIT();
    return enqueue(hStream, {Kind::memset, static_cast<uintptr_t>(dst), 0, count, value});
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
