#!/usr/bin/env bash
# build.sh OUT - build the stand-alone kernel bench (bench/bench_main.c + the
# kernel library + core + the bench command) with only libc/pthreads.
# The same ISA flags as CMakeLists.txt give each *_<isa>.c file.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/tern-kbench}
tmp=$(mktemp -d)
CFLAGS="${EXTRA_CFLAGS:-} -DTERN_VERSION_STRING=\"kbench\" -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc -DTERN_BUILDING_LIB -ffunction-sections -fdata-sections"
arch=$(uname -m)
objs=()
for f in src/core/*.c src/kernels/cpu/*.c src/cli/cmd_bench.c src/cli/bench_gdn.c src/cli/cli_util.c src/cli/cli_env.c bench/bench_main.c; do
  extra=""
  case "$f" in
    *_avx2.c) [ "$arch" = x86_64 ] || continue; extra="-mavx2 -mfma -mf16c -mbmi2";;
    *_avx512.c) [ "$arch" = x86_64 ] || continue
      extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512vbmi -mavx2 -mfma -mf16c -mbmi2";;
    *_neon.c) [ "$arch" = aarch64 ] || continue; extra="-march=armv8.2-a+dotprod+fp16";;
    *_neon_i8mm.c) [ "$arch" = aarch64 ] || continue; extra="-march=armv8.2-a+dotprod+fp16+i8mm";;
  esac
  defs=""
  [ "$arch" = x86_64 ] && defs="-DTERN_HAVE_X86=1"
  [ "$arch" = aarch64 ] && defs="-DTERN_HAVE_ARM=1"
  o="$tmp/$(echo "$f" | tr / _).o"
  gcc $CFLAGS $defs $extra -c "$f" -o "$o" &
  objs+=("$o")
done
wait
gcc -Wl,--gc-sections -o "$out" "${objs[@]}" -lpthread -lm
rm -rf "$tmp"
echo "built $out"
