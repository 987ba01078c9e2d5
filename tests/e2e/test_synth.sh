#!/usr/bin/env bash
# test_synth.sh - `tern synth`: the tiny presets have exactly the fixtures' tensor
# names, shapes, types and metadata keys/types/values (other than the name, size and
# tokenizer); codes are ternary with ~1/3 zeros and scales in [0.004, 0.03]; output
# is deterministic per seed and differs across seeds; a real preset with --layers 1
# has the real shapes (ternary-bonsai-1.7b: tied head, 151936 x 2048 embedding).
# Usage: bash test_synth.sh /path/to/tern
set -u
TERN=${1:?usage: test_synth.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass+1)); }
bad() { echo "not ok $1"; fail=$((fail+1)); }
chk() { if "${@:2}" >"$W/out" 2>&1; then ok "$1"; else cat "$W/out"; bad "$1"; fi; }

chk "synth qwen35-tiny" "$TERN" synth --preset qwen35-tiny --seed 1 --quiet "$W/a.gguf"
chk "synth qwen35-tiny again" "$TERN" synth --preset qwen35-tiny --seed 1 --quiet "$W/b.gguf"
chk "synth qwen35-tiny seed 2" "$TERN" synth --preset qwen35-tiny --seed 2 --quiet "$W/c.gguf"
chk "synth qwen3-tiny" "$TERN" synth --preset qwen3-tiny --seed 1 --quiet "$W/q3.gguf"
cmp -s "$W/a.gguf" "$W/b.gguf" && ok "deterministic per seed" || bad "deterministic per seed"
cmp -s "$W/a.gguf" "$W/c.gguf" && bad "seeds differ" || ok "seeds differ"
chk "synth ternary-bonsai-1.7b --layers 1" "$TERN" synth --preset ternary-bonsai-1.7b --layers 1 --seed 5 --quiet "$W/r.gguf"
"$TERN" synth --preset nope --quiet "$W/x.gguf" >/dev/null 2>&1; [ $? -eq 2 ] && ok "unknown preset is a usage error" || bad "unknown preset"

if ! python3 -c "import numpy" 2>/dev/null; then
  echo "*** numpy missing: content checks SKIPPED ***"; skipped=1
elif [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ]; then
  echo "*** FIXTURES MISSING: fixture comparisons SKIPPED ***"; skipped=1
else
  if python3 - "$W" "$FIX" "$SRC" <<'PY'
import sys; W, FIX, SRC = sys.argv[1:4]; sys.path.insert(0, SRC + "/tools")
import gguf_lite, numpy as np
bad = 0
def check(cond, what):
    global bad
    if not cond: print("FAIL", what); bad += 1
skip = {"general.name", "general.size_label", "prism.hadamard.sign_values", "prism.hadamard.weight_names"}
for a, b in [(W + "/a.gguf", FIX + "/qwen35-tiny/model-pq2_0.gguf"), (W + "/q3.gguf", FIX + "/qwen3-tiny/model-q2_0.gguf")]:
    x, y = gguf_lite.Reader(a), gguf_lite.Reader(b)
    check([(t["name"], t["ne"], t["type"]) for t in x.tensors] == [(t["name"], t["ne"], t["type"]) for t in y.tensors], a + " tensors")
    check([(k, v[0], v[2]) for k, v in x.kv.items()] == [(k, v[0], v[2]) for k, v in y.kv.items()], a + " keys and types")
    for k in x.kv:
        if k in y.kv and not k.startswith("tokenizer") and k not in skip:
            check(str(x.kv[k][1]) == str(y.kv[k][1]), a + " value of " + k)
    for t in x.tensors:
        if t["type"] in (42, 142):
            c, d = gguf_lite.decode_ternary(t)
            check((c == 3).sum() == 0, t["name"] + " code 3")
            check(abs((c == 1).mean() - 1 / 3) < 0.02, t["name"] + " zero fraction %.3f" % (c == 1).mean())
            check(d.min() >= np.float16(0.0039) and d.max() <= np.float16(0.0301), t["name"] + " scale range")
r = gguf_lite.Reader(W + "/r.gguf")
check(r.by_name["token_embd.weight"]["ne"] == [2048, 151936] and "output.weight" not in r.by_name, "1.7b embedding, tied")
check(r.by_name["blk.0.attn_q.weight"]["ne"] == [2048, 2048] and r.by_name["blk.0.attn_k.weight"]["ne"] == [2048, 1024], "1.7b attention")
check(r.by_name["blk.0.ffn_down.weight"]["ne"] == [6144, 2048], "1.7b ffn")
check(r.kv["qwen3.block_count"][1] == 1 and len(r.kv["tokenizer.ggml.tokens"][1]) == 151936, "1.7b header")
sys.exit(1 if bad else 0)
PY
  then ok "synth files match the fixtures' layout and value ranges"; else bad "synth files match the fixtures' layout and value ranges"; fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] || exit 1
[ "${skipped:-0}" -eq 0 ] || exit 77   # ctest: Skipped (part of the test could not run here)
