// The host driver's stream machinery (see stream_queue.hpp): the registry, submission
// with the implicit legacy/blocking dependencies, the per-stream worker threads, the
// per-thread default streams, the sticky per-device fault and the op delay.
#include "host/stream_queue.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <new>
#include <thread>

namespace cuvmm {
namespace host {
namespace {

std::array<std::atomic<int>, kMaxDevices> g_sticky{};
std::atomic<long long> g_delay_micros{0};
std::atomic<uint64_t> g_inline_ops{0};
std::atomic<void (*)(void*)> g_inline_hook{nullptr};  // set_inline_test_hook
std::atomic<void*> g_inline_hook_arg{nullptr};

// Queues is leaked on purpose: detached workers may still run while the process exits.
Queues* make_queues();
Queues* const g_queues = make_queues();

// fork(): the child has none of the parent's threads. The prepare handler takes the
// registry lock exclusively and then the queue mutex (the one order in which both are ever
// held), so no worker is mid-copy (holding the registry lock shared) or mid-update across the
// fork; the parent releases both. The child re-creates both locks and the condition variables
// (a waiter that only existed in the parent must not be waited for) and forgets the parent's
// work: queued ops are dropped (never run twice, once per process), every count completes,
// no stream has a worker (the next submit starts one), destroyed streams go, and no pinned
// range has pending uses. The child's sync / free / unmap therefore return at once.
State* g_fork_state = nullptr;  // the registry held across the fork (null before install)

void before_fork() {
    g_fork_state = g_state.get();
    if (g_fork_state != nullptr) g_fork_state->mutex.lock();
    g_queues->mutex.lock();
}
void parent_after_fork() {
    g_queues->mutex.unlock();
    if (g_fork_state != nullptr) g_fork_state->mutex.unlock();
}
void child_after_fork() {
    if (g_fork_state != nullptr) g_fork_state->mutex.reinit_in_child();
    Queues& q = *g_queues;
    new (&q.mutex) std::mutex();
    new (&q.changed) std::condition_variable();
    for (auto& list : q.all) {
        for (auto& s : list) {
            new (&s->work) std::condition_variable();
            new (&s->done) std::condition_variable();
            s->queue.clear();
            s->completed = s->submitted;
            s->worker = false;
            s->inline_running = false;  // its thread is not in the child
        }
        list.erase(std::remove_if(list.begin(), list.end(), [](const StreamRef& s) { return s->destroyed; }),
                   list.end());
    }
    for (auto& range : q.pinned) range.second.pending = 0;
}

Queues* make_queues() {
    auto* q = new Queues();
    pthread_atfork(before_fork, parent_after_fork, child_after_fork);
    return q;
}

// Each thread's default streams, one per device, made on first use. When the thread ends
// they are destroyed like a created stream: queued work drains, then the worker exits and
// takes the stream off the device list; one that never had a worker leaves it at once.
struct PerThreadStreams {
    std::array<StreamRef, kMaxDevices> s{};
    ~PerThreadStreams() {
        std::lock_guard<std::mutex> lock(g_queues->mutex);
        for (auto& p : s) {
            if (p) mark_destroyed(*g_queues, p);  // a worker-less one leaves the device list now
        }
    }
};
thread_local PerThreadStreams tl_per_thread;

StreamRef new_stream(Queues& q, HostStream::Kind kind, int dev, unsigned flags) {
    auto s = std::make_shared<HostStream>();
    s->kind = kind;
    s->device = dev;
    s->flags = flags;
    q.all[dev].push_back(s);
    return s;
}

// Runs one op on its worker. An exception must not end the process (it would leave the
// worker's thread function): it becomes the device's sticky error, as a failure of queued
// work does on a GPU (run_guarded). std::bad_alloc (staging, a container inside the copy) ->
// CUDA_ERROR_OUT_OF_MEMORY; anything else, in practice a C++ host function that throws
// (cuda.h is silent; an exception through a C callback is the caller's bug) ->
// CUDA_ERROR_LAUNCH_FAILED, cuda.h's "exception ... while executing", sticky for the context.
void run_op(Op& op, int device) { run_guarded(device, op.run); }

// A destroyed stream leaves its device's list once nothing runs on it any more: no worker,
// no inline op (whichever of the destroy, the worker and the inline op ends last takes it
// off). Until then cuCtxSynchronize and the legacy rule still see its unfinished work.
// Queue mutex held.
void retire_if_done(Queues& q, const StreamRef& s) {
    if (!s->destroyed || s->worker || s->inline_running) return;
    auto& list = q.all[s->device];
    for (auto l = list.begin(); l != list.end(); ++l) {
        if (l->get() == s.get()) {
            list.erase(l);
            break;
        }
    }
}

// The worker of one stream: runs its ops in order, each once its dependencies are
// satisfied and the delay has passed, with no lock held while it runs or sleeps. Exits
// when the stream was destroyed and its queue is empty.
void worker_loop(StreamRef s) {
    Queues& q = *g_queues;
    std::unique_lock<std::mutex> lock(q.mutex);
    for (;;) {
        s->work.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
        if (s->queue.empty()) break;  // destroyed and drained
        wait_for(lock, s->queue.front().deps);
        Op op = std::move(s->queue.front());
        s->queue.pop_front();
        lock.unlock();
        long long delay = g_delay_micros.load(std::memory_order_relaxed);
        if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
        if (!(op.skip_on_fault && sticky_error(s->device) != CUDA_SUCCESS)) run_op(op, s->device);
        op = Op();  // drop what the op captured (staging, event references) outside the lock
        lock.lock();
        ++s->completed;
        s->done.notify_all();
    }
    s->worker = false;
    retire_if_done(q, s);
}

}  // namespace

void mark_destroyed(Queues& q, const StreamRef& s) {
    s->destroyed = true;
    retire_if_done(q, s);  // no worker and no inline op: leaves the device list now
    s->work.notify_one();
}

thread_local bool tl_in_host_function = false;

Queues& queues() { return *g_queues; }

CUresult sticky_error(int device) {
    if (device < 0 || device >= kMaxDevices) return CUDA_SUCCESS;
    return static_cast<CUresult>(g_sticky[device].load(std::memory_order_acquire));
}

void set_sticky_error(int device, CUresult rc) {
    int expected = CUDA_SUCCESS;
    g_sticky[device].compare_exchange_strong(expected, static_cast<int>(rc), std::memory_order_acq_rel);
}

long long stream_delay_micros() { return g_delay_micros.load(std::memory_order_relaxed); }

const StreamRef* resolve_stream_ref(Queues& q, CUstream s, int dev) {
    if (s == nullptr || s == CU_STREAM_LEGACY) {
        if (!q.legacy[dev]) q.legacy[dev] = new_stream(q, HostStream::Kind::legacy, dev, CU_STREAM_DEFAULT);
        return &q.legacy[dev];
    }
    if (s == CU_STREAM_PER_THREAD) {
        StreamRef& p = tl_per_thread.s[dev];
        if (!p) p = new_stream(q, HostStream::Kind::per_thread, dev, CU_STREAM_DEFAULT);
        return &p;
    }
    auto it = q.streams.find(reinterpret_cast<uintptr_t>(s));
    return it == q.streams.end() ? nullptr : &it->second;
}

StreamRef resolve_stream(Queues& q, CUstream s, int dev) {
    const StreamRef* p = resolve_stream_ref(q, s, dev);
    return p == nullptr ? nullptr : *p;
}

std::vector<std::pair<StreamRef, uint64_t>> barrier_of(Queues& q, const StreamRef& s) {
    std::vector<std::pair<StreamRef, uint64_t>> deps;
    deps.emplace_back(s, s->submitted);
    if (s->kind == HostStream::Kind::legacy) {
        for (auto& other : q.all[s->device]) {
            if (other != s && other->blocking() && other->submitted > other->completed) {
                deps.emplace_back(other, other->submitted);
            }
        }
    } else if (s->blocking()) {
        const StreamRef& legacy = q.legacy[s->device];
        if (legacy && legacy->submitted > legacy->completed) deps.emplace_back(legacy, legacy->submitted);
    }
    return deps;
}

uint64_t submit(Queues& q, const StreamRef& s, Op op) {
    try {
        if (!s->worker) {  // started first: a thread that cannot start leaves nothing queued
            std::thread(worker_loop, s).detach();
            s->worker = true;  // the worker needs the queue mutex, which the caller holds
        }
        auto implicit = barrier_of(q, s);
        // [0] is s itself: the worker runs its queue in order, so FIFO needs no dependency,
        // except behind an op running inline on another thread, which the worker must not overtake.
        if (s->inline_running) op.deps.push_back(std::move(implicit[0]));
        for (size_t i = 1; i < implicit.size(); ++i) op.deps.push_back(std::move(implicit[i]));
        s->queue.push_back(std::move(op));
    } catch (...) {  // std::system_error (no thread), std::bad_alloc: never across the C ABI
        return 0;
    }
    uint64_t seq = ++s->submitted;
    s->work.notify_one();  // only its worker waits on it
    return seq;
}

bool satisfied(const std::vector<std::pair<StreamRef, uint64_t>>& deps) {
    for (auto& d : deps) {
        if (d.first->completed < d.second) return false;
    }
    return true;
}

bool idle(Queues& q, const StreamRef& s) {
    if (g_delay_micros.load(std::memory_order_relaxed) != 0 || !s->queue.empty() || s->completed != s->submitted) {
        return false;
    }
    // satisfied(barrier_of(q, s)) without building the list (called for every small op and
    // every record): barrier_of names s itself (complete, checked above) and only streams
    // with work not yet completed, so the barrier is met exactly when it names none.
    if (s->kind == HostStream::Kind::legacy) {
        for (auto& other : q.all[s->device]) {
            if (other != s && other->blocking() && other->submitted > other->completed) return false;
        }
    } else if (s->blocking()) {
        const StreamRef& legacy = q.legacy[s->device];
        if (legacy && legacy->submitted > legacy->completed) return false;
    }
    return true;
}

bool begin_inline(Queues& q, const StreamRef& s) {
    if (!idle(q, s)) return false;
    ++s->submitted;  // busy from now on: not idle for anyone, later ops depend on this one
    s->inline_running = true;
    return true;
}

void end_inline(Queues& q, const StreamRef& s, bool ran) {
    s->inline_running = false;
    ++s->completed;
    if (ran) g_inline_ops.fetch_add(1, std::memory_order_relaxed);
    s->done.notify_all();
    retire_if_done(q, s);  // destroyed meanwhile (by another thread) with no worker
}

uint64_t inline_op_count() { return g_inline_ops.load(std::memory_order_relaxed); }

void set_inline_test_hook(void (*fn)(void*), void* arg) {
    g_inline_hook_arg.store(arg, std::memory_order_relaxed);
    g_inline_hook.store(fn, std::memory_order_release);
}

void call_inline_test_hook() {
    if (auto* fn = g_inline_hook.load(std::memory_order_acquire)) fn(g_inline_hook_arg.load(std::memory_order_relaxed));
}

void wait_for(std::unique_lock<std::mutex>& lock, const std::vector<std::pair<StreamRef, uint64_t>>& deps) {
    // Counts only grow: once a dependency is met it stays met, so waiting for each in turn
    // (on the `done` of its stream, woken only by that stream's completions) waits for all.
    for (auto& d : deps) {
        HostStream& s = *d.first;
        const uint64_t need = d.second;
        s.done.wait(lock, [&] { return s.completed >= need; });
    }
}

std::vector<std::pair<StreamRef, uint64_t>> device_barrier(Queues& q, int dev) {
    std::vector<std::pair<StreamRef, uint64_t>> deps;
    for (auto& s : q.all[dev]) deps.emplace_back(s, s->submitted);
    return deps;
}

CUresult stream_context(int* dev) {
    {
        Shared lock(g_state->mutex);
        if (!current_device(*g_state, dev)) return CUDA_ERROR_INVALID_CONTEXT;
    }
    return sticky_error(*dev);
}

CUresult lookup_stream_locked(CUstream stream, std::unique_lock<std::mutex>& lock, const StreamRef** out) {
    Queues& q = queues();
    int dev = 0;
    if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
        if (CUresult r = stream_context(&dev)) return r;  // the registry lock first (lock order), released
    }
    lock.lock();
    *out = resolve_stream_ref(q, stream, dev);
    return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult lookup_stream(CUstream stream, StreamRef* out) {
    std::unique_lock<std::mutex> lock(queues().mutex, std::defer_lock);
    const StreamRef* s = nullptr;
    if (CUresult r = lookup_stream_locked(stream, lock, &s)) return r;
    *out = *s;
    return CUDA_SUCCESS;
}

void forget_streams_and_events(int dev) {
    Queues& q = queues();
    std::lock_guard<std::mutex> lock(q.mutex);
    for (auto it = q.streams.begin(); it != q.streams.end();) {
        if (it->second->device != dev) {
            ++it;
            continue;
        }
        StreamRef s = it->second;
        it = q.streams.erase(it);
        mark_destroyed(q, s);
    }
    for (auto it = q.events.begin(); it != q.events.end();) {
        // Erasing the handle is enough: a pending record op needs no entry (a timed one holds
        // its own reference to stamp the time, an untimed one captures nothing).
        it = it->second->device == dev ? q.events.erase(it) : std::next(it);
    }
}

CUresult synchronize_current_device() {
    int dev;
    if (CUresult r = stream_context(&dev)) return r;
    Queues& q = queues();
    std::unique_lock<std::mutex> lock(q.mutex);
    wait_for(lock, device_barrier(q, dev));
    return sticky_error(dev);
}

}  // namespace host

void host_set_stream_delay_micros(long long micros) {
    host::g_delay_micros.store(micros > 0 ? micros : 0, std::memory_order_relaxed);
}

}  // namespace cuvmm
