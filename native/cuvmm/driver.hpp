// The active driver: selection (auto / cuda / host), the checked call wrapper every
// driver call goes through, per-entry-point call counters, and device contexts.
//
// Ownership: the selected DriverTable is a process-wide singleton that lives until
// exit; the cuda driver's dlopen handle is never closed once selected (code in other
// libraries may hold its function pointers).
#pragma once

#include "cuvmm/driver_table.hpp"

#include <optional>
#include <stdexcept>
#include <string>

namespace cuvmm {

enum class DriverKind : int { none = 0, cuda = 1, host = 2 };
enum class DriverMode : int { automatic = 0, cuda = 1, host = 2 };

struct DriverSelection {
    DriverMode mode = DriverMode::automatic;
    HostDriverConfig host;         // used when the host driver is installed
    std::string cuda_library;      // empty: "libcuda.so.1"
};

// Where in an operation a driver call happened, formatted only when it failed:
// Step{"mapping chunk", 2, 3} reads "mapping chunk 2 of 3".
struct Step {
    const char* action;
    int index = 0;   // 1-based; 0 means "no chunk number"
    int total = 0;

    std::string describe() const;
};

// A driver call that returned something other than CUDA_SUCCESS, or a rule of ours that
// refused before the driver was called (code is then the CUresult the driver would give).
class DriverError : public std::runtime_error {
public:
    DriverError(CUresult code, std::string call, std::string step, const std::string& detail = "");

    CUresult code() const { return code_; }
    const std::string& call() const { return call_; }
    const std::string& step() const { return step_; }

private:
    CUresult code_;
    std::string call_;
    std::string step_;
};

// Installs a driver according to `selection`. The first successful selection wins for
// the life of the process; later calls return the kind already installed unless they
// ask for a different forced kind, which throws. Forcing cuda when it cannot load throws
// a DriverError (CUDA_ERROR_NO_DEVICE, whatever the cause) whose detail is the reason.
DriverKind select_driver(const DriverSelection& selection);

DriverKind driver_kind();             // none before select_driver
const std::string& driver_reason();   // why this driver runs (or why cuda did not load)
const DriverTable& driver();          // the installed table; throws if none
int driver_version();                 // cuDriverGetVersion of the installed driver
bool driver_is_host_library();        // the cuda driver runs, and it is cuvmm's host library (no GPU)

// Tries to fill `table` from libcuda. On failure returns false and says why in `reason`
// (library absent, cuGetProcAddress absent, symbol absent, cuInit error, zero devices).
// *host_library (when non-null) is set to whether the library is cuvmm's host library
// (it exports cuvmmHostLibraryDescription; the reason then says "cuda driver API over the
// host library (no GPU)").
bool load_cuda_driver(DriverTable& table, const std::string& library, std::string& reason,
                      bool* host_library = nullptr);

// Call counters, one per entry point, counted for whichever driver is installed.
long long call_count(Entry entry);
void reset_call_counts();
void count_call(Entry entry);

// Cleanup failures (a deleter's undo call that did not succeed): counted and written to
// stderr, never thrown.
void report_cleanup_failure(const char* call, CUresult code, const char* what);
long long cleanup_failure_count();

// Makes `device`'s primary context current on the calling thread for the scope's life
// (the primary context is retained once per device for the life of the process), and puts
// back whatever context the caller had (a JCuda or presets user's own) when it ends.
// Construction throws DriverError; the destructor never throws (a failed restore is reported).
class DeviceContextScope {
public:
    explicit DeviceContextScope(int device);
    ~DeviceContextScope();
    DeviceContextScope(const DeviceContextScope&) = delete;
    DeviceContextScope& operator=(const DeviceContextScope&) = delete;

private:
    CUcontext previous_ = nullptr;
    bool changed_ = false;
};

// The context for a teardown call (cuMemUnmap, cuMemRelease, cuMemAddressFree): the undo
// runs wherever the last reference drops, e.g. on the cuvmm-cleaner thread or a fresh
// thread that never had a context, and some drivers fail those calls without one (audit
// A3). Makes `device`'s primary context current like DeviceContextScope, but never throws:
// when that fails it reports a cleanup failure and the undo call runs anyway.
class TeardownContextScope {
public:
    explicit TeardownContextScope(int device) noexcept;
    TeardownContextScope(const TeardownContextScope&) = delete;
    TeardownContextScope& operator=(const TeardownContextScope&) = delete;

private:
    std::optional<DeviceContextScope> scope_;
};

}  // namespace cuvmm

// Calls entry point `name` of the installed driver, counts it, and throws DriverError
// naming the call and `step` when it does not return CUDA_SUCCESS.
#define CUVMM_CALL(name, step, ...)                                                     \
    do {                                                                                \
        ::cuvmm::count_call(::cuvmm::Entry::name);                                      \
        CUresult cuvmm_rc_ = ::cuvmm::driver().name(__VA_ARGS__);                       \
        if (cuvmm_rc_ != CUDA_SUCCESS) throw ::cuvmm::DriverError(cuvmm_rc_, #name, (step).describe()); \
    } while (0)

// The same call for cleanup paths: counted, never throws, returns the CUresult.
#define CUVMM_CALL_NOTHROW(name, ...) \
    (::cuvmm::count_call(::cuvmm::Entry::name), ::cuvmm::driver().name(__VA_ARGS__))
