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
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_quantize SKIPPED ***"; exit 77
fi
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "*** python3 with numpy missing: test_quantize SKIPPED ***"; exit 77
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

# a random float qwen3 checkpoint (hidden 1024) with --hadamard-seed: codes and scales
# equal an independent numpy fold + ternarisation (W' = FWHT(S*W)/32, d = max|w'|)
python3 - "$W/rq3" "$Q3" <<'PY'
import json, shutil, struct, sys
import numpy as np
out, tok = sys.argv[1], sys.argv[2]
import os; os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1)
E, F, H, KV, HD, V = 1024, 2048, 8, 2, 128, 4096
cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": E, "intermediate_size": F,
       "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD, "num_hidden_layers": 1, "vocab_size": V,
       "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": False,
       "bos_token_id": 4091, "eos_token_id": 4093}
L = "model.layers.0."
t = {"model.embed_tokens.weight": (V, E), "lm_head.weight": (V, E), L + "self_attn.q_proj.weight": (H * HD, E),
     L + "self_attn.k_proj.weight": (KV * HD, E), L + "self_attn.v_proj.weight": (KV * HD, E),
     L + "self_attn.o_proj.weight": (E, H * HD), L + "mlp.gate_proj.weight": (F, E), L + "mlp.up_proj.weight": (F, E),
     L + "mlp.down_proj.weight": (E, F)}
t = {k: rng.normal(0, 0.02, s).astype(np.float32) for k, s in t.items()}
for k, n in [("model.norm.weight", E), (L + "input_layernorm.weight", E), (L + "post_attention_layernorm.weight", E),
             (L + "self_attn.q_norm.weight", HD), (L + "self_attn.k_norm.weight", HD)]:
    t[k] = rng.uniform(0.5, 1.5, n).astype(np.float32)
hdr, blobs, off = {}, [], 0
for k in sorted(t):
    b = t[k].astype("<f4").tobytes(); hdr[k] = {"dtype": "F32", "shape": list(t[k].shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
hb = json.dumps(hdr).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(hb))); f.write(hb); [f.write(b) for b in blobs]
json.dump(cfg, open(out + "/config.json", "w"))
for fn in ("tokenizer.json", "tokenizer_config.json"): shutil.copy(tok + "/" + fn, out + "/" + fn)
PY
run rq3 "$TERN" quantize "$W/rq3" "$W/rq3.gguf" --hadamard-seed 11 --quiet &&
if python3 - "$W/rq3" "$W/rq3.gguf" "$SRC" <<'PY'
import json, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[3] + "/tools")
import gguf_lite
from hf_from_gguf import fwht_rows
b = open(sys.argv[1] + "/model.safetensors", "rb").read(); n, = struct.unpack("<Q", b[:8]); h = json.loads(b[8:8 + n])
hf = {k: np.frombuffer(b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]], np.float32).reshape(v["shape"]) for k, v in h.items()}
r = gguf_lite.Reader(sys.argv[2]); kv = {k: v[1] for k, v in r.kv.items()}
signs, off = {}, 0
vals = np.array(kv["prism.hadamard.sign_values"], np.float64)
for w in kv["prism.hadamard.sign_widths"]: signs[int(w)] = vals[off:off + int(w)]; off += int(w)
names = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight"}
for t in r.tensors:
    if t["name"].startswith("blk.0.") and t["type"] == 142:
        m = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
        names[t["name"]] = "model.layers.0." + m[t["name"].split(".")[2]] + ".weight"
bad, total, flips = 0, 0, 0
for gname, hname in names.items():
    W = hf[hname].astype(np.float64)
    Wp = (fwht_rows(signs[W.shape[1]] * W, 1024) / 32.0).astype(np.float32)
    g = Wp.reshape(W.shape[0], -1, 128)
    d = np.abs(g).max(axis=2)
    codes = np.clip(np.floor(np.abs(g) / d[:, :, None] + 0.5) * np.sign(g), -1, 1) + 1
    c, s = gguf_lite.decode_ternary(r.by_name[gname])
    if not np.array_equal(s, d.astype(np.float16)): print(gname, "scales differ"); bad += 1
    flips += int((c != codes.reshape(c.shape)).sum()); total += c.size
print("code mismatches %d of %d" % (flips, total))
sys.exit(1 if bad or flips > total * 1e-6 else 0)
PY
then ok "random qwen3 + --hadamard-seed == numpy fold and ternarisation"; else bad "random qwen3 + --hadamard-seed == numpy fold and ternarisation"; fi

# refusals
"$TERN" quantize "$W/hf3" "$W/x.gguf" --hadamard-seed 1 --quiet >"$W/out" 2>&1
[ $? -eq 1 ] && grep -q "multiple of the Hadamard block" "$W/out" && ok "K=512 with block 1024 refused" || { cat "$W/out"; bad "K=512 with block 1024 refused"; }
"$TERN" quantize "$W/nope" "$W/x.gguf" --quiet >/dev/null 2>&1; [ $? -eq 1 ] && ok "missing HF dir fails" || bad "missing HF dir fails"
"$TERN" quantize "$W/hfC" "$W/x.gguf" --no-hadamard --hadamard-seed 3 >/dev/null 2>&1; [ $? -eq 2 ] && ok "conflicting options are a usage error" || bad "conflicting options"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
