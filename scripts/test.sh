#!/usr/bin/env bash
# test.sh - every test tern has, as CI runs them:
#   1. release build + ctest (unit, fixture parity, e2e CLI tests); with the CUDA
#      back-end when nvcc is found (its tests skip without a GPU)
#   2. AddressSanitizer + UBSan build + ctest (same tests, CPU-only build)
#   3. libFuzzer targets (clang), bounded time each, on the seed corpus
#   4. NEON build (aarch64 cross gcc) + kernel tests under qemu-aarch64
#   (after 1: the Python package, pip-installed against build/, and its pytest suite)
# Prints "N passed, N failed" at the end and exits non-zero on any failure.
# TERN_FUZZ_SECONDS (default 60) bounds each fuzzer; TERN_TEST_QUICK=1 skips 2-4.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
# CI always has the reference models: there a missing fixtures folder is an error,
# not a row of skipped tests.
FIX=${TERN_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
if [ "${CI:-}" = true ] && [ ! -d "$FIX" ]; then
  echo "*** test.sh: CI=true but the fixtures folder $FIX is missing (set TERN_FIXTURES): FAILING ***" >&2
  exit 1
fi
passed=0; failed=0
step() { # name, command...
  local name=$1; shift
  echo "=== $name"
  if "$@"; then passed=$((passed+1)); echo "=== $name: ok"; else failed=$((failed+1)); echo "=== $name: FAILED"; fi
}
build() { # dir, cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null && cmake --build "$dir" -j"$JOBS" 2>&1 | grep -E 'error|warning: ' ; cmake --build "$dir" -j"$JOBS" >/dev/null
}
ctest_in() { (cd "$1" && shift && ctest --output-on-failure -j"$JOBS" "$@"); }

step "release build" build build -DCMAKE_BUILD_TYPE=Release
step "release tests" ctest_in build
# The Python package against this build's libtern (reinstalled so it links what was just built).
pytest_python() {
  { python3 -m pip install -q ./python 2>/dev/null || python3 -m pip install -q --break-system-packages ./python; } &&
    TERN_BIN="$PWD/build/tern" python3 -m pytest -q python/tests
}
step "python package tests" pytest_python
if [ "${TERN_TEST_QUICK:-0}" != 1 ]; then
  step "asan+ubsan build" build build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 "-DTERN_SANITIZE=address;undefined" -DTERN_CUDA=OFF
  step "asan+ubsan tests" env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TERN_SANITIZED=1 \
       bash -c 'cd build-asan && ctest --output-on-failure -j'"$JOBS"' -E "^e2e_bench"'
  if [ -d tests/fuzz ] && ls tests/fuzz/fuzz_*.c >/dev/null 2>&1; then
    step "fuzz build" build build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DTERN_FUZZ=ON -DTERN_BUILD_TESTS=OFF -DTERN_CUDA=OFF
    step "fuzz run" bash tests/fuzz/run.sh build-fuzz "${TERN_FUZZ_SECONDS:-60}"
  fi
  if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
    step "neon build" build build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release -DTERN_KERNELS_ONLY=ON
    step "neon tests (qemu)" ctest_in build-arm -R '^test_(core|kernels)'
  else
    echo "=== neon: SKIPPED (no aarch64-linux-gnu-gcc or qemu-aarch64)"
  fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
