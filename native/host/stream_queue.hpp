// The host driver's stream machinery: every stream (created, the legacy stream of each
// device, the per-thread default stream of each (thread, device)) is a FIFO of ops run in
// order by one worker thread of its own. Included only by native/host/*.cpp.
//
// Ordering. An op carries dependencies (stream, count): it starts only when each named
// stream has completed that many ops. Counts only grow, so a waiter waits on the `done`
// condition variable of the first dependency not yet met, then the next (one mutex for
// all). Dependencies only ever name ops already queued, in the total order of submissions
// under the queue mutex, so they never form a cycle.
//   - legacy stream: an op depends on everything already queued on the device's blocking
//     streams (flag DEFAULT, per-thread default streams included);
//   - blocking stream: an op depends on everything already queued on the legacy stream;
//   - NON_BLOCKING streams do neither; cuStreamWaitEvent queues a no-op that depends on
//     the event's last record.
//
// Faults. An op that finds its memory no longer mapped or accessible when it runs sets the
// device's sticky error (CUDA_ERROR_ILLEGAL_ADDRESS), as an illegal access kills a GPU
// context: later ops on that device are skipped (host functions are not called), and the
// sync / query / event calls and the calls needing the current context on that device
// return it for the rest of the process.
//
// Locks. The queue mutex guards every stream's queue and counts, the handle maps, events
// and pinned ranges. It is never held across an op, a host function, a sleep or a registry
// lock acquisition: ops run with no queue lock (a copy takes the registry lock shared
// itself, as the synchronous copies do). Everything here is allocated once and never
// destroyed, so detached workers still running at process exit touch no destroyed object.
#pragma once

#include "host/host_internal.hpp"

#include <cxxabi.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <new>
#include <utility>
#include <vector>

namespace cuvmm {
namespace host {

struct HostStream;
using StreamRef = std::shared_ptr<HostStream>;

// One queued operation. `run` executes it on the worker with no lock held; `skip_on_fault`
// ops (copies, memset, host functions) are not run once the device's sticky error is set.
struct Op {
    std::function<void()> run;
    std::vector<std::pair<StreamRef, uint64_t>> deps;  // (stream, completed count needed)
    bool skip_on_fault = true;
};

struct HostStream {
    enum class Kind { created, legacy, per_thread };
    Kind kind = Kind::created;
    int device = 0;
    unsigned flags = 0;       // CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING
    int priority = 0;         // clamped to [kGreatestPriority, kLeastPriority]; not used to schedule
    uintptr_t handle = 0;     // public value (created streams); 0 for legacy / per-thread
    // Guarded by the queue mutex:
    std::deque<Op> queue;     // ops not yet started, in order
    uint64_t submitted = 0;   // ops ever queued
    uint64_t completed = 0;   // ops finished (run, skipped or a no-op)
    bool destroyed = false;   // handle gone; the worker drains the queue and exits
    bool worker = false;      // a worker thread serves this stream
    bool inline_running = false;  // an op runs on its caller's thread now (run_inline)
    // Waited on with the queue mutex. `work`: only this stream's worker waits (queue not
    // empty, or destroyed); notified by submit and destroy. `done`: whoever waits for this
    // stream's completed count (synchronize, an event, another stream's op depending on it);
    // notified by this stream's worker when an op completes. So an op wakes its own worker and
    // the waiters on its own stream, never every worker.
    std::condition_variable work;
    std::condition_variable done;

    bool blocking() const { return flags == CU_STREAM_DEFAULT; }
};

constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;
constexpr uintptr_t kFirstEvent = 0x5e000000;

// One event (events.cpp). The last record is (stream, seq): complete when the stream's
// completed count reaches seq. A record op stamps `time_ns` when it runs, for its own
// generation only (a re-record before the old op ran must not be timed by the old op).
struct HostEvent {
    int device = 0;
    unsigned flags = 0;
    // Guarded by the queue mutex:
    StreamRef stream;         // null: never recorded (empty set of work)
    uint64_t seq = 0;
    uint64_t generation = 0;  // records so far
    long long time_ns = 0;
};

// One page-locked range (pinned.cpp): from cuMemHostAlloc (`allocated`) or registered.
struct PinnedRange {
    size_t size = 0;
    bool allocated = false;
    long pending = 0;         // queued ops reading or writing it; free/unregister wait for 0
};

// The stream registry (never destroyed). All members guarded by `mutex`.
struct Queues {
    std::mutex mutex;
    std::condition_variable changed;                        // a pinned range's pending count fell
    std::unordered_map<uintptr_t, StreamRef> streams;       // created streams by handle
    std::array<StreamRef, kMaxDevices> legacy{};            // made on first use
    std::array<std::vector<StreamRef>, kMaxDevices> all{};  // every live stream of a device
    std::unordered_map<uintptr_t, std::shared_ptr<HostEvent>> events;
    std::map<uintptr_t, PinnedRange> pinned;                // base -> range
    uintptr_t next_stream = kFirstStream;
    uintptr_t next_event = kFirstEvent;
};

Queues& queues();

// Per-device sticky error: CUDA_SUCCESS until an op faults.
CUresult sticky_error(int device);
void set_sticky_error(int device, CUresult rc);

// The delay every queued op sleeps before it runs (host_set_stream_delay_micros).
long long stream_delay_micros();

// Resolves a public stream value for the current device `dev`: nullptr / CU_STREAM_LEGACY
// -> the device's legacy stream, CU_STREAM_PER_THREAD -> this thread's default stream,
// else a live created stream (any device). Null when the handle is not a live stream.
// Caller holds the queue mutex.
StreamRef resolve_stream(Queues& q, CUstream s, int dev);
// The same without touching a reference count: the registry's own reference (the device's
// legacy stream, this thread's default stream, the handle map's entry), valid only while the
// queue mutex stays held. Copy it before releasing the mutex when the stream is used after.
const StreamRef* resolve_stream_ref(Queues& q, CUstream s, int dev);

// Queues `op` on `s`, adding the implicit legacy/blocking dependencies, and starts the
// worker if needed. Returns the op's sequence number (complete when s->completed >= it),
// or 0 when no worker thread or memory could be had (nothing queued; callers return
// CUDA_ERROR_OUT_OF_MEMORY). Caller holds the queue mutex.
uint64_t submit(Queues& q, const StreamRef& s, Op op);

// The dependencies an op queued on `s` now would get implicitly (legacy / blocking rule),
// plus s itself: an op that waits for them has "waited for the stream". Queue mutex held.
std::vector<std::pair<StreamRef, uint64_t>> barrier_of(Queues& q, const StreamRef& s);

// Waits (releasing the queue mutex while blocked) until every dependency is satisfied.
void wait_for(std::unique_lock<std::mutex>& lock, const std::vector<std::pair<StreamRef, uint64_t>>& deps);

bool satisfied(const std::vector<std::pair<StreamRef, uint64_t>>& deps);

// True when an op queued on `s` now would run at once and do nothing that takes time: no
// delay is set, `s` has nothing queued or running, and its implicit dependencies (legacy /
// blocking rule, a pending cuStreamWaitEvent) are complete. A record or a wait on such a
// stream is complete at the call, so it needs no op and wakes no worker. Queue mutex held.
bool idle(Queues& q, const StreamRef& s);

// The largest copy or memset run inline by run_inline (async_copies.cpp). Handing an op to
// the stream's worker and waiting for it costs about 20-30 us on a 2-core VM (measured,
// bench/RESULTS-streams.md): 40x a 64 KiB memcpy, half of a 2 MiB one. From 4 MiB up the
// copy itself (>= 100 us) dwarfs the handoff, and a queued copy lets two streams overlap.
constexpr size_t kInlineMaxBytes = size_t(4) << 20;

// An op run inline: on the calling thread, now, instead of by the stream's worker. Only
// copies and memsets (async_copies.cpp), never host functions or waits. begin_inline, when
// `s` is idle (above), takes the op's sequence number and marks `s` as running it; until
// end_inline the stream is busy for everyone: an op another thread submits meanwhile depends
// on it (FIFO), a query, synchronize or event recorded on `s` sees unfinished work, and a
// destroyed `s` stays on its device's list. Returns false, nothing changed, when `s` is not
// idle (the caller queues the op). Both with the queue mutex held; the op itself runs with
// it released.
bool begin_inline(Queues& q, const StreamRef& s);
// `ran` false: the op was given up before touching memory (its arguments or a view failed
// after begin_inline): it completes as an empty op and is not counted by inline_op_count.
void end_inline(Queues& q, const StreamRef& s, bool ran = true);

// Runs `body` as the worker runs an op: an exception becomes the device's sticky error
// (std::bad_alloc -> CUDA_ERROR_OUT_OF_MEMORY, anything else -> CUDA_ERROR_LAUNCH_FAILED);
// forced unwinding (thread cancellation) passes through.
template <class Body>
void run_guarded(int device, Body&& body) {
    try {
        body();
    } catch (abi::__forced_unwind&) {
        throw;
    } catch (const std::bad_alloc&) {
        tl_in_host_function = false;
        set_sticky_error(device, CUDA_ERROR_OUT_OF_MEMORY);
    } catch (...) {
        tl_in_host_function = false;
        set_sticky_error(device, CUDA_ERROR_LAUNCH_FAILED);
    }
}

// Ops run inline so far, in the whole process (tests: the fast path was, or was not, taken).
uint64_t inline_op_count();

// Test seam (native/test/host_stream_test_inline.cpp): `fn(arg)` is called by every inline
// op on its caller's thread, after begin_inline and before the copy, with the registry lock
// held shared and the queue mutex not held, inside run_guarded (an exception it throws is
// the op's). A test holds an op in flight with it. Null (the default): nothing is called.
// Set it while no inline op runs.
void set_inline_test_hook(void (*fn)(void*), void* arg);
void call_inline_test_hook();

// Ends a stream's life as a handle (cuStreamDestroy, context reset, thread exit): the worker,
// if any, drains the queue and exits, taking the stream off the device list; a stream with no
// worker leaves that list now. Queue mutex held.
void mark_destroyed(Queues& q, const StreamRef& s);

// Every live stream of `dev` (for cuCtxSynchronize), as a barrier. Queue mutex held.
std::vector<std::pair<StreamRef, uint64_t>> device_barrier(Queues& q, int dev);

// The common prologue of the stream/event/copy entry points: the current device, or
// INVALID_CONTEXT; the device's sticky error when set. Takes the registry lock shared.
CUresult stream_context(int* dev);

// Resolves `stream` for the calling thread: the special values (nullptr, CU_STREAM_LEGACY,
// CU_STREAM_PER_THREAD) need a current context (INVALID_CONTEXT, or the device's sticky
// error); a created stream does not (its own device counts); anything else
// INVALID_HANDLE. Takes the queue mutex itself.
CUresult lookup_stream(CUstream stream, StreamRef* out);
// lookup_stream that leaves the queue mutex held through `lock` (unlocked on entry): one hold
// for the look-up and the caller's work, and no reference count touched (*out is
// resolve_stream_ref's). Same checks, same codes, same order. On an error the mutex may be
// held or not (the caller just returns).
CUresult lookup_stream_locked(CUstream stream, std::unique_lock<std::mutex>& lock, const StreamRef** out);

// The pinned range containing all of [p, p+n) (and counts one pending use when `use`),
// or false. Queue mutex held.
bool pinned_use(Queues& q, const void* p, size_t n, bool use);
void pinned_release(Queues& q, const void* p);

// The same with one look-up: the range containing all of [p, p+n) with one pending use
// counted, or null; released through that pointer (a range is erased only with no pending
// use, so the map entry outlives the use). Queue mutex held.
PinnedRange* pinned_acquire(Queues& q, const void* p, size_t n);
void pinned_release(Queues& q, PinnedRange* range);

}  // namespace host
}  // namespace cuvmm
