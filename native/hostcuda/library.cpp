// The host library's configuration (environment variables only: there is no JVM to ask)
// and its table, installed once.
#include "hostcuda/library.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <new>

namespace cuvmm {
namespace hostcuda {
namespace {

// Reads `name` as a decimal integer in [lo, hi] into *out (unchanged when unset or empty).
// Digits only: no sign, no space, no other base (" 3", "+3", "3 ", "0x10" are refused).
// Returns "" or the sentence naming the variable, its value and what it expects.
std::string read_env(const char* name, long long lo, long long hi, const std::string& expected, long long* out) {
    const char* raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') return "";
    long long v = 0;
    bool ok = true;
    for (const char* c = raw; *c != '\0' && ok; ++c) {
        if (*c < '0' || *c > '9' || v > (LLONG_MAX - (*c - '0')) / 10) {
            ok = false;  // not a digit, or past LLONG_MAX (and so past every bound)
        } else {
            v = v * 10 + (*c - '0');
        }
    }
    if (!ok || v < lo || v > hi) return std::string(name) + ": \"" + raw + "\" (expected: " + expected + ")";
    *out = v;
    return "";
}

// The accepted ranges (VMM_DESIGN §5): those of cuvmm's own selection (jni_api.cpp
// select_driver), with granularity's floor the page size as the host driver applies it.
constexpr long long kMaxGranularity = 1LL << 62;  // the largest power of two a long long holds

// Fills *lib; may throw (bad_alloc), caught by build().
void configure(Library* lib) {
    HostDriverConfig config;
    long long devices = config.device_count;
    long long granularity = static_cast<long long>(config.granularity);
    long long delay = config.stream_delay_micros;
    long page = ::sysconf(_SC_PAGESIZE);
    if (page < 4096) page = 4096;
    const std::string granularity_expected = "a power of two from the page size " + std::to_string(page) + " to " +
                                             std::to_string(kMaxGranularity) + ", in bytes, digits only";
    std::string err = read_env("CUVMM_HOST_DEVICES", 1, 8, "an integer from 1 to 8, digits only", &devices);
    if (err.empty()) {
        err = read_env("CUVMM_HOST_GRANULARITY", page, kMaxGranularity, granularity_expected, &granularity);
        if (err.empty() && (granularity & (granularity - 1)) != 0) {
            err = "CUVMM_HOST_GRANULARITY: \"" + std::to_string(granularity) + "\" (expected: " + granularity_expected + ")";
        }
    }
    if (err.empty()) {
        err = read_env("CUVMM_HOST_STREAM_DELAY_MICROS", 0, LLONG_MAX,
                       "microseconds from 0 to " + std::to_string(LLONG_MAX) + ", digits only", &delay);
    }
    if (err.empty()) {
        config.device_count = static_cast<int>(devices);
        config.granularity = static_cast<size_t>(granularity);
        config.stream_delay_micros = delay;
    } else {
        config = HostDriverConfig{};
        lib->config_error = err;
    }
    install_host_driver(lib->table, config);
    install_host_pointer_entries(lib->pointers);
    lib->ready = true;
}

// Never throws: the Library lives in static storage (no allocation, never destroyed: calls
// may come during exit), and a bad_alloc while configuring leaves ready false, which the
// exports answer (exports.cpp) instead of an exception crossing extern "C".
Library* build() noexcept {
    alignas(Library) static unsigned char storage[sizeof(Library)];
    auto* lib = new (storage) Library();  // Library's construction allocates nothing
    try {
        configure(lib);
    } catch (...) {
        lib->ready = false;
    }
    return lib;
}

}  // namespace

const Library& library() {
    static std::once_flag once;
    static Library* lib = nullptr;
    std::call_once(once, [] { lib = build(); });
    return *lib;
}

}  // namespace hostcuda
}  // namespace cuvmm
