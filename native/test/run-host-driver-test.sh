#!/usr/bin/env bash
# Builds and runs the native tests, never linking libcuda:
#   host_driver_test  the host driver (native/host/*.cpp) and native/cuda_errors.cpp;
#   vmm_test          cuvmm's object model and copies (native/*.cpp but the JNI facade)
#                     over the host driver, with a spy on some entry points, and the cuda
#                     loader over a stand-in libcuda (fake_cuda.cpp);
#   cuda_errors_check the CUresult names of cuda_errors.cpp against cuda.h's enum (when a
#                     cuda.h is found);
#   host_stream_test  the host driver's streams, events, pinned memory and async copies
#                     (small ones inline on an idle stream: host_stream_test_inline.cpp),
#                     also built with ThreadSanitizer when available;
#   hostcuda_test     the host library (native/hostcuda, libcuda.so.1 over the host driver),
#                     dlopen'ed as native/Makefile built it: from $HOSTCUDA_DIR when set (Maven
#                     passes its build's), else built here with make; plus an `nm -D` check
#                     that it exports only cu* C names and imports only versioned libc /
#                     libstdc++ names (and the toolchain's weak hooks); hostcuda_oom_test
#                     (a bad_alloc while it sets itself up) and the bad configurations.
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

# The builds run in the background, as many at a time as there are CPUs: compiled one after
# the other they were most of this script's time (about 3 of its 4 minutes in CI, on two
# CPUs). Each job's output goes to its own log, printed once the job has ended, so two
# compilers' messages never interleave; a failed job fails the script (its status, after
# every job started has ended and been printed).
max_jobs="$(nproc 2>/dev/null || echo 1)"
job_pids=()
job_logs=()
job_names=()
start_job() { # name command [args...]
    while (( $(jobs -pr | wc -l) >= max_jobs )); do
        wait -n || true # a failure is reported by finish_jobs, which waits for each job by its pid
    done
    local log="$work/job-${#job_pids[@]}.log"
    "${@:2}" >"$log" 2>&1 &
    job_pids+=("$!")
    job_logs+=("$log")
    job_names+=("$1")
}
finish_jobs() {
    local i job_status first_failure=0
    for i in "${!job_pids[@]}"; do
        job_status=0
        wait "${job_pids[$i]}" || job_status=$?
        cat "${job_logs[$i]}"
        if (( job_status != 0 )); then
            echo "FAIL: building ${job_names[$i]} (exit status $job_status)"
            if (( first_failure == 0 )); then first_failure=$job_status; fi
        fi
    done
    job_pids=()
    job_logs=()
    job_names=()
    if (( first_failure != 0 )); then exit "$first_failure"; fi
}

# ThreadSanitizer, for host_stream_test again (data races in the stream workers' queues).
tsan=(-fsanitize=thread)
tsan_available=0
if echo 'int main(){return 0;}' | "$cxx" -x c++ "${tsan[@]}" - -o "$work/probe-tsan" >/dev/null 2>&1 \
        && "$work/probe-tsan" >/dev/null 2>&1; then
    tsan_available=1
    tflags=(-std=c++17 -O1 -g -Wall -Wextra -I"$native" -pthread "${tsan[@]}")
    mkdir -p "$work/tsan"
fi

# First the objects (each source compiled once; the tests link the host driver's) and what
# needs none of them.
objects=()
for src in "$native"/host/*.cpp "$native"/*.cpp; do
    base="$(basename "$src" .cpp)"
    case "$src" in
        "$native"/host/*) obj="$work/host-$base.o" ;;
        */jni_api.cpp) continue ;;  # the JNI facade needs JavaCPP's generated code
        *) obj="$work/$base.o" ;;
    esac
    start_job "${src#"$native"/}" "$cxx" "${flags[@]}" -c "$src" -o "$obj"
    objects+=("$obj")
done
if (( tsan_available )); then
    for src in "$native"/host/*.cpp "$native/cuda_errors.cpp"; do
        obj="$work/tsan/$(basename "$src" .cpp).o"
        start_job "${src#"$native"/} (ThreadSanitizer)" "$cxx" "${tflags[@]}" -c "$src" -o "$obj"
    done
fi
# A stand-in libcuda (no sanitizers: a plain shared library dlopened by vmm_test).
start_job libfakecuda.so "$cxx" -std=c++17 -O1 -shared -fPIC -I"$native" "$here/fake_cuda.cpp" \
    -o "$work/libfakecuda.so"
# Out of memory while the host library sets itself up (no sanitizers: this test replaces
# operator new, exported with -rdynamic to the library).
start_job hostcuda_oom_test "$cxx" -std=c++17 -O1 -g -Wall -Wextra -I"$native" -pthread -rdynamic \
    "$here/hostcuda_oom_test.cpp" -ldl -o "$work/hostcuda_oom_test"
# The host library, as native/Makefile builds it (plain -O2, no sanitizers: dlopen'ed by an
# instrumented test), unless Maven's build of it is named.
hostcuda_dir="${HOSTCUDA_DIR:-}"
if [[ -z "$hostcuda_dir" ]]; then
    start_job "the host library (make hostcuda)" make --no-print-directory -s -C "$native" BUILD="$work/make" hostcuda
    hostcuda_dir="$work/make/hostcuda"
fi
finish_jobs

# Then the tests, linked with those objects.
host_objects=("$work"/host-*.o "$work/cuda_errors.o")
# The longest first (host_stream_test and its ThreadSanitizer build), for the shortest wait.
start_job host_stream_test "$cxx" "${flags[@]}" "$here/host_stream_test.cpp" "$here/host_stream_test_more.cpp" \
    "$here/host_stream_test_inline.cpp" "${host_objects[@]}" -o "$work/host_stream_test"
if (( tsan_available )); then
    start_job host_stream_test_tsan "$cxx" "${tflags[@]}" "$here/host_stream_test.cpp" \
        "$here/host_stream_test_more.cpp" "$here/host_stream_test_inline.cpp" "$work"/tsan/*.o \
        -o "$work/host_stream_test_tsan"
fi
start_job host_driver_test "$cxx" "${flags[@]}" "$here/host_driver_test.cpp" "${host_objects[@]}" \
    -o "$work/host_driver_test"
start_job vmm_test "$cxx" "${flags[@]}" "$here/vmm_test.cpp" "${objects[@]}" -ldl -o "$work/vmm_test"
start_job hostcuda_test "$cxx" "${flags[@]}" "$here/hostcuda_test.cpp" "$here/hostcuda_test_vmm.cpp" \
    "$work/cuda_driver.o" "$work/cuda_errors.o" -ldl -o "$work/hostcuda_test"
if [[ -f "$cuda_include/cuda.h" ]]; then
    start_job cuda_errors_check "$cxx" "${flags[@]}" "$here/cuda_errors_check.cpp" "$work/cuda_errors.o" \
        -o "$work/cuda_errors_check"
fi
finish_jobs

status=0
"$work/host_driver_test" || status=$?
# The CUresult names (cuda_errors.cpp) against a real cuda.h's enum, when there is one: every
# code named exactly as its enumerator, no code the header lacks.
if [[ -f "$cuda_include/cuda.h" ]]; then
    errors_status=0
    header_version="$(sed -nE 's/^#define CUDA_VERSION[[:space:]]+([0-9]+).*/\1/p' "$cuda_include/cuda.h" | head -n 1)"
    sed -n '/typedef enum cudaError_enum/,/} CUresult;/p' "$cuda_include/cuda.h" \
        | sed -nE 's/^[[:space:]]*(CUDA_[A-Z0-9_]+)[[:space:]]*=[[:space:]]*([0-9]+).*/\1 \2/p' \
        | "$work/cuda_errors_check" "$header_version" || errors_status=$?
    if [[ $status -eq 0 ]]; then status=$errors_status; fi
else
    echo "cuda_errors_check skipped: no cuda.h at $cuda_include (the CUresult names are not compared with one)"
fi
vmm_status=0
CUVMM_FAKE_CUDA="$work/libfakecuda.so" "$work/vmm_test" || vmm_status=$?
if [[ $status -eq 0 ]]; then status=$vmm_status; fi
stream_status=0
"$work/host_stream_test" || stream_status=$?
if [[ $status -eq 0 ]]; then status=$stream_status; fi

# The host library's exports: C names starting with "cu" only, no C++ symbol.
hostcuda_lib="$hostcuda_dir/libcuda.so.1"
hostcuda_status=0
foreign="$(nm -D --defined-only "$hostcuda_lib" | awk '{print $3}' | grep -v '^cu' || true)"
if [[ -n "$foreign" ]]; then
    echo "FAIL: $hostcuda_lib exports names other than cu*: $foreign"
    hostcuda_status=1
fi
# What it needs from elsewhere: versioned libc / libstdc++ / libgcc names and the toolchain's
# weak hooks only (an unversioned weak reference, e.g. a TLS init wrapper _ZTH*, would bind to
# whatever RTLD_GLOBAL library defines it).
imported="$(nm -D --undefined-only "$hostcuda_lib" | awk '{print $NF}' \
    | grep -Ev '@(GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+$|^_ITM_(de)?registerTMCloneTable$|^__gmon_start__$|^__cxa_finalize$' \
    || true)"
if [[ -n "$imported" ]]; then
    echo "FAIL: $hostcuda_lib imports names other than versioned libc/libstdc++ ones: $imported"
    hostcuda_status=1
fi
if ! readelf -d "$hostcuda_lib" | grep -q 'Library soname: \[libcuda.so.1\]'; then
    echo "FAIL: $hostcuda_lib has no SONAME libcuda.so.1"
    hostcuda_status=1
fi
"$work/hostcuda_test" "$hostcuda_lib" || hostcuda_status=$?
CUVMM_HOST_DEVICES=9 "$work/hostcuda_test" "$hostcuda_lib" bad-config || hostcuda_status=$?
# Out of memory while the library sets itself up: no exception crosses extern "C".
"$work/hostcuda_oom_test" "$hostcuda_lib" || hostcuda_status=$?
# Digits only, bounds stated (library.cpp): each refused with one stderr line naming them.
bad_configs=(
    'CUVMM_HOST_DEVICES= 3|CUVMM_HOST_DEVICES: " 3" (expected: an integer from 1 to 8, digits only)'
    'CUVMM_HOST_DEVICES=+3|CUVMM_HOST_DEVICES: "+3" (expected: an integer from 1 to 8'
    'CUVMM_HOST_DEVICES=3 |CUVMM_HOST_DEVICES: "3 " (expected: an integer from 1 to 8'
    'CUVMM_HOST_GRANULARITY=12288|CUVMM_HOST_GRANULARITY: "12288" (expected: a power of two from the page size'
    'CUVMM_HOST_GRANULARITY=9223372036854775808|to 4611686018427387904, in bytes, digits only)'
    'CUVMM_HOST_STREAM_DELAY_MICROS=-1|CUVMM_HOST_STREAM_DELAY_MICROS: "-1" (expected: microseconds from 0 to 9223372036854775807'
)
for case in "${bad_configs[@]}"; do
    env "${case%%|*}" "$work/hostcuda_test" "$hostcuda_lib" bad-config "${case#*|}" || hostcuda_status=$?
done
if [[ $status -eq 0 ]]; then status=$hostcuda_status; fi

# The stream workers are threads: host_stream_test again under ThreadSanitizer (data races
# in the queues), when the toolchain has it. Its fork()ed tests are skipped there.
if (( tsan_available )); then
    tsan_status=0
    CUVMM_TEST_NO_FORK=1 TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}" "$work/host_stream_test_tsan" \
        || tsan_status=$?
    if [[ $status -eq 0 ]]; then status=$tsan_status; fi
else
    echo "ThreadSanitizer unavailable; host_stream_test runs under ASan only"
fi
exit "$status"
