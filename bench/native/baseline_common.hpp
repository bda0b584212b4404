// What the C++ baselines share: error exits, and the driver selection from the same
// CUVMM_* environment variables the Java side reads, so both sides run on the same driver.
// Header-only; each baseline sets `program` for its messages.
#pragma once

#include "cuvmm/driver.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cuvmm_bench {

// The name messages start with ("cuvmm-baseline: ...").
inline const char* program = "cuvmm-baseline";

[[noreturn]] inline void die(const std::string& what) {
    std::fprintf(stderr, "%s: %s\n", program, what.c_str());
    std::exit(2);
}

[[noreturn]] inline void fail_call(const char* call, CUresult rc, const char* op) {
    const char* name = nullptr;
    if (cuvmm::driver().cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr) name = "?";
    die(std::string(op) + ": " + call + " returned " + name + " (" + std::to_string(static_cast<int>(rc)) + ")");
}

inline const char* setting(const char* variable) {
    const char* v = std::getenv(variable);
    return v != nullptr && *v != '\0' ? v : nullptr;
}

inline long long integer_setting(const char* variable, long long fallback) {
    const char* v = setting(variable);
    if (v == nullptr) return fallback;
    char* end = nullptr;
    long long x = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0') die(std::string(variable) + ": " + v + " (expected: a whole number)");
    return x;
}

inline cuvmm::DriverSelection selection_from_environment() {
    cuvmm::DriverSelection s;
    std::string mode = setting("CUVMM_DRIVER") ? setting("CUVMM_DRIVER") : "auto";
    if (mode == "auto") s.mode = cuvmm::DriverMode::automatic;
    else if (mode == "cuda") s.mode = cuvmm::DriverMode::cuda;
    else if (mode == "host") s.mode = cuvmm::DriverMode::host;
    else die("CUVMM_DRIVER: " + mode + " (expected: auto, cuda or host)");
    long long devices = integer_setting("CUVMM_HOST_DEVICES", 1);
    if (devices < 1 || devices > 8) die("CUVMM_HOST_DEVICES: " + std::to_string(devices) + " (expected: 1 to 8)");
    long long gran = integer_setting("CUVMM_HOST_GRANULARITY", 2LL << 20);
    if (gran < 4096 || (gran & (gran - 1)) != 0) {
        die("CUVMM_HOST_GRANULARITY: " + std::to_string(gran) + " (expected: a power of two >= 4096)");
    }
    s.host.device_count = static_cast<int>(devices);
    s.host.granularity = static_cast<size_t>(gran);
    if (const char* lib = setting("CUVMM_CUDA_LIBRARY")) s.cuda_library = lib;
    return s;
}

// Selects the driver from the environment (selection_from_environment), exiting with the
// driver's reason when it cannot, and prints the "driver kind=... version=... reason=..." line
// the Java runners read.
inline cuvmm::DriverKind select_and_report_driver() {
    cuvmm::DriverKind kind;
    try {
        kind = cuvmm::select_driver(selection_from_environment());
    } catch (const cuvmm::DriverError& err) {
        die(err.what());
    }
    std::printf("driver kind=%s version=%d reason=%s\n", kind == cuvmm::DriverKind::cuda ? "cuda" : "host",
                cuvmm::driver_version(), cuvmm::driver_reason().c_str());
    return kind;
}

inline long parse_count(int argc, char** argv, int& i, long min) {
    if (i + 1 >= argc) die(std::string(argv[i]) + " needs a value");
    char* end = nullptr;
    long v = std::strtol(argv[i + 1], &end, 10);
    if (end == argv[i + 1] || *end != '\0' || v < min) {
        die(std::string(argv[i]) + ": " + argv[i + 1] + " (expected: a whole number >= " + std::to_string(min) + ")");
    }
    ++i;
    return v;
}

}  // namespace cuvmm_bench
