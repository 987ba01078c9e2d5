#!/usr/bin/env bash
# run.sh - run every libFuzzer target for a bounded time on its seed corpus.
#   usage: bash tests/fuzz/run.sh BUILD_DIR SECONDS
# BUILD_DIR holds fuzz_* executables (cmake -DTERN_FUZZ=ON, clang). Each runs
# for SECONDS on a scratch copy of tests/fuzz/corpus/<name>/ (the committed
# seeds are never modified), with -max_len per target. Any crash, leak,
# sanitizer report or timeout fails the run; reproducers land in
# $TERN_FUZZ_ARTIFACTS (default: a temp dir, printed on failure).
set -uo pipefail
BUILD=${1:?usage: run.sh BUILD_DIR SECONDS}
SECS=${2:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
ART=${TERN_FUZZ_ARTIFACTS:-$(mktemp -d)}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
declare -A MAXLEN=([fuzz_gguf]=16384 [fuzz_safetensors]=8192 [fuzz_json]=8192 [fuzz_grammar]=2048)
shopt -s nullglob
fuzzers=("$BUILD"/fuzz_*)
if [ ${#fuzzers[@]} -eq 0 ]; then echo "run.sh: no fuzz_* executables in $BUILD"; exit 1; fi
# The targets run side by side, as many at once as there are cores (TERN_FUZZ_JOBS), each for
# SECS: the wall time is SECS x targets / jobs, the fuzzing per target unchanged.
JOBS=${TERN_FUZZ_JOBS:-$(nproc)}
one() { # fuzzer: runs it, leaves NAME.log and NAME.rc in WORK
  local f=$1 name ml
  name=$(basename "$f")
  mkdir -p "$WORK/$name"
  [ -d "$HERE/corpus/$name" ] && cp "$HERE/corpus/$name"/* "$WORK/$name"/ 2>/dev/null
  ml=${MAXLEN[$name]:-4096}
  echo "--- $name: ${SECS}s, max_len $ml, $(ls "$WORK/$name" | wc -l) seeds" > "$WORK/$name.head"
  "$f" -max_total_time="$SECS" -max_len="$ml" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$ART/$name-" "$WORK/$name" > "$WORK/$name.log" 2>&1
  echo $? > "$WORK/$name.rc"
}
running=0
for f in "${fuzzers[@]}"; do
  [ -x "$f" ] || continue
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
  one "$f" &
  running=$((running + 1))
done
wait
fail=0
for f in "${fuzzers[@]}"; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  cat "$WORK/$name.head"
  if [ "$(cat "$WORK/$name.rc" 2>/dev/null)" = 0 ]; then
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$WORK/$name.log" | tail -2
    echo "--- $name: ok"
  else
    tail -40 "$WORK/$name.log"
    echo "--- $name: FAILED (rc $(cat "$WORK/$name.rc" 2>/dev/null || echo none); reproducer in $ART)"
    fail=1
  fi
done
exit $fail
