#!/usr/bin/env bash
# test_quantize.sh - `tern quantize` reproduces fixture files from rebuilt HF checkpoints.
# tools/hf_from_gguf.py (numpy, independent of tern's C code) undoes the GGUF
# conventions of a fixture; quantizing the result must give the fixture back:
#   (1) qwen35 model C (written by PrismML's fork converter, Q2_0, no Hadamard):
#       --no-hadamard --ternary-alpha-beta (the converter quantizes in_proj_a/b too)
#       reproduces model-q2_0-nohadamard.gguf byte for byte (codes, scales, metadata,
#       tokenizer keys, tensor order);
#   (2) qwen35 model A: float W = W'R rebuilt (--unfold), quantized with model A's
#       signs (--hadamard model-pq2_0.gguf, and again with the MLX pack's
#       hadamard.json) reproduces model-pq2_0.gguf byte for byte;
#   (3) qwen3: model-q2_0.gguf reproduced byte for byte, also from a sharded
#       checkpoint (model.safetensors.index.json) with F16 matrices;
#   (4) --hadamard-seed is deterministic and writes a valid contract; bad input fails.
# Usage: bash test_quantize.sh /path/to/tern
set -u
TERN=${1:?usage: test_quantize.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ]; then
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_quantize SKIPPED ***"; exit 0
fi
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "*** python3 with numpy missing: test_quantize SKIPPED ***"; exit 0
fi
A=$FIX/qwen35-tiny; Q3=$FIX/qwen3-tiny
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass+1)); }
bad() { echo "not ok $1"; fail=$((fail+1)); }
run() { local n=$1; shift
  if "$@" >"$W/out" 2>&1; then return 0; else echo "  command failed: $*"; tail -5 "$W/out"; bad "$n"; return 1; fi; }
same() { if cmp "$2" "$3"; then ok "$1"; else bad "$1"; fi; }
HF="python3 $SRC/tools/hf_from_gguf.py"

run hfC $HF "$A/model-q2_0-nohadamard.gguf" "$W/hfC" --tokenizer-dir "$A" &&
run qC "$TERN" quantize "$W/hfC" "$W/c.gguf" --no-hadamard --ternary-alpha-beta --name qwen35-tiny-q2_0-nohadamard --quiet &&
  same "model C rebuilt + quantize --no-hadamard == model-q2_0-nohadamard.gguf" "$W/c.gguf" "$A/model-q2_0-nohadamard.gguf"

run hfCv $HF "$A/model-q2_0-nohadamard.gguf" "$W/hfCv" --tokenizer-dir "$A" --vl-layout --shards 2 &&
run qCv "$TERN" quantize "$W/hfCv" "$W/cv.gguf" --no-hadamard --ternary-alpha-beta --name qwen35-tiny-q2_0-nohadamard --quiet &&
  same "model C in the Qwen3.5 VL layout (text_config, model.language_model.*, visual/mtp skipped) == fixture" "$W/cv.gguf" "$A/model-q2_0-nohadamard.gguf"
rm -rf "$W/hfCv"

run hfA $HF "$A/model-pq2_0.gguf" "$W/hfA" --tokenizer-dir "$A" --unfold &&
run qA "$TERN" quantize "$W/hfA" "$W/a.gguf" --hadamard "$A/model-pq2_0.gguf" --name qwen35-tiny-pq2_0-hadamard --quiet &&
  same "model A unfolded + quantize --hadamard (GGUF signs) == model-pq2_0.gguf" "$W/a.gguf" "$A/model-pq2_0.gguf"
run qA2 "$TERN" quantize "$W/hfA" "$W/a2.gguf" --hadamard "$A/mlx-pack/hadamard.json" --name qwen35-tiny-pq2_0-hadamard --quiet &&
  same "model A + hadamard.json signs == model-pq2_0.gguf" "$W/a2.gguf" "$A/model-pq2_0.gguf"
run qA3 "$TERN" quantize "$W/hfA" "$W/a3.gguf" --hadamard "$A/model-pq2_0.gguf" --to ptq1_0 --name qwen35-tiny-ptq1_0-hadamard --quiet &&
  same "model A quantized straight to ptq1_0 == model-ptq1_0.gguf" "$W/a3.gguf" "$A/model-ptq1_0.gguf"

run hf3 $HF "$Q3/model-q2_0.gguf" "$W/hf3" --tokenizer-dir "$Q3" &&
run q3 "$TERN" quantize "$W/hf3" "$W/q3.gguf" --name qwen3-tiny-q2_0 --quiet &&
  same "qwen3 rebuilt + quantize == model-q2_0.gguf" "$W/q3.gguf" "$Q3/model-q2_0.gguf"

# sharded checkpoint (index.json, 3 shards) with F16 matrices and F32 norms
run hf3s $HF "$Q3/model-q2_0.gguf" "$W/hf3s" --tokenizer-dir "$Q3" --shards 3 --f16-matrices &&
run q3s "$TERN" quantize "$W/hf3s" "$W/q3s.gguf" --name qwen3-tiny-q2_0 --quiet &&
  same "qwen3 from 3 F16 shards == model-q2_0.gguf" "$W/q3s.gguf" "$Q3/model-q2_0.gguf"

# seeded signs: deterministic, and the contract holds (every folded K has signs)
run s1 "$TERN" quantize "$W/hfC" "$W/s1.gguf" --hadamard-seed 7 --quiet &&
run s2 "$TERN" quantize "$W/hfC" "$W/s2.gguf" --hadamard-seed 7 --quiet &&
  same "--hadamard-seed is deterministic" "$W/s1.gguf" "$W/s2.gguf"
if python3 - "$W/s1.gguf" <<PY
import sys; sys.path.insert(0, "$SRC/tools"); import gguf_lite
r = gguf_lite.Reader(sys.argv[1]); kv = {k: v[1] for k, v in r.kv.items()}
widths = [int(x) for x in kv["prism.hadamard.sign_widths"]]
assert sorted(widths) == [1024, 2048, 3072], widths
assert all(abs(int(v)) == 1 for v in kv["prism.hadamard.sign_values"])
assert kv["general.file_type"] == 141 and kv["prism.hadamard.gdn_v_grouped"] is True
names = kv["prism.hadamard.weight_names"]
assert all(r.by_name[n]["type"] == 142 for n in names) and "token_embd.weight" not in names
tern = [t["name"] for t in r.tensors if t["type"] == 142]
assert set(tern) == set(names) | {"token_embd.weight"}, "every ternary tensor folded"
assert r.by_name["blk.0.ssm_alpha.weight"]["type"] == 30
PY
then ok "seeded file honours the Hadamard contract"; else bad "seeded file honours the Hadamard contract"; fi

# refusals
"$TERN" quantize "$W/hf3" "$W/x.gguf" --hadamard-seed 1 --quiet >"$W/out" 2>&1
[ $? -eq 1 ] && grep -q "multiple of the Hadamard block" "$W/out" && ok "K=512 with block 1024 refused" || { cat "$W/out"; bad "K=512 with block 1024 refused"; }
"$TERN" quantize "$W/nope" "$W/x.gguf" --quiet >/dev/null 2>&1; [ $? -eq 1 ] && ok "missing HF dir fails" || bad "missing HF dir fails"
"$TERN" quantize "$W/hfC" "$W/x.gguf" --no-hadamard --hadamard-seed 3 >/dev/null 2>&1; [ $? -eq 2 ] && ok "conflicting options are a usage error" || bad "conflicting options"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
