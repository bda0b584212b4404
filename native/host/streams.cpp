// Host driver entry points for streams: create / destroy / synchronize / query,
// cuStreamWaitEvent, cuLaunchHostFunc and the priority range. The machinery (queues,
// workers, dependencies) is stream_queue.cpp.
#include "host/stream_queue.hpp"

namespace cuvmm {
namespace host {
namespace {

// What "the stream is done" waits for: the legacy stream also waits for the blocking
// streams' queued work (as an op queued on it now would), any other stream for itself (its
// count read now: no list built, so a synchronize after an inline op allocates nothing).
// Queue mutex held.
void wait_done(std::unique_lock<std::mutex>& lock, Queues& q, const StreamRef& s) {
    if (s->kind == HostStream::Kind::legacy) return wait_for(lock, barrier_of(q, s));
    const uint64_t need = s->submitted;
    HostStream& self = *s;
    self.done.wait(lock, [&] { return self.completed >= need; });
}

bool is_done(Queues& q, const StreamRef& s) {
    if (s->kind == HostStream::Kind::legacy) return satisfied(barrier_of(q, s));
    return s->completed >= s->submitted;
}

CUresult create(CUstream* stream, unsigned int flags, int priority) {
    if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    auto s = std::make_shared<HostStream>();
    s->device = dev;
    s->flags = flags;
    s->priority = priority > kLeastPriority ? kLeastPriority : priority < kGreatestPriority ? kGreatestPriority : priority;
    s->handle = q.next_stream;
    q.next_stream += 16;
    q.streams.emplace(s->handle, s);
    q.all[dev].push_back(s);
    *stream = reinterpret_cast<CUstream>(s->handle);
    return CUDA_SUCCESS;
}

}  // namespace

namespace entry {

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
    CUVMM_REQUIRE_INIT();
    return create(stream, flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
    CUVMM_REQUIRE_INIT();
    return create(phStream, flags, priority);  // clamped (cuda.h); the host ignores it when scheduling
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
    CUVMM_REQUIRE_INIT();
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    if (leastPriority != nullptr) *leastPriority = kLeastPriority;  // either may be NULL (cuda.h)
    if (greatestPriority != nullptr) *greatestPriority = kGreatestPriority;
    return CUDA_SUCCESS;
}

// Returns at once: the handle is invalid from now on, queued work still runs, and the
// worker exits once it has drained the queue (cuda.h: resources released at completion).
// After a fault of its device it returns the sticky error, the stream destroyed all the same.
CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
    CUVMM_REQUIRE_INIT();
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    auto it = q.streams.find(reinterpret_cast<uintptr_t>(stream));
    if (it == q.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    StreamRef s = it->second;
    q.streams.erase(it);
    mark_destroyed(q, s);
    // cuda.h (\notefnerr): may return an error of earlier asynchronous work. The stream is
    // destroyed either way (its handle is gone); the call reports the device's sticky error.
    return sticky_error(s->device);
}

// One hold of the queue mutex for the look-up and the check (lookup_stream_locked); a stream
// with work still to wait for is copied first (its reference keeps it alive while the wait
// releases the mutex: a destroy meanwhile drops the registry's).
CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
    CUVMM_REQUIRE_INIT();
    Queues& q = queues();
    int dev;
    {
        std::unique_lock<std::mutex> lock(q.mutex, std::defer_lock);
        const StreamRef* sp = nullptr;
        if (CUresult r = lookup_stream_locked(stream, lock, &sp)) return r;
        dev = (*sp)->device;
        if (!is_done(q, *sp)) {
            StreamRef s = *sp;
            wait_done(lock, q, s);
        }
    }
    return sticky_error(dev);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
    CUVMM_REQUIRE_INIT();
    Queues& q = queues();
    std::unique_lock<std::mutex> lock(q.mutex, std::defer_lock);
    const StreamRef* sp = nullptr;
    if (CUresult r = lookup_stream_locked(hStream, lock, &sp)) return r;
    if (CUresult r = sticky_error((*sp)->device)) return r;
    return is_done(q, *sp) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// Later work on hStream waits for the work the event captured AT THIS CALL: a no-op op
// depending on the event's last record. Never recorded: nothing to wait for.
// CU_EVENT_WAIT_EXTERNAL is only valid during stream capture (cuda.h), which the host
// driver does not have: INVALID_VALUE like any other flag.
CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    CUVMM_REQUIRE_INIT();
    StreamRef s;
    if (CUresult r = lookup_stream(hStream, &s)) return r;
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    auto e = q.events.find(reinterpret_cast<uintptr_t>(hEvent));
    if (e == q.events.end()) return CUDA_ERROR_INVALID_HANDLE;
    if (Flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = sticky_error(s->device)) return r;
    const HostEvent& ev = *e->second;
    if (!ev.stream) return CUDA_SUCCESS;
    if (ev.stream->completed >= ev.seq) return CUDA_SUCCESS;  // complete already: nothing to wait for
    Op op;
    op.run = [] {};
    op.deps.emplace_back(ev.stream, ev.seq);
    op.skip_on_fault = false;
    return submit(q, s, std::move(op)) == 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

// fn runs on the stream's worker in stream order, with CUDA calls refused while it runs;
// it is not called once the device's context has faulted (cuda.h, cuLaunchHostFunc).
CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
    CUVMM_REQUIRE_INIT();
    if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
    StreamRef s;
    if (CUresult r = lookup_stream(hStream, &s)) return r;
    if (CUresult r = sticky_error(s->device)) return r;
    Op op;
    op.run = [fn, userData] {
        tl_in_host_function = true;
        fn(userData);
        tl_in_host_function = false;
    };
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    return submit(q, s, std::move(op)) == 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
