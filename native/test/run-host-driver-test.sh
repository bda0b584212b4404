#!/usr/bin/env bash
# Builds and runs the native tests, never linking libcuda:
#   host_driver_test  the host driver (native/host/*.cpp) and native/cuda_errors.cpp;
#   vmm_test          cuvmm's object model and copies (native/*.cpp but the JNI facade)
#                     over the host driver, with a spy on some entry points, and the cuda
#                     loader over a stand-in libcuda (fake_cuda.cpp);
#   host_stream_test  the host driver's streams, events, pinned memory and async copies
#                     (small ones inline on an idle stream: host_stream_test_inline.cpp),
#                     also built with ThreadSanitizer when available.
# Uses AddressSanitizer + UBSan when the toolchain supports them, else builds without.
# Exit status: 0 when all tests passed, else the first failing test's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
native="$(cd "$here/.." && pwd)"
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
cxx="${CXX:-g++}"

# No CUDA toolkit needed (cuvmm/cuda_api.hpp declares what we use). With a real cuda.h, first
# prove our declarations match it (compile-only, as native/Makefile does).
if [[ -f "$cuda_include/cuda.h" ]]; then
    "$cxx" -std=c++17 -Wall -Wextra -I"$native" -I"$cuda_include" -fsyntax-only "$here/cuda_api_check.cpp"
    echo "cuda_api_check: cuvmm/cuda_api.hpp matches $cuda_include/cuda.h"
else
    echo "cuda_api_check skipped: no cuda.h at $cuda_include (our declarations are not compared with one)"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

flags=(-std=c++17 -O1 -g -Wall -Wextra -I"$native" -pthread)

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

# Each source is compiled once; both tests link the host driver's objects.
objects=()
for src in "$native"/host/*.cpp "$native"/*.cpp; do
    base="$(basename "$src" .cpp)"
    case "$src" in
        "$native"/host/*) obj="$work/host-$base.o" ;;
        */jni_api.cpp) continue ;;  # the JNI facade needs JavaCPP's generated code
        *) obj="$work/$base.o" ;;
    esac
    "$cxx" "${flags[@]}" -c "$src" -o "$obj"
    objects+=("$obj")
done
host_objects=("$work"/host-*.o "$work/cuda_errors.o")
"$cxx" "${flags[@]}" "$here/host_driver_test.cpp" "${host_objects[@]}" -o "$work/host_driver_test"
"$cxx" "${flags[@]}" "$here/vmm_test.cpp" "${objects[@]}" -ldl -o "$work/vmm_test"
# A stand-in libcuda (no sanitizers: a plain shared library dlopened by vmm_test).
"$cxx" -std=c++17 -O1 -shared -fPIC -I"$native" "$here/fake_cuda.cpp" -o "$work/libfakecuda.so"
"$cxx" "${flags[@]}" "$here/host_stream_test.cpp" "$here/host_stream_test_more.cpp" "$here/host_stream_test_inline.cpp" \
    "${host_objects[@]}" \
    -o "$work/host_stream_test"
status=0
"$work/host_driver_test" || status=$?
vmm_status=0
CUVMM_FAKE_CUDA="$work/libfakecuda.so" "$work/vmm_test" || vmm_status=$?
if [[ $status -eq 0 ]]; then status=$vmm_status; fi
stream_status=0
"$work/host_stream_test" || stream_status=$?
if [[ $status -eq 0 ]]; then status=$stream_status; fi

# The stream workers are threads: host_stream_test again under ThreadSanitizer (data races
# in the queues), when the toolchain has it. Its fork()ed tests are skipped there.
tsan=(-fsanitize=thread)
if echo 'int main(){return 0;}' | "$cxx" -x c++ "${tsan[@]}" - -o "$work/probe-tsan" >/dev/null 2>&1 \
        && "$work/probe-tsan" >/dev/null 2>&1; then
    tflags=(-std=c++17 -O1 -g -Wall -Wextra -I"$native" -pthread "${tsan[@]}")
    mkdir -p "$work/tsan"
    for src in "$native"/host/*.cpp "$native/cuda_errors.cpp"; do
        "$cxx" "${tflags[@]}" -c "$src" -o "$work/tsan/$(basename "$src" .cpp).o"
    done
    "$cxx" "${tflags[@]}" "$here/host_stream_test.cpp" "$here/host_stream_test_more.cpp" "$here/host_stream_test_inline.cpp" \
        "$work"/tsan/*.o \
        -o "$work/host_stream_test_tsan"
    tsan_status=0
    CUVMM_TEST_NO_FORK=1 TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}" "$work/host_stream_test_tsan" \
        || tsan_status=$?
    if [[ $status -eq 0 ]]; then status=$tsan_status; fi
else
    echo "ThreadSanitizer unavailable; host_stream_test runs under ASan only"
fi
exit "$status"
