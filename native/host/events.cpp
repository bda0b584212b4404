// Host driver entry points for events. An event's state is its last record (stream, seq),
// captured at cuEventRecord; a record is an op that stamps a steady-clock time when it
// runs. An event never recorded stands for an empty set of work (cuda.h, cuEventRecord).
#include "host/stream_queue.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>

namespace cuvmm {
namespace host {
namespace {

constexpr unsigned kEventFlags =
        CU_EVENT_DEFAULT | CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

std::shared_ptr<HostEvent> find_event(Queues& q, CUevent e) {
    auto it = q.events.find(reinterpret_cast<uintptr_t>(e));
    return it == q.events.end() ? nullptr : it->second;
}

bool complete(const HostEvent& ev) { return !ev.stream || ev.stream->completed >= ev.seq; }

// host_fail_next_event_record: the armed code (0: none) and the stream it applies to. The
// code is published last (release) and taken with a compare-exchange, so it fails one record.
std::atomic<int> g_fail_record_code{0};
std::atomic<uintptr_t> g_fail_record_stream{0};

// The armed failure when `stream` is the armed stream (then disarmed), else CUDA_SUCCESS.
CUresult take_injected_record_failure(CUstream stream) {
    int code = g_fail_record_code.load(std::memory_order_acquire);
    if (code == 0 || g_fail_record_stream.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(stream)) {
        return CUDA_SUCCESS;
    }
    return g_fail_record_code.compare_exchange_strong(code, 0, std::memory_order_acq_rel) ? static_cast<CUresult>(code)
                                                                                           : CUDA_SUCCESS;
}

long long now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
}

}  // namespace

namespace entry {

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
    CUVMM_REQUIRE_INIT();
    if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & ~kEventFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
    // cuda.h: INTERPROCESS must be specified along with DISABLE_TIMING.
    if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    auto ev = std::make_shared<HostEvent>();
    ev->device = dev;
    ev->flags = Flags;
    uintptr_t h = q.next_event;
    q.next_event += 16;
    q.events.emplace(h, std::move(ev));
    *phEvent = reinterpret_cast<CUevent>(h);
    return CUDA_SUCCESS;
}

// Returns at once even with a record pending: the handle is invalid now, the pending
// record op keeps its own reference and the event is freed when it has run (cuda.h).
CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
    CUVMM_REQUIRE_INIT();
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    return q.events.erase(reinterpret_cast<uintptr_t>(hEvent)) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// One hold of the queue mutex for the look-ups and the record, and no reference count
// touched on an idle stream (lookup_stream_locked). An event created with DISABLE_TIMING
// stamps no time (cuEventElapsedTime refuses such an event before reading one): no clock
// read at the call, and its record op, when one is queued, only marks the place in the stream.
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    CUVMM_REQUIRE_INIT();
    if (g_fail_record_code.load(std::memory_order_relaxed) != 0) {  // test seam, never armed in production
        if (CUresult r = take_injected_record_failure(hStream)) return r;
    }
    Queues& q = queues();
    std::unique_lock<std::mutex> lock(q.mutex, std::defer_lock);
    const StreamRef* sp = nullptr;
    if (CUresult r = lookup_stream_locked(hStream, lock, &sp)) return r;
    const StreamRef& s = *sp;
    auto it = q.events.find(reinterpret_cast<uintptr_t>(hEvent));
    if (it == q.events.end()) return CUDA_ERROR_INVALID_HANDLE;
    HostEvent& ev = *it->second;
    if (ev.device != s->device) return CUDA_ERROR_INVALID_HANDLE;  // cuda.h: must share a context
    if (CUresult r = sticky_error(s->device)) return r;
    const uint64_t generation = ev.generation + 1;  // published below, under the mutex the stamp takes
    const bool timed = (ev.flags & CU_EVENT_DISABLE_TIMING) == 0;
    if (idle(q, s)) {
        // Everything the record would wait for is done: it is complete now (no op, no wakeup).
        // The steady state of a stream-ordered pool records on idle streams all the time.
        ev.generation = generation;
        if (ev.stream != s) ev.stream = s;
        ev.seq = s->submitted;
        if (timed) ev.time_ns = now_ns();
        return CUDA_SUCCESS;
    }
    Op op;
    op.skip_on_fault = false;  // a record completes even after a fault (its stamp is never read)
    if (timed) {
        op.run = [e = it->second, generation] {
            long long t = now_ns();
            std::lock_guard<std::mutex> stamp_lock(queues().mutex);
            if (e->generation == generation) e->time_ns = t;  // else re-recorded since: the newer op stamps
        };
    } else {
        op.run = [] {};  // no stamp to take: the op only marks the record's place in the stream
    }
    uint64_t seq = submit(q, s, std::move(op));
    if (seq == 0) return CUDA_ERROR_OUT_OF_MEMORY;  // the previous record stays the event's state
    ev.generation = generation;
    if (ev.stream != s) ev.stream = s;
    ev.seq = seq;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    CUVMM_REQUIRE_INIT();
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    std::shared_ptr<HostEvent> ev = find_event(q, hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult r = sticky_error(ev->device)) return r;
    return complete(*ev) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    CUVMM_REQUIRE_INIT();
    Queues& q = queues();
    std::unique_lock<std::mutex> lock(q.mutex);
    std::shared_ptr<HostEvent> ev = find_event(q, hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    if (ev->stream) wait_for(lock, {{ev->stream, ev->seq}});
    return sticky_error(ev->device);
}

// cuda.h: never recorded, or either created with DISABLE_TIMING -> INVALID_HANDLE;
// recorded but not complete -> NOT_READY.
CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
    CUVMM_REQUIRE_INIT();
    if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    std::shared_ptr<HostEvent> a = find_event(q, hStart);
    std::shared_ptr<HostEvent> b = find_event(q, hEnd);
    if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult r = sticky_error(a->device)) return r;
    if (CUresult r = sticky_error(b->device)) return r;
    if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
    if (!a->stream || !b->stream) return CUDA_ERROR_INVALID_HANDLE;
    if (!complete(*a) || !complete(*b)) return CUDA_ERROR_NOT_READY;
    *pMilliseconds = static_cast<float>(static_cast<double>(b->time_ns - a->time_ns) / 1e6);
    return CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host

void host_fail_next_event_record(CUstream stream, CUresult code) {
    host::g_fail_record_code.store(0, std::memory_order_relaxed);
    host::g_fail_record_stream.store(reinterpret_cast<uintptr_t>(stream), std::memory_order_relaxed);
    host::g_fail_record_code.store(static_cast<int>(code), std::memory_order_release);
}

}  // namespace cuvmm
