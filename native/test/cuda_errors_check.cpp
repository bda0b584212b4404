// The CUresult names cuvmm reports (native/cuda_errors.cpp, for both drivers) against the
// CUresult enum of a real cuda.h: run-host-driver-test.sh extracts "NAME VALUE" lines from
// the header's `typedef enum cudaError_enum` and feeds them on stdin. Every code of the
// header must be named exactly as its enumerator, and cuvmm must name no code the header
// does not define (a copy that fell behind the header, a typo or a wrong value fails here;
// cuda_api_check.cpp only proves our enumerator values). Exit status 0 when all match.
//
// argv[1]: the header's CUDA_VERSION. A header newer than the one cuda_api.hpp copies
// (CUVMM_CUDA_API_VERSION) may define codes cuvmm does not know yet: those are listed as
// notes, not failures, so a newer toolkit on a build machine does not break the build (cuvmm
// reports such a code by number), and codes cuvmm names that such a header dropped are notes
// too. A code both name differently fails whatever the version.
#include "cuvmm/cuda_api.hpp"
#include "cuvmm/cuda_errors.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

int main(int argc, char** argv) {
    long header_version = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 0;
    if (header_version <= 0) {
        std::printf("FAIL cuda_errors_check: no CUDA_VERSION given (argv[1]: the header's, e.g. 13000)\n");
        return 1;
    }
    bool newer_header = header_version > CUVMM_CUDA_API_VERSION;
    char name[128];
    long value = 0;
    int checked = 0, failed = 0, unknown_here = 0;
    std::set<long> header_codes;
    while (std::scanf("%127s %ld", name, &value) == 2) {
        header_codes.insert(value);
        ++checked;
        const char* ours = cuvmm::result_name(static_cast<CUresult>(value));
        if (ours == nullptr && newer_header) {
            ++unknown_here;
            std::printf("note cuda_errors_check: cuda.h %ld (newer than %d) defines %ld %s, which cuvmm does not "
                        "name yet\n", header_version, CUVMM_CUDA_API_VERSION, value, name);
            continue;
        }
        if (ours == nullptr || std::strcmp(ours, name) != 0) {
            ++failed;
            std::printf("FAIL cuda_errors_check: cuda.h names %ld %s, cuvmm names it %s\n", value, name,
                        ours ? ours : "(nothing)");
        }
        if (cuvmm::result_description(static_cast<CUresult>(value)) == nullptr) {
            ++failed;
            std::printf("FAIL cuda_errors_check: no description for %s\n", name);
        }
    }
    if (checked < 50) {  // CUDA 13.0's enum has 101 codes: the extraction itself failed
        std::printf("FAIL cuda_errors_check: only %d codes read from cuda.h\n", checked);
        return 1;
    }
    // No code beyond the header's. CUresult's values lie in 0..999 (CUDA_ERROR_UNKNOWN), so
    // its value range is 0..1023: a cast beyond that would be undefined.
    for (long v = 0; v < 1024; ++v) {
        if (header_codes.count(v) != 0) continue;
        if (const char* ours = cuvmm::result_name(static_cast<CUresult>(v))) {
            if (newer_header) {
                // A newer toolkit may have dropped a deprecated code (CUDA_ERROR_PROFILER_*):
                // cuvmm still naming it harms nothing (a review).
                std::printf("note cuda_errors_check: cuvmm names %ld %s, which this newer cuda.h does not define\n", v,
                            ours);
                continue;
            }
            ++failed;
            std::printf("FAIL cuda_errors_check: cuvmm names %ld %s, which cuda.h does not define\n", v, ours);
        }
    }
    std::printf("cuda_errors_check: %d cuda.h codes (CUDA_VERSION %ld), %d failed, %d not named by cuvmm yet\n",
                checked, header_version, failed, unknown_here);
    return failed == 0 ? 0 : 1;
}
