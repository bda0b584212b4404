// Driver selection, call counting and the checked-call error type.
#include "cuvmm/driver.hpp"

#include "cuvmm/cuda_errors.hpp"

#include <array>
#include <cstdio>
#include <mutex>

namespace cuvmm {
namespace {

// Installed once under g_select_mutex, then read without locking: g_kind is the
// publication flag (release store after the table is complete, acquire loads).
std::mutex g_select_mutex;
DriverTable g_table;
std::atomic<int> g_kind{static_cast<int>(DriverKind::none)};
std::string g_reason;
int g_version = 0;
bool g_host_library = false;  // the cuda driver installed is cuvmm's host library

std::array<std::atomic<long long>, kEntryCount> g_calls{};
std::atomic<long long> g_cleanup_failures{0};

// Primary contexts, retained lazily, one per device ordinal we may see (the host driver
// has at most 8 devices; 64 covers any real machine).
constexpr int kMaxDevices = 64;
std::mutex g_ctx_mutex;
std::array<std::atomic<CUcontext>, kMaxDevices> g_contexts{};

const char* const kEntryNames[] = {
#define CUVMM_ENTRY_NAME(name, version, params) #name,
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_ENTRY_NAME)
#undef CUVMM_ENTRY_NAME
};

std::string compose_message(CUresult code, const std::string& call, const std::string& step,
                            const std::string& detail) {
    std::string msg = call + " failed";
    if (!step.empty()) msg += " while " + step;
    msg += ": " + describe_result(code);
    if (const char* d = result_description(code)) msg += " (" + std::string(d) + ")";
    if (!detail.empty()) msg += "; " + detail;
    return msg;
}

// Throws DriverError when the table cannot say its version (nothing is installed then):
// a version 0 would pass for "no driver" later.
void install(const DriverTable& table, DriverKind kind, std::string reason) {
    int version = 0;
    CUresult rc = table.cuDriverGetVersion(&version);
    if (rc != CUDA_SUCCESS) {
        throw DriverError(rc, "cuDriverGetVersion", "reading the driver version",
                          "the driver was loaded (" + reason + ") but cannot say its version");
    }
    g_table = table;
    g_reason = std::move(reason);
    g_version = version;
    g_kind.store(static_cast<int>(kind), std::memory_order_release);
}

}  // namespace

const char* entry_name(int index) {
    return index >= 0 && index < kEntryCount ? kEntryNames[index] : nullptr;
}

std::string Step::describe() const {
    std::string s = action ? action : "";
    if (index > 0) {
        s += " " + std::to_string(index);
        if (total > 0) s += " of " + std::to_string(total);
    }
    return s;
}

DriverError::DriverError(CUresult code, std::string call, std::string step, const std::string& detail)
    : std::runtime_error(compose_message(code, call, step, detail)),
      code_(code), call_(std::move(call)), step_(std::move(step)) {}

DriverKind select_driver(const DriverSelection& selection) {
    std::lock_guard<std::mutex> lock(g_select_mutex);
    auto current = static_cast<DriverKind>(g_kind.load(std::memory_order_acquire));
    if (current != DriverKind::none) {
        bool conflict = (selection.mode == DriverMode::cuda && current != DriverKind::cuda) ||
                        (selection.mode == DriverMode::host && current != DriverKind::host);
        if (conflict) {
            throw DriverError(CUDA_ERROR_INVALID_VALUE, "select_driver", "choosing the driver",
                              std::string("the ") + (current == DriverKind::cuda ? "cuda" : "host") +
                                  " driver is already in use in this process; choose the driver "
                                  "before the first allocation (system property cuvmm.driver or "
                                  "environment variable CUVMM_DRIVER)");
        }
        return current;
    }
    if (selection.mode == DriverMode::host) {
        DriverTable t;
        install_host_driver(t, selection.host);
        t.cuInit(0);
        install(t, DriverKind::host, "host driver forced (cuvmm.driver=host or CUVMM_DRIVER=host)");
        return DriverKind::host;
    }
    DriverTable t;
    std::string why;
    bool host_library = false;
    std::string lib = selection.cuda_library.empty() ? "libcuda.so.1" : selection.cuda_library;
    if (load_cuda_driver(t, lib, why, &host_library)) {
        g_host_library = host_library;  // before install's release store publishes it
        install(t, DriverKind::cuda,
                selection.mode == DriverMode::cuda ? "cuda driver forced; " + why : "auto: " + why);
        return DriverKind::cuda;
    }
    if (selection.mode == DriverMode::cuda) {
        throw DriverError(CUDA_ERROR_NO_DEVICE, "select_driver", "loading the cuda driver",
                          why + "; run without cuvmm.driver=cuda to fall back to the host driver");
    }
    DriverTable h;
    install_host_driver(h, selection.host);
    h.cuInit(0);
    install(h, DriverKind::host, "auto: cuda unavailable (" + why + "), using the host driver");
    return DriverKind::host;
}

bool driver_is_host_library() { return driver_kind() == DriverKind::cuda && g_host_library; }

DriverKind driver_kind() { return static_cast<DriverKind>(g_kind.load(std::memory_order_acquire)); }

const std::string& driver_reason() {
    static const std::string none = "no driver selected yet";
    return driver_kind() == DriverKind::none ? none : g_reason;
}

const DriverTable& driver() {
    if (driver_kind() == DriverKind::none) {
        throw DriverError(CUDA_ERROR_NOT_INITIALIZED, "driver", "looking up the driver table",
                          "no driver selected; call select_driver first");
    }
    return g_table;
}

int driver_version() { return driver_kind() == DriverKind::none ? 0 : g_version; }

long long call_count(Entry entry) {
    int i = static_cast<int>(entry);
    return i >= 0 && i < kEntryCount ? g_calls[i].load(std::memory_order_relaxed) : 0;
}

void reset_call_counts() {
    for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
}

void count_call(Entry entry) { g_calls[static_cast<int>(entry)].fetch_add(1, std::memory_order_relaxed); }

void report_cleanup_failure(const char* call, CUresult code, const char* what) {
    g_cleanup_failures.fetch_add(1, std::memory_order_relaxed);
    std::fprintf(stderr, "cuvmm: cleanup %s failed while %s: %s\n", call, what, describe_result(code).c_str());
}

long long cleanup_failure_count() { return g_cleanup_failures.load(std::memory_order_relaxed); }

DeviceContextScope::DeviceContextScope(int device) {
    if (device < 0 || device >= kMaxDevices) {
        throw DriverError(CUDA_ERROR_INVALID_DEVICE, "cuDevicePrimaryCtxRetain", "making the device current",
                          "device ordinal " + std::to_string(device) + " is out of range");
    }
    CUcontext ctx = g_contexts[device].load(std::memory_order_acquire);
    if (ctx == nullptr) {
        std::lock_guard<std::mutex> lock(g_ctx_mutex);
        ctx = g_contexts[device].load(std::memory_order_acquire);
        if (ctx == nullptr) {
            CUdevice dev = 0;
            CUVMM_CALL(cuDeviceGet, Step{"looking up the device"}, &dev, device);
            CUVMM_CALL(cuDevicePrimaryCtxRetain, Step{"retaining the primary context"}, &ctx, dev);
            g_contexts[device].store(ctx, std::memory_order_release);
        }
    }
    // Another library on this thread may have changed the current context, so check
    // rather than caching per thread; both calls are cheap driver-side TLS accesses.
    CUVMM_CALL(cuCtxGetCurrent, Step{"reading the current context"}, &previous_);
    if (previous_ != ctx) {
        CUVMM_CALL(cuCtxSetCurrent, Step{"making the device current"}, ctx);
        // Only a context someone else set is put back; leaving ours current when there was
        // none saves a pair of calls on the next operation.
        changed_ = previous_ != nullptr;
    }
}

DeviceContextScope::~DeviceContextScope() {
    if (!changed_) return;
    CUresult rc = CUVMM_CALL_NOTHROW(cuCtxSetCurrent, previous_);
    if (rc != CUDA_SUCCESS) report_cleanup_failure("cuCtxSetCurrent", rc, "restoring the caller's context");
}

TeardownContextScope::TeardownContextScope(int device) noexcept {
    try {
        scope_.emplace(device);
    } catch (const DriverError& e) {
        report_cleanup_failure(e.call().c_str(), e.code(), "making the device current for a teardown");
    } catch (...) {
        report_cleanup_failure("cuCtxSetCurrent", CUDA_ERROR_UNKNOWN, "making the device current for a teardown");
    }
}

}  // namespace cuvmm
