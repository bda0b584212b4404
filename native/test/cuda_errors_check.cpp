// The CUresult names cuvmm reports (native/cuda_errors.cpp, for both drivers) against the
// CUresult enum of a real cuda.h: run-host-driver-test.sh extracts "NAME VALUE" lines from
// the header's `typedef enum cudaError_enum` and feeds them on stdin. Every code of the
// header must be named exactly as its enumerator, and cuvmm must name no code the header
// does not define (a copy that fell behind the header, a typo or a wrong value fails here;
// cuda_api_check.cpp only proves our enumerator values). Exit status 0 when all match.
#include "cuvmm/cuda_errors.hpp"

#include <cstdio>
#include <cstring>
#include <set>
#include <string>

int main() {
    char name[128];
    long value = 0;
    int checked = 0, failed = 0;
    std::set<long> header_codes;
    while (std::scanf("%127s %ld", name, &value) == 2) {
        header_codes.insert(value);
        ++checked;
        const char* ours = cuvmm::result_name(static_cast<CUresult>(value));
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
            ++failed;
            std::printf("FAIL cuda_errors_check: cuvmm names %ld %s, which cuda.h does not define\n", v, ours);
        }
    }
    std::printf("cuda_errors_check: %d cuda.h codes, %d failed\n", checked, failed);
    return failed == 0 ? 0 : 1;
}
