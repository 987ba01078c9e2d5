#!/usr/bin/env bash
# test_default_model.sh - the embedded default model through the CLI:
#   - `tern run` without -m (and without $TERN_MODEL) loads models/tern-default.gguf;
#   - a fixed --seed gives the same tokens twice, another seed other tokens;
#   - its general.sampling.* keys are the default sampling (the load line says so;
#     no flags == the same values given as flags; a flag overrides its key);
#   - `tern perplexity` on a text equal to a reference prompt matches the
#     perplexity computed (numpy, here) from the training framework's logits
#     in tests/data/default-model (not from tern);
#   - `tern perplexity` usage errors exit 2, a too-short file exits 1.
# Usage: bash test_default_model.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_default_model.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"; DATA="$SRC/tests/data/default-model"
if [ ! -f "$MODEL" ] || [ ! -f "$DATA/reference.txt" ]; then
  echo "*** SKIPPED: $MODEL or $DATA missing ***"; exit 77
fi
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
jget() { python3 -c "import json,sys; d=json.loads(sys.stdin.read()); v=d$1; print(' '.join(map(str,v)) if isinstance(v,list) else v)"; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
unset TERN_MODEL

# --- the default model is used when -m is absent
"$TERN" run -p "The Linux kernel provides" --raw -n 24 --seed 7 --threads 2 --json >"$TMP/a.json" 2>"$TMP/a.err"
check "run without -m exits 0" [ $? -eq 0 ]
check "run without -m loads models/tern-default.gguf" grep -q "tern-default.gguf" "$TMP/a.err"
"$TERN" run -p "The Linux kernel provides" --raw -n 24 --seed 7 --threads 2 --json >"$TMP/b.json" 2>/dev/null
"$TERN" run -p "The Linux kernel provides" --raw -n 24 --seed 8 --threads 2 --json >"$TMP/c.json" 2>/dev/null
A=$(jget '["tokens"]' <"$TMP/a.json"); B=$(jget '["tokens"]' <"$TMP/b.json"); C=$(jget '["tokens"]' <"$TMP/c.json")
check "24 tokens generated" [ "$(echo $A | wc -w)" -eq 24 ]
check "same seed, same tokens" [ "$A" = "$B" ]
check "other seed, other tokens" [ "$A" != "$C" ]
echo "     sample: $(jget '["text"]' <"$TMP/a.json" | head -c 200 | tr '\n' ' ')"

# --- the model's sampling keys (docs/default-model.md) are the defaults
check "load line: sampling from the model's keys" grep -q \
  "temp 0.80 top-k 40 top-p 0.95 min-p 0.05 repeat-penalty 1.30 (last 256) frequency-penalty 0.10 presence-penalty 0.00 (defaults from the model's general.sampling keys)" "$TMP/a.err"
"$TERN" run -p "Memory management in Linux" -n 48 --seed 3 --threads 2 --json >"$TMP/k.json" 2>/dev/null
"$TERN" run -p "Memory management in Linux" -n 48 --seed 3 --threads 2 --json --temp 0.8 --top-k 40 --top-p 0.95 \
  --min-p 0.05 --repeat-penalty 1.3 --frequency-penalty 0.1 >"$TMP/f.json" 2>/dev/null
"$TERN" run -p "Memory management in Linux" -n 48 --seed 3 --threads 2 --json --frequency-penalty 0 \
  >"$TMP/o.json" 2>"$TMP/o.err"
K=$(jget '["tokens"]' <"$TMP/k.json")
check "no sampling flags == the keys' values as flags" [ "$K" = "$(jget '["tokens"]' <"$TMP/f.json")" ]
check "a flag overrides its key" grep -q "frequency-penalty 0.00" "$TMP/o.err"
check "... and changes the output" [ "$K" != "$(jget '["tokens"]' <"$TMP/o.json")" ]

# --- perplexity against the training framework's logits (case 1 of reference.txt)
python3 - "$DATA" "$TMP" <<'EOF'
import json, sys, numpy as np
data, tmp = sys.argv[1], sys.argv[2]
lines = open(f"{data}/reference.txt").read().split("\n")
i = lines.index("case 1")
prompt = json.loads(lines[i + 1][len("prompt "):])
ids = [int(x) for x in lines[i + 2].split()[2].split(",")]
_, fn, T, V = lines[i + 3].split()
lg = np.fromfile(f"{data}/{fn}", dtype="<f4").reshape(int(T), int(V)).astype(np.float64)
lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
nll = np.mean([lse[t] - lg[t, ids[t + 1]] for t in range(len(ids) - 1)])
open(f"{tmp}/prompt.txt", "w").write(prompt)
open(f"{tmp}/want", "w").write(f"{np.exp(nll)} {len(ids)}\n")
EOF
read WANT NTOK <"$TMP/want"
"$TERN" perplexity -f "$TMP/prompt.txt" --ctx "$NTOK" --threads 2 --json >"$TMP/p.json" 2>"$TMP/p.err"
check "perplexity exits 0" [ $? -eq 0 ]
GOT=$(jget '["ppl"]' <"$TMP/p.json")
check "perplexity scores ctx-1 predictions" [ "$(jget '["predictions"]' <"$TMP/p.json")" = "$((NTOK-1))" ]
echo "     perplexity tern $GOT, training framework $WANT"
check "perplexity matches the reference logits (rel 1e-3)" \
  python3 -c "import sys; g,w=$GOT,$WANT; sys.exit(0 if abs(g-w) <= 1e-3*w else 1)"
"$TERN" perplexity -f "$TMP/prompt.txt" --ctx "$NTOK" --chunk 1 --threads 2 >"$TMP/p1.txt" 2>/dev/null
check "perplexity text output" grep -q "^perplexity: " "$TMP/p1.txt"

# --- perplexity errors
"$TERN" perplexity >/dev/null 2>"$TMP/e"; rc=$?
check "no -f exits 2" [ $rc -eq 2 ]
"$TERN" perplexity -f "$TMP/prompt.txt" --ctx 1 >/dev/null 2>"$TMP/e"; rc=$?
check "--ctx 1 exits 2" [ $rc -eq 2 ]
"$TERN" perplexity -f "$TMP/prompt.txt" --ctx 4096 >/dev/null 2>"$TMP/e"; rc=$?
check "file shorter than ctx exits 1" [ $rc -eq 1 ]
"$TERN" perplexity -f "$TMP/nonexistent" >/dev/null 2>"$TMP/e"; rc=$?
check "missing file exits 1" [ $rc -eq 1 ]

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
