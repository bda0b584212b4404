#!/usr/bin/env bash
# Builds and runs the host driver test (native/test/host_driver_test.cpp) against
# the host driver (native/host/*.cpp) and native/cuda_errors.cpp. Never links libcuda. Uses
# AddressSanitizer + UBSan when the toolchain supports them, else builds without.
# Exit status: the test's (0 = all checks passed).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
native="$(cd "$here/.." && pwd)"
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
cxx="${CXX:-g++}"

if [[ ! -f "$cuda_include/cuda.h" ]]; then
    echo "cuda.h not found in $cuda_include (set CUDA_HOME)" >&2
    exit 2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

flags=(-std=c++17 -O1 -g -Wall -Wextra -I"$native" -I"$cuda_include" -pthread)
sources=("$here/host_driver_test.cpp" "$native"/host/*.cpp "$native/cuda_errors.cpp")

sanitize=(-fsanitize=address,undefined -fno-omit-frame-pointer)
if echo 'int main(){return 0;}' | "$cxx" -x c++ "${sanitize[@]}" - -o "$work/probe" >/dev/null 2>&1 \
        && "$work/probe" >/dev/null 2>&1; then
    echo "building with ${sanitize[*]}"
    flags+=("${sanitize[@]}")
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
else
    echo "sanitizers unavailable; building without"
fi

"$cxx" "${flags[@]}" "${sources[@]}" -o "$work/host_driver_test"
"$work/host_driver_test"
