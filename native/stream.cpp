// Streams, events, pinned host memory and the host-function trampoline (stream.hpp).
#include "cuvmm/stream.hpp"
#include "cuvmm/fd_utils.hpp"

#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <unordered_map>

namespace cuvmm {

// ---- streams ---------------------------------------------------------------------------

Stream::Stream(int device, CUstream handle, bool owned) : handle_(handle), device_(device), owned_(owned) {}

Stream::~Stream() {
    if (!owned_) return;
    // Queued work still completes (cuda.h, cuStreamDestroy); the handle is invalid at once.
    TeardownContextScope context(device_);
    CUresult rc = CUVMM_CALL_NOTHROW(cuStreamDestroy, handle_);
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuStreamDestroy", rc, "destroying a stream");
}

std::shared_ptr<const Stream> Stream::create(int device, unsigned int flags, int priority) {
    DeviceContextScope context(device);
    CUstream handle = nullptr;
    CUVMM_CALL(cuStreamCreateWithPriority, Step{"creating a stream"}, &handle, flags, priority);
    try {
        return std::shared_ptr<const Stream>(new Stream(device, handle, true));
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuStreamDestroy, handle);  // boxing failed: nothing may stay behind
        throw;
    }
}

std::shared_ptr<const Stream> Stream::legacy(int device) {
    return std::shared_ptr<const Stream>(new Stream(device, CU_STREAM_LEGACY, false));
}

std::shared_ptr<const Stream> Stream::per_thread(int device) {
    return std::shared_ptr<const Stream>(new Stream(device, CU_STREAM_PER_THREAD, false));
}

void Stream::synchronize(const Step& step) const {
    DeviceContextScope context(device_);
    CUVMM_CALL(cuStreamSynchronize, step, handle_);
}

bool Stream::query(const Step& step) const {
    DeviceContextScope context(device_);
    count_call(Entry::cuStreamQuery);
    CUresult rc = driver().cuStreamQuery(handle_);
    if (rc == CUDA_SUCCESS) return true;
    if (rc == CUDA_ERROR_NOT_READY) return false;
    throw DriverError(rc, "cuStreamQuery", step.describe());
}

// ---- events ----------------------------------------------------------------------------

Event::Event(int device, CUevent handle) : handle_(handle), device_(device) {}

Event::~Event() {
    // A pending record completes first; the driver frees the event then (cuda.h, cuEventDestroy).
    TeardownContextScope context(device_);
    CUresult rc = CUVMM_CALL_NOTHROW(cuEventDestroy, handle_);
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuEventDestroy", rc, "destroying an event");
}

std::shared_ptr<const Event> Event::create(int device, unsigned int flags) {
    DeviceContextScope context(device);
    CUevent handle = nullptr;
    CUVMM_CALL(cuEventCreate, Step{"creating an event"}, &handle, flags);
    try {
        return std::shared_ptr<const Event>(new Event(device, handle));
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuEventDestroy, handle);
        throw;
    }
}

void Event::record(const Stream& stream, const Step& step) const {
    DeviceContextScope context(stream.device());
    CUVMM_CALL(cuEventRecord, step, handle_, stream.handle());
}

void Event::synchronize(const Step& step) const {
    DeviceContextScope context(device_);
    CUVMM_CALL(cuEventSynchronize, step, handle_);
}

bool Event::query(const Step& step) const {
    DeviceContextScope context(device_);
    count_call(Entry::cuEventQuery);
    CUresult rc = driver().cuEventQuery(handle_);
    if (rc == CUDA_SUCCESS) return true;
    if (rc == CUDA_ERROR_NOT_READY) return false;
    throw DriverError(rc, "cuEventQuery", step.describe());
}

void Event::make_wait(const Stream& stream, const Step& step) const {
    DeviceContextScope context(stream.device());
    CUVMM_CALL(cuStreamWaitEvent, step, stream.handle(), handle_, 0u);
}

float Event::elapsed_since(const Event& start, const Step& step) const {
    DeviceContextScope context(device_);
    float ms = 0;
    CUVMM_CALL(cuEventElapsedTime, step, &ms, start.handle(), handle_);
    return ms;
}

// ---- pinned host memory ------------------------------------------------------------------

PinnedHost::PinnedHost(void* address, size_t bytes, bool registered)
    : address_(address), size_(bytes), registered_(registered) {}

PinnedHost::~PinnedHost() {
    // Pinned memory is a context-wide resource; device 0's primary context serves (PORTABLE
    // makes it pinned for every context).
    TeardownContextScope context(0);
    CUresult rc = registered_ ? CUVMM_CALL_NOTHROW(cuMemHostUnregister, address_)
                              : CUVMM_CALL_NOTHROW(cuMemFreeHost, address_);
    if (rc != CUDA_SUCCESS) {
        report_cleanup_failure(registered_ ? "cuMemHostUnregister" : "cuMemFreeHost", rc,
                               registered_ ? "unregistering pinned host memory" : "freeing pinned host memory");
    }
}

std::shared_ptr<const PinnedHost> PinnedHost::allocate(size_t bytes) {
    DeviceContextScope context(0);
    void* p = nullptr;
    CUVMM_CALL(cuMemHostAlloc, Step{"allocating pinned host memory"}, &p, bytes, CU_MEMHOSTALLOC_PORTABLE);
    try {
        return std::shared_ptr<const PinnedHost>(new PinnedHost(p, bytes, false));
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemFreeHost, p);
        throw;
    }
}

std::shared_ptr<const PinnedHost> PinnedHost::register_memory(void* address, size_t bytes) {
    DeviceContextScope context(0);
    CUresult rc = CUVMM_CALL_NOTHROW(cuMemHostRegister, address, bytes, CU_MEMHOSTREGISTER_PORTABLE);
    if (rc != CUDA_SUCCESS) {
        // OPERATING_SYSTEM: the host driver could not read /proc/self/maps, which at the fd
        // limit says why (any other code has another cause).
        throw DriverError(rc, "cuMemHostRegister", Step{"registering host memory"}.describe(),
                          rc == CUDA_ERROR_OPERATING_SYSTEM ? fd_limit_hint() : "");
    }
    try {
        return std::shared_ptr<const PinnedHost>(new PinnedHost(address, bytes, true));
    } catch (...) {
        CUVMM_CALL_NOTHROW(cuMemHostUnregister, address);
        throw;
    }
}

// ---- host functions ------------------------------------------------------------------------

namespace {

// The trampolines' meeting point with the Java dispatcher. Never destroyed (a driver thread
// may still wait in it at exit). Holds only tokens: no Java object, no pointer Java passed.
struct HostCalls {
    std::mutex mutex;
    std::condition_variable posted_cv;  // the dispatcher waits for a token
    std::condition_variable done_cv;    // trampolines wait for their token to be done
    std::deque<long long> posted;
    std::unordered_map<long long, bool> waiting;  // token -> done
};

HostCalls& host_calls() {
    static HostCalls* calls = new HostCalls();
    return *calls;
}

// Runs on the driver's thread. Must not throw (a C function called by the driver) and makes
// no CUDA call (cuda.h forbids it in a host function).
void CUDA_CB trampoline(void* user_data) {
    const long long token = static_cast<long long>(reinterpret_cast<intptr_t>(user_data));
    HostCalls& c = host_calls();
    try {
        std::unique_lock<std::mutex> lock(c.mutex);
        c.waiting[token] = false;
        c.posted.push_back(token);
        c.posted_cv.notify_one();
        c.done_cv.wait(lock, [&] { return c.waiting[token]; });
        c.waiting.erase(token);
    } catch (...) {
        // Out of memory for a queue entry: the Java code cannot run; the stream continues.
        std::fprintf(stderr, "cuvmm: host function %lld could not be dispatched to Java (out of memory)\n", token);
    }
}

}  // namespace

void launch_host_function(const Stream& stream, long long token, const Step& step) {
    DeviceContextScope context(stream.device());
    CUVMM_CALL(cuLaunchHostFunc, step, stream.handle(), &trampoline,
               reinterpret_cast<void*>(static_cast<intptr_t>(token)));
}

long long next_host_function(long long timeout_ms) {
    HostCalls& c = host_calls();
    std::unique_lock<std::mutex> lock(c.mutex);
    if (!c.posted_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms),
                              [&] { return !c.posted.empty(); })) {
        return 0;
    }
    long long token = c.posted.front();
    c.posted.pop_front();
    return token;
}

void host_function_done(long long token) {
    HostCalls& c = host_calls();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.waiting.find(token);
    if (it == c.waiting.end()) return;
    it->second = true;
    c.done_cv.notify_all();
}

long long host_functions_pending() {
    HostCalls& c = host_calls();
    std::lock_guard<std::mutex> lock(c.mutex);
    return static_cast<long long>(c.waiting.size());
}

}  // namespace cuvmm
