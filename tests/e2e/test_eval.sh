#!/usr/bin/env bash
# test_eval.sh - `tern eval` end to end on the fixtures: the logits file it writes
# (float32 LE [T, vocab]) compared with the reference logits by a numpy oracle
# (max |diff| < 0.02, argmax equal where the reference top-2 margin > 0.02), and
# the --continue ids equal to the reference greedy continuation; --ids-file and
# --chunk 1; usage errors (exit 2), out-of-range ids and a too-small --ctx (exit 1),
# --help (exit 0).
# Usage: bash test_eval.sh /path/to/tern
set -u
TERN=${1:?usage: test_eval.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
if [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ] || [ ! -d "$FIX/qwen3-tiny" ]; then
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_eval SKIPPED ***"; exit 77
fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass+1)); }
bad() { echo "not ok $1"; fail=$((fail+1)); }
expect_rc() { # name, rc, command...
  local n=$1 want=$2; shift 2
  "$@" >"$W/out" 2>"$W/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$n"; else echo "  rc $rc, want $want: $*"; cat "$W/err"; bad "$n"; fi
}

# ids / continuation of sequence $3 of model key $2 ('' for qwen3) from reference.json
ref_field() { # fixture, key, seq, field(ids|cont|logits)
  python3 - "$1" "$2" "$3" "$4" <<'EOF'
import json, sys
fx, key, si, field = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
r = json.load(open(fx + "/reference.json"))
L = r["models"][key]["logits"] if key else r["logits"]
if field == "ids": print(",".join(map(str, r["sequences"][si]["ids"])))
elif field == "cont": print(" ".join(map(str, L[si]["greedy_continuation"])))
else: print(fx + "/" + L[si]["logits_file"])
EOF
}

compare() { # name, got.f32, ref.f32
  if python3 - "$2" "$3" <<'EOF'
import sys, numpy as np
g = np.fromfile(sys.argv[1], dtype="<f4"); r = np.fromfile(sys.argv[2], dtype="<f4")
if g.size != r.size: print("  size", g.size, "vs", r.size); sys.exit(1)
g = g.reshape(-1, 4096); r = r.reshape(-1, 4096)
d = float(np.abs(g - r).max())
s = np.sort(r, axis=1); margin = s[:, -1] - s[:, -2]
bad = int(((g.argmax(1) != r.argmax(1)) & (margin > 0.02)).sum())
print("  max|diff| %.3g, argmax mismatches on clear rows: %d" % (d, bad))
sys.exit(0 if d < 0.02 and bad == 0 else 1)
EOF
  then ok "$1"; else bad "$1"; fi
}

case_one() { # name, fixture, model, key, seq, extra args...
  local n=$1 fx=$2 model=$3 key=$4 si=$5; shift 5
  local ids cont ref
  ids=$(ref_field "$fx" "$key" "$si" ids); cont=$(ref_field "$fx" "$key" "$si" cont)
  ref=$(ref_field "$fx" "$key" "$si" logits)
  if "$TERN" eval -m "$fx/$model" --ids "$ids" --logits-out "$W/l.f32" --continue 24 --quiet "$@" \
      >"$W/cont" 2>"$W/err"; then
    compare "$n logits" "$W/l.f32" "$ref"
    if [ "$(cat "$W/cont")" = "$cont" ]; then ok "$n continuation"
    else echo "  got:  $(cat "$W/cont")"; echo "  want: $cont"; bad "$n continuation"; fi
  else cat "$W/err"; bad "$n"; fi
}

Q35=$FIX/qwen35-tiny; Q3=$FIX/qwen3-tiny
case_one "qwen3 g128 seq0" "$Q3" model-q2_0.gguf "" 0
case_one "qwen3 g64 seq2 chunk 7" "$Q3" model-q2_0_g64.gguf "" 2 --chunk 7
case_one "qwen35 pq2_0 seq0" "$Q35" model-pq2_0.gguf A 0 --threads 2
case_one "qwen35 mlx seq2 chunk 1" "$Q35" mlx-pack A 2 --chunk 1
case_one "qwen35 C seq0" "$Q35" model-q2_0-nohadamard.gguf C 0

# --ids-file gives the same bytes as --ids
ids=$(ref_field "$Q3" "" 0 ids)
echo "$ids" | tr ',' '\n' >"$W/ids.txt"
"$TERN" eval -m "$Q3/model-q2_0.gguf" --ids "$ids" --logits-out "$W/a.f32" --quiet
"$TERN" eval -m "$Q3/model-q2_0.gguf" --ids-file "$W/ids.txt" --logits-out "$W/b.f32" --quiet
if cmp -s "$W/a.f32" "$W/b.f32"; then ok "ids-file"; else bad "ids-file"; fi

expect_rc "help" 0 "$TERN" eval --help
expect_rc "no ids" 2 "$TERN" eval -m "$Q3/model-q2_0.gguf" --logits-out "$W/x.f32"
expect_rc "both ids" 2 "$TERN" eval -m "$Q3/model-q2_0.gguf" --ids 1 --ids-file "$W/ids.txt" --logits-out -
expect_rc "bad chunk" 2 "$TERN" eval -m "$Q3/model-q2_0.gguf" --ids 1 --chunk 0 --logits-out -
expect_rc "id out of range" 1 "$TERN" eval -m "$Q3/model-q2_0.gguf" --ids 1,4096 --logits-out -
if grep -q "out of range" "$W/err"; then ok "id message"; else cat "$W/err"; bad "id message"; fi
expect_rc "context full" 1 "$TERN" eval -m "$Q3/model-q2_0.gguf" --ids 1,2,3,4 --ctx 3 --logits-out -
if grep -q "context" "$W/err"; then ok "context message"; else cat "$W/err"; bad "context message"; fi
expect_rc "missing model" 1 "$TERN" eval -m "$W/none.gguf" --ids 1 --logits-out -

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
