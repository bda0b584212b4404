// The host library's configuration (environment variables only: there is no JVM to ask)
// and its table, installed once.
#include "hostcuda/library.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace cuvmm {
namespace hostcuda {
namespace {

// Reads `name` as a decimal integer in [lo, hi] into *out (unchanged when unset). Returns
// "" or the sentence naming the variable, its value and what it expects.
std::string read_env(const char* name, long long lo, long long hi, const char* expected, long long* out) {
    const char* raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') return "";
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(raw, &end, 10);
    if (errno != 0 || end == raw || *end != '\0' || v < lo || v > hi) {
        return std::string(name) + ": " + raw + " (expected: " + expected + ")";
    }
    *out = v;
    return "";
}

Library* build() {
    auto* lib = new Library();  // process lifetime, like the host driver's state
    HostDriverConfig config;
    long long devices = config.device_count;
    long long granularity = static_cast<long long>(config.granularity);
    long long delay = config.stream_delay_micros;
    std::string err = read_env("CUVMM_HOST_DEVICES", 1, 8, "an integer from 1 to 8", &devices);
    if (err.empty()) {
        err = read_env("CUVMM_HOST_GRANULARITY", 1, 1LL << 40, "a power of two, at least the page size, in bytes",
                       &granularity);
        long page = ::sysconf(_SC_PAGESIZE);
        if (err.empty() && ((granularity & (granularity - 1)) != 0 || granularity < page)) {
            err = "CUVMM_HOST_GRANULARITY: " + std::to_string(granularity) +
                  " (expected: a power of two, at least the page size " + std::to_string(page) + ", in bytes)";
        }
    }
    if (err.empty()) {
        err = read_env("CUVMM_HOST_STREAM_DELAY_MICROS", 0, 60LL * 1000 * 1000, "0 to 60000000 microseconds", &delay);
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
