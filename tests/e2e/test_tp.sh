#!/usr/bin/env bash
# test_tp.sh - `--tp N` on the CLI (tensor parallel, CPU simulation): `tern eval --tp 2`
# and `--tp 4` give the unsharded run's logits within 1e-3 relative (numpy) and the same
# greedy continuation on qwen35-tiny (Hadamard, PQ2_0) and qwen3-tiny; `run --tp 2`
# prints the unsharded greedy text; `bench model --tp 2` runs; a bad N is a usage error
# (exit 2), a dimension that does not split a load error naming it (exit 1); --help of
# eval, run and bench model names --tp. (The library-level parity on every fixture is
# tests/unit/test_tp.c.)
# Usage: bash test_tp.sh /path/to/tern
set -u
TERN=${1:?usage: test_tp.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
if [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ] || [ ! -d "$FIX/qwen3-tiny" ]; then
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_tp SKIPPED ***"; exit 77
fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass+1)); }
bad() { echo "not ok $1"; fail=$((fail+1)); }
IDS=5,901,33,2047,77,3001,12,640,1999,4000,8,256,1024,3,77,2500,1313,42,99,3500

for m in qwen35-tiny/model-pq2_0.gguf qwen3-tiny/model-q2_0.gguf; do
  "$TERN" eval -m "$FIX/$m" --ids $IDS --logits-out "$W/l1.f32" --continue 12 --threads 2 --quiet >"$W/c1" 2>"$W/err" \
    || { cat "$W/err"; bad "eval $m unsharded"; continue; }
  for n in 2 4; do
    if ! "$TERN" eval -m "$FIX/$m" --ids $IDS --logits-out "$W/l$n.f32" --continue 12 --threads 2 --tp $n --quiet >"$W/c$n" 2>"$W/err"; then
      cat "$W/err"; bad "eval --tp $n $m"; continue
    fi
    if python3 - "$W/l1.f32" "$W/l$n.f32" <<'PY'
import sys, numpy as np
a = np.fromfile(sys.argv[1], np.float32).reshape(-1, 4096)
b = np.fromfile(sys.argv[2], np.float32).reshape(-1, 4096)
r = (np.abs(a - b).max(axis=1) / np.abs(a).max(axis=1)).max()
print("  worst row relative difference %.3g" % r)
sys.exit(0 if a.shape == b.shape and r <= 1e-3 else 1)
PY
    then ok "eval --tp $n logits $m"; else bad "eval --tp $n logits $m"; fi
    if cmp -s "$W/c1" "$W/c$n"; then ok "eval --tp $n greedy $m"; else echo "  $(cat "$W/c1") vs $(cat "$W/c$n")"; bad "eval --tp $n greedy $m"; fi
  done
done

M=$FIX/qwen35-tiny/model-pq2_0.gguf
"$TERN" run -m "$M" -p "def main" -n 12 --temp 0 --threads 2 --quiet >"$W/r1" 2>/dev/null
"$TERN" run -m "$M" -p "def main" -n 12 --temp 0 --threads 2 --tp 2 --quiet >"$W/r2" 2>"$W/err"
if [ -s "$W/r1" ] && cmp -s "$W/r1" "$W/r2"; then ok "run --tp 2 greedy text"; else cat "$W/err"; bad "run --tp 2 greedy text"; fi
if "$TERN" bench model -m "$M" --tp 2 -p 8 -n 2 --reps 1 --threads 2 >"$W/b" 2>&1 && grep -q "^tg" "$W/b"; then
  ok "bench model --tp 2"; else cat "$W/b"; bad "bench model --tp 2"; fi

for v in 0 -1 65 x; do
  "$TERN" eval -m "$M" --ids 1 --logits-out - --tp "$v" >/dev/null 2>"$W/err"; rc=$?
  if [ $rc = 2 ] && grep -q -- "--tp" "$W/err"; then ok "eval --tp $v usage error"; else echo "  rc $rc"; cat "$W/err"; bad "eval --tp $v usage error"; fi
done
"$TERN" eval -m "$FIX/qwen3-tiny/model-q2_0.gguf" --ids 1 --logits-out - --tp 3 >/dev/null 2>"$W/err"; rc=$?
if [ $rc = 1 ] && grep -q "n_head" "$W/err"; then ok "eval --tp 3 names the dimension"; else echo "  rc $rc"; cat "$W/err"; bad "eval --tp 3 names the dimension"; fi
for c in eval run "bench model"; do
  if $TERN $c --help 2>&1 | grep -q -- "--tp N"; then ok "$c --help names --tp"; else bad "$c --help names --tp"; fi
done

echo "$pass passed, $fail failed"
[ $fail = 0 ]
