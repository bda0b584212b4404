// The host library's one piece of state: the host driver's table (and its pointer
// queries), installed once with the configuration read from the environment. The exported
// C functions (exports.cpp, proc_address.cpp) only forward to it.
#pragma once

#include "cuvmm/driver_table.hpp"
#include "cuvmm/host_pointers.hpp"

namespace cuvmm {
namespace hostcuda {

struct Library {
    DriverTable table;           // install_host_driver: every member set
    HostPointerEntries pointers;  // install_host_pointer_entries
    std::string config_error;     // empty, or why the environment's configuration was refused
    bool ready = false;           // false: setting up ran out of memory; the tables may be
                                  // unfilled and must not be called (exports.cpp answers)
};

// Installed on first use (any exported call), never destroyed. Reads CUVMM_HOST_DEVICES
// (1..8, default 1), CUVMM_HOST_GRANULARITY (bytes, a power of two from the page size to
// 2^62, default 2 MiB) and CUVMM_HOST_STREAM_DELAY_MICROS (0..2^63-1, default 0) once, digits
// only; a value that is not in range leaves the defaults installed and sets config_error
// (cuInit then refuses with CUDA_ERROR_INVALID_VALUE). Never throws: running out of memory
// while setting up leaves ready false (cuInit then answers CUDA_ERROR_OUT_OF_MEMORY, every
// other export CUDA_ERROR_NOT_INITIALIZED).
const Library& library();

}  // namespace hostcuda
}  // namespace cuvmm
