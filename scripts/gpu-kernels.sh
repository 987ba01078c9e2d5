#!/bin/sh
# gpu-kernels.sh [BUILD_DIR] - the CUDA kernel layer on a GPU machine, in one call:
# kernel tests (test_cuda_kernels), the same under compute-sanitizer memcheck and
# racecheck, the GEMV bench (tern bench kernels --device cuda, JSON and table),
# SASS instruction counts of the GEMV kernels when cuobjdump is there. Logs go
# to $OUT (default ./gpu-out); a short summary is printed last.
# BUILD_DIR (default build) must hold a -DTERN_CUDA=ON build of tern and
# test_cuda_kernels (built there if missing and cmake works).
set -u
B=${1:-build}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ ! -x "$B/test_cuda_kernels" ] || [ ! -x "$B/tern" ]; then
    cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON >"$OUT/build.log" 2>&1 &&
        cmake --build "$B" -j --target tern test_cuda_kernels >>"$OUT/build.log" 2>&1 ||
        { echo "build failed (see $OUT/build.log)"; tail -20 "$OUT/build.log"; exit 1; }
fi
nvidia-smi -L >"$OUT/device.txt" 2>&1
"$B/test_cuda_kernels" >"$OUT/test_cuda_kernels.log" 2>&1; t_rc=$?
ms=skipped; rs=skipped
if command -v compute-sanitizer >/dev/null 2>&1; then
    compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test_cuda_kernels" >"$OUT/memcheck.log" 2>&1 && ms=clean || ms="FAILED ($?)"
    compute-sanitizer --tool racecheck --error-exitcode 9 "$B/test_cuda_kernels" >"$OUT/racecheck.log" 2>&1 && rs=clean || rs="FAILED ($?)"
fi
"$B/tern" bench kernels --device cuda >"$OUT/bench.txt" 2>&1; b_rc=$?
"$B/tern" bench kernels --device cuda --json --quick >"$OUT/bench.json" 2>>"$OUT/bench.txt"
if command -v cuobjdump >/dev/null 2>&1; then
    : >"$OUT/sass-counts.txt"
    for o in $(find "$B" -name 'tc_gemv.cu.o' -o -name 'tc_gemv_file.cu.o'); do
        cuobjdump -sass "$o" | awk '/Function :/ {f=$3} /IDP|IMMA|LOP3|LDG|LEA|IMAD|SHF/ {split($2,a,"."); c[f" "a[1]]++} END {for (k in c) print k, c[k]}' | sort >>"$OUT/sass-counts.txt"
    done
fi
echo "=== summary ($(date -u +%F' '%H:%M) UTC, $(head -1 "$OUT/device.txt"))"
echo "test_cuda_kernels: rc $t_rc, $(tail -1 "$OUT/test_cuda_kernels.log")"
grep -E "^not ok" "$OUT/test_cuda_kernels.log" | head
echo "memcheck: $ms   racecheck: $rs"
echo "bench rc $b_rc:"
cat "$OUT/bench.txt"
