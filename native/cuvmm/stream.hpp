// Streams, events, pinned host memory and host functions: the driver objects of stream-ordered
// work, beside the VMM object model (vmm.hpp).
//
// Each is a small immutable box held by std::shared_ptr<const T>; its destructor makes exactly
// one undo call (cuStreamDestroy, cuEventDestroy, cuMemFreeHost or cuMemHostUnregister) inside a
// TeardownContextScope of its device, and never throws (a failed undo is reported through
// report_cleanup_failure). The legacy and per-thread default streams are boxed too, so that
// every API takes a Stream, but they are borrowed: their box makes no undo call.
//
// What the driver guarantees on teardown (cuda.h), relied on here:
//  - cuStreamDestroy with work still queued returns at once; the work completes, then the
//    driver frees the stream's resources. So a Stream box may drop while its work runs.
//  - cuEventDestroy of an event whose record has not completed returns at once; the
//    resources go when the record completes.
//  - cuMemFreeHost / cuMemHostUnregister do not wait for queued copies that use the memory:
//    the caller (Java's PinnedHostBuffer) waits for its recorded stream work first.
//
// Failure contract: factories and operations throw DriverError naming the call and the step;
// a factory that throws leaves nothing behind.
#pragma once

#include "cuvmm/driver.hpp"

#include <cstdint>
#include <memory>

namespace cuvmm {

// One stream of one device. Owned streams come from cuStreamCreateWithPriority; the two
// defaults (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) are borrowed handles of the driver.
class Stream {
public:
    // cuStreamCreateWithPriority(flags, priority) with `device`'s primary context current.
    // `flags` is CU_STREAM_DEFAULT (blocking: orders with the legacy stream) or
    // CU_STREAM_NON_BLOCKING; the driver clamps a priority outside its range.
    static std::shared_ptr<const Stream> create(int device, unsigned int flags, int priority);
    // The legacy default stream (CU_STREAM_LEGACY) of `device`'s primary context. No driver call.
    static std::shared_ptr<const Stream> legacy(int device);
    // The per-thread default stream (CU_STREAM_PER_THREAD): whichever thread makes a call
    // with it uses its own stream, as in CUDA. No driver call.
    static std::shared_ptr<const Stream> per_thread(int device);

    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    CUstream handle() const { return handle_; }
    int device() const { return device_; }
    bool owned() const { return owned_; }

    // cuStreamSynchronize: returns when every op queued so far has completed.
    void synchronize(const Step& step) const;
    // cuStreamQuery: true when every op queued so far has completed (CUDA_ERROR_NOT_READY
    // is false, not an error).
    bool query(const Step& step) const;

private:
    Stream(int device, CUstream handle, bool owned);
    const CUstream handle_;
    const int device_;
    const bool owned_;
};
using StreamRef = std::shared_ptr<const Stream>;

// One event (cuEventCreate). The destructor calls cuEventDestroy once.
class Event {
public:
    // flags: CU_EVENT_DEFAULT, CU_EVENT_DISABLE_TIMING, CU_EVENT_BLOCKING_SYNC (or-ed).
    static std::shared_ptr<const Event> create(int device, unsigned int flags);

    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    CUevent handle() const { return handle_; }
    int device() const { return device_; }

    // cuEventRecord on `stream` (which must belong to the same device's context).
    void record(const Stream& stream, const Step& step) const;
    // cuEventSynchronize: returns when the last record has completed (at once if never recorded).
    void synchronize(const Step& step) const;
    // cuEventQuery: true when the last record completed or there was none.
    bool query(const Step& step) const;
    // cuStreamWaitEvent(stream, this, 0): later work on `stream` waits for this event's
    // last record as it is now.
    void make_wait(const Stream& stream, const Step& step) const;
    // cuEventElapsedTime(start, this) in milliseconds.
    float elapsed_since(const Event& start, const Step& step) const;

private:
    Event(int device, CUevent handle);
    const CUevent handle_;
    const int device_;
};
using EventRef = std::shared_ptr<const Event>;

// Page-locked host memory: either allocated by the driver (cuMemHostAlloc; the box frees it
// with cuMemFreeHost) or the caller's memory registered with the driver (cuMemHostRegister;
// the box unregisters it and never frees it: the caller keeps the memory alive longer than
// the box).
class PinnedHost {
public:
    static std::shared_ptr<const PinnedHost> allocate(size_t bytes);
    static std::shared_ptr<const PinnedHost> register_memory(void* address, size_t bytes);

    ~PinnedHost();
    PinnedHost(const PinnedHost&) = delete;
    PinnedHost& operator=(const PinnedHost&) = delete;

    void* address() const { return address_; }
    size_t size() const { return size_; }
    bool registered() const { return registered_; }

private:
    PinnedHost(void* address, size_t bytes, bool registered);
    void* const address_;
    const size_t size_;
    const bool registered_;
};
using PinnedHostRef = std::shared_ptr<const PinnedHost>;

// ---- host functions -----------------------------------------------------------------
//
// cuLaunchHostFunc runs a C function on a driver thread in stream order, and the stream
// waits for it. cuvmm's host functions are Java code, so the function launched is one native
// trampoline that does not enter the JVM: it posts the call's token to a queue and blocks
// until Java says the call is done. A Java dispatcher thread takes tokens
// (next_host_function) and runs each Runnable on a thread of its own, then reports it done
// (host_function_done). Why not a JavaCPP FunctionPointer called by the driver thread:
//  - thread attach: the driver's threads (CUDA's callback thread, the host driver's stream
//    workers) would be attached to the JVM by JavaCPP on first call and stay attached;
//  - exceptions: a Java exception would come back through the generated callback as a C++
//    exception or a printed stack trace on a driver thread, where nothing can report it to
//    the stream's owner; here Java catches it on a Java thread and keeps it for the stream;
//  - instances: JavaCPP callbacks are static thunks with a fixed number of instances per
//    class, so one per launch is impossible;
//  - deadlock: a host function that waits for another stream's host function (a latch)
//    must not wait behind it: the dispatcher runs each on its own Java thread, so two
//    streams' host functions run at the same time, as on the driver.
// A host function's Java code must not wait for its own stream (the stream waits for it);
// that rule is CUDA's.

// Queues the trampoline with `token` on `stream` (cuLaunchHostFunc). Throws DriverError.
void launch_host_function(const Stream& stream, long long token, const Step& step);
// The next token a trampoline posted, waiting at most `timeout_ms` (0: none arrived).
long long next_host_function(long long timeout_ms);
// Ends the trampoline call of `token` (its stream continues). Unknown tokens are ignored.
void host_function_done(long long token);
// Trampolines waiting now (posted or running in Java), for tests.
long long host_functions_pending();

}  // namespace cuvmm
