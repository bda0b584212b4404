// Names and descriptions of CUresult codes, shared by both drivers and the error path.
#pragma once

#include "cuvmm/cuda_api.hpp"

#include <string>

namespace cuvmm {

// "CUDA_ERROR_INVALID_VALUE" for a known code; nullptr for a code cuda.h does not define.
const char* result_name(CUresult r);

// The header's one-line description ("This indicates that one or more of the parameters
// passed to the API call is not within an acceptable range of values"); nullptr if unknown.
const char* result_description(CUresult r);

// result_name(r), or "CUresult 1234 (not a code this build knows)"; never empty.
std::string describe_result(CUresult r);

}  // namespace cuvmm
