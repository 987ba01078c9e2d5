#!/usr/bin/env bash
# test_convert.sh - `tern convert` round trips on the fixtures, compared with cmp:
#   qwen35 model A: pq2_0 -> ptq1_0 equals model-ptq1_0.gguf (general.name set with
#     --name: the two fixture files differ only in general.name and file_type),
#     ptq1_0 -> pq2_0 equals model-pq2_0.gguf, and pq2_0 -> ptq1_0 -> pq2_0 without
#     --name equals the input byte for byte;
#   qwen3: q2_0 (fork g128) <-> q2_0_g64 (mainline) equal the fixture files
#     (README: the files differ only in general.name and the Q2_0 layout);
#   GGUF -> mlx -> GGUF identical; the MLX pack written from model A has the
#     fixture pack's tensor bytes;
#   refusals: g64 with unequal half scales, bad --to, missing input.
# Usage: bash test_convert.sh /path/to/tern
set -u
TERN=${1:?usage: test_convert.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
if [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ]; then
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_convert SKIPPED ***"; exit 77
fi
A=$FIX/qwen35-tiny; Q3=$FIX/qwen3-tiny
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass+1)); }
bad() { echo "not ok $1"; fail=$((fail+1)); }
run() { # name, command... : expect success
  local n=$1; shift
  if "$@" >"$W/out" 2>&1; then return 0; else echo "  command failed: $*"; cat "$W/out"; bad "$n"; return 1; fi
}
same() { # name, a, b
  if cmp "$2" "$3"; then ok "$1"; else bad "$1"; fi
}

run pq2ptq "$TERN" convert "$A/model-pq2_0.gguf" "$W/a.gguf" --to ptq1_0 --name qwen35-tiny-ptq1_0-hadamard --quiet &&
  same "pq2_0 -> ptq1_0 == model-ptq1_0.gguf" "$W/a.gguf" "$A/model-ptq1_0.gguf"
run ptq2pq "$TERN" convert "$A/model-ptq1_0.gguf" "$W/b.gguf" --to pq2_0 --name qwen35-tiny-pq2_0-hadamard --quiet &&
  same "ptq1_0 -> pq2_0 == model-pq2_0.gguf" "$W/b.gguf" "$A/model-pq2_0.gguf"
run rt1 "$TERN" convert "$A/model-pq2_0.gguf" "$W/c.gguf" --to ptq1_0 --quiet &&
run rt2 "$TERN" convert "$W/c.gguf" "$W/d.gguf" --to pq2_0 --quiet &&
  same "pq2_0 -> ptq1_0 -> pq2_0 == input" "$W/d.gguf" "$A/model-pq2_0.gguf"
# without --name the outputs differ from the fixture files in general.name only
run nn1 "$TERN" convert "$A/model-pq2_0.gguf" "$W/nn1.gguf" --to ptq1_0 --quiet &&
run nn2 "$TERN" convert "$Q3/model-q2_0.gguf" "$W/nn2.gguf" --to q2_0_g64 --quiet &&
if python3 - "$SRC" "$W/nn1.gguf" "$A/model-ptq1_0.gguf" "$W/nn2.gguf" "$Q3/model-q2_0_g64.gguf" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/tools")
import gguf_lite
bad = 0
for a, b in [(sys.argv[2], sys.argv[3]), (sys.argv[4], sys.argv[5])]:
    x, y = gguf_lite.Reader(a), gguf_lite.Reader(b)
    diff = [k for k in list(x.kv) + list(y.kv) if str(x.kv.get(k)) != str(y.kv.get(k))]
    if sorted(set(diff)) != ["general.name"] or list(x.kv) != list(y.kv): print(a, "keys differ:", diff); bad += 1
    if [(t["name"], t["ne"], t["type"], t["offset"], t["data"]) for t in x.tensors] != \
       [(t["name"], t["ne"], t["type"], t["offset"], t["data"]) for t in y.tensors]: print(a, "tensors differ"); bad += 1
sys.exit(bad)
PY
then ok "without --name: only general.name differs from the fixtures"; else bad "without --name: only general.name differs"; fi

# model C (fork Q2_0 g128, no Hadamard) through every layout and back
run c1 "$TERN" convert "$A/model-q2_0-nohadamard.gguf" "$W/c1.gguf" --to q2_0_g64 --quiet &&
run c2 "$TERN" convert "$W/c1.gguf" "$W/c2.gguf" --to ptq1_0 --quiet &&
run c3 "$TERN" convert "$W/c2.gguf" "$W/c3.gguf" --to pq2_0 --quiet &&
run c4 "$TERN" convert "$W/c3.gguf" "$W/c4.gguf" --to q2_0 --quiet &&
  same "model C q2_0 -> g64 -> ptq1_0 -> pq2_0 -> q2_0 == input" "$W/c4.gguf" "$A/model-q2_0-nohadamard.gguf"
run g64 "$TERN" convert "$Q3/model-q2_0.gguf" "$W/g.gguf" --to q2_0_g64 --name qwen3-tiny-q2_0-g64 --quiet &&
  same "qwen3 q2_0 -> q2_0_g64 == model-q2_0_g64.gguf" "$W/g.gguf" "$Q3/model-q2_0_g64.gguf"
run g128 "$TERN" convert "$Q3/model-q2_0_g64.gguf" "$W/h.gguf" --to q2_0 --name qwen3-tiny-q2_0 --quiet &&
  same "qwen3 q2_0_g64 -> q2_0 == model-q2_0.gguf" "$W/h.gguf" "$Q3/model-q2_0.gguf"

# GGUF -> MLX -> GGUF
if "$TERN" convert "$A/model-pq2_0.gguf" "$W/pack" --to mlx --quiet >"$W/out" 2>&1; then
  run mlx2 "$TERN" convert "$W/pack" "$W/m.gguf" --to pq2_0 --quiet &&
    same "pq2_0 -> mlx -> pq2_0 == input" "$W/m.gguf" "$A/model-pq2_0.gguf"
  run mlx3 "$TERN" convert "$A/model-ptq1_0.gguf" "$W/pack2" --to mlx --quiet &&
  run mlx4 "$TERN" convert "$W/pack2" "$W/m2.gguf" --to ptq1_0 --quiet &&
    same "ptq1_0 -> mlx -> ptq1_0 == input" "$W/m2.gguf" "$A/model-ptq1_0.gguf"
  run mlx5 "$TERN" convert "$A/mlx-pack" "$W/m3.gguf" --to pq2_0 --name qwen35-tiny-pq2_0-hadamard --quiet &&
    same "fixture mlx-pack -> pq2_0 == model-pq2_0.gguf" "$W/m3.gguf" "$A/model-pq2_0.gguf"
  if [ -f "$W/pack/model.safetensors" ] && command -v python3 >/dev/null; then
    if python3 - "$W/pack/model.safetensors" "$A/mlx-pack/model.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n, = struct.unpack("<Q", b[:8]); h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
print("tensors differing from the fixture pack:", diff[:10], len(diff))
sys.exit(1 if diff else 0)
PY
    then ok "GGUF -> mlx tensors == fixture mlx-pack tensors"; else bad "GGUF -> mlx tensors == fixture mlx-pack tensors"; fi
  fi
  # model C (no Hadamard, ternary alpha/beta, ssm_out columns tiled) and qwen3 g64
  run mlxc1 "$TERN" convert "$A/model-q2_0-nohadamard.gguf" "$W/packC" --to mlx --quiet &&
  run mlxc2 "$TERN" convert "$W/packC" "$W/mc.gguf" --to q2_0 --quiet &&
    same "model C -> mlx -> q2_0 == input" "$W/mc.gguf" "$A/model-q2_0-nohadamard.gguf"
  run mlx31 "$TERN" convert "$Q3/model-q2_0_g64.gguf" "$W/pack3" --to mlx --quiet &&
  run mlx32 "$TERN" convert "$W/pack3" "$W/m3g.gguf" --to q2_0_g64 --quiet &&
    same "qwen3 g64 -> mlx -> q2_0_g64 == input" "$W/m3g.gguf" "$Q3/model-q2_0_g64.gguf"
  # the model C pack holds the HF (grouped) weights: compare with an independent numpy rebuild
  if [ -f "$W/packC/model.safetensors" ] && python3 "$SRC/tools/hf_from_gguf.py" "$A/model-q2_0-nohadamard.gguf" "$W/hfC" --tokenizer-dir "$A" >/dev/null 2>&1 &&
     python3 - "$W/packC/model.safetensors" "$W/hfC/model.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, "rb").read(); n, = struct.unpack("<Q", b[:8]); h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    dt = {"F32": np.float32, "F16": np.float16, "U32": np.uint32, "BF16": np.uint16}
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]], dtype=dt[v["dtype"]]).reshape(v["shape"]) for k, v in h.items()}
pk, hf = load(sys.argv[1]), load(sys.argv[2])
bad = 0
for name, ref in hf.items():
    p = "language_model." + name[:-len(".weight")] if name.endswith(".weight") else None
    if p and p + ".scales" in pk:
        w = pk[p + ".weight"]
        codes = np.stack([(w >> (2 * j)) & 3 for j in range(16)], axis=-1).reshape(w.shape[0], -1)
        val = (codes.astype(np.float32) - 1) * np.repeat(pk[p + ".scales"].astype(np.float32), 128, axis=1)
    else:
        val = pk["language_model." + name]
        if val.dtype == np.uint16: val = (val.astype(np.uint32) << 16).view(np.float32)
        if name.endswith("conv1d.weight"):
            val = val.reshape(ref.shape)   # MLX [C, k, 1] vs HF [C, 1, k]: same element order
        if name.endswith("A_log"):
            val, ref = np.float32(-np.exp(val.astype(np.float64))), np.float32(-np.exp(ref.astype(np.float64)))
        if "layernorm" in name or "q_norm" in name or "k_norm" in name or name == "model.norm.weight":
            ref = ref + np.float32(1)   # the pack keeps the GGUF's stored w+1
    if val.shape != ref.shape or not np.array_equal(val.astype(np.float32), ref.astype(np.float32)):
        print("differs:", name); bad += 1
sys.exit(1 if bad else 0)
PY
  then ok "model C pack == independent HF rebuild (grouped V order, ssm_out columns)"; else bad "model C pack == independent HF rebuild"; fi
else
  echo "  GGUF -> mlx failed:"; cat "$W/out"; bad "GGUF -> mlx"
fi

# refusals
python3 - "$Q3/model-q2_0_g64.gguf" "$W/bad64.gguf" "$SRC" <<'PY'
import sys
sys.path.insert(0, sys.argv[3] + "/tools")
b = bytearray(open(sys.argv[1], "rb").read())
import gguf_lite
r = gguf_lite.Reader(sys.argv[1])
t = r.by_name["blk.0.ffn_up.weight"]
off = r.data_offset + t["offset"] + 5 * (t["ne"][0] // 64) * 18 + 18  # row 5, block 1
b[off] ^= 1
open(sys.argv[2], "wb").write(b)
PY
if "$TERN" convert "$W/bad64.gguf" "$W/x.gguf" --to pq2_0 --quiet >"$W/out" 2>&1; then bad "g64 unequal halves refused"
elif grep -q "blk.0.ffn_up.weight" "$W/out" && grep -q "row 5" "$W/out"; then ok "g64 unequal halves refused naming tensor and row"
else cat "$W/out"; bad "g64 refusal message"; fi
[ ! -e "$W/x.gguf" ] && ok "no output left after a refusal" || bad "no output left after a refusal"
# a code 3 in a PQ2_0 tensor: refused naming tensor and row
python3 - "$A/model-pq2_0.gguf" "$W/code3.gguf" "$SRC" <<'PY'
import sys
sys.path.insert(0, sys.argv[3] + "/tools")
import gguf_lite
r = gguf_lite.Reader(sys.argv[1])
t = r.by_name["blk.0.ffn_up.weight"]
b = bytearray(open(sys.argv[1], "rb").read())
b[r.data_offset + t["offset"] + 3 * (t["ne"][0] // 128) * 34 + 2] = 0xFF  # row 3, block 0, qs[0]
open(sys.argv[2], "wb").write(b)
PY
if "$TERN" convert "$W/code3.gguf" "$W/x3.gguf" --to ptq1_0 --quiet >"$W/out" 2>&1; then bad "code 3 refused"
elif grep -q "blk.0.ffn_up.weight' row 3" "$W/out"; then ok "code 3 refused naming tensor and row"
else cat "$W/out"; bad "code 3 refusal message"; fi

# GDN dims that do not match the tensors (time_step_rank 24 -> 12): refused, naming a tensor
python3 - "$A/model-pq2_0.gguf" "$W/badrank.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
key = b"qwen35.ssm.time_step_rank"
i = b.index(key) + len(key)
assert struct.unpack_from("<II", b, i) == (4, 24)
struct.pack_into("<I", b, i + 4, 12)
open(sys.argv[2], "wb").write(b)
PY
if "$TERN" convert "$W/badrank.gguf" "$W/badpack" --to mlx --quiet >"$W/out" 2>&1; then bad "mismatched GDN dims refused"
elif grep -q "tensor 'blk.0" "$W/out"; then ok "mismatched GDN dims refused naming the tensor"
else cat "$W/out"; bad "mismatched GDN dims message"; fi
# --set: metadata keys written (new ones appended, existing ones replaced in place),
# every tensor's bytes unchanged when --to is the input's own layout
run set1 "$TERN" convert "$A/model-pq2_0.gguf" "$W/s.gguf" --to pq2_0 --quiet --set general.sampling.temp=f32:0.75 \
  --set general.sampling.top_k=i32:40 --set general.sampling.penalty_last_n=u32:128 --set general.name=str:renamed \
  --set x.flag=bool:true &&
if python3 - "$A/model-pq2_0.gguf" "$W/s.gguf" "$SRC/tools" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
from gguf_lite import Reader
a, b = Reader(sys.argv[1]), Reader(sys.argv[2])
assert [t["name"] for t in a.tensors] == [t["name"] for t in b.tensors]
for t in a.tensors:
    u = b.by_name[t["name"]]
    assert (t["data"], t["type"], t["ne"]) == (u["data"], u["type"], u["ne"]), t["name"]
ka, kb = list(a.kv), list(b.kv)
assert kb[:len(ka)] == ka, "existing keys keep their order"
assert kb[len(ka):] == ["general.sampling.temp", "general.sampling.top_k", "general.sampling.penalty_last_n", "x.flag"], kb[len(ka):]
assert b.kv["general.sampling.temp"][:2] == (6, __import__("numpy").float32(0.75)), b.kv["general.sampling.temp"]
assert b.kv["general.sampling.top_k"][:2] == (5, 40) and b.kv["general.sampling.penalty_last_n"][:2] == (4, 128)
assert b.kv["general.name"][1] == "renamed" and b.kv["x.flag"][:2] == (7, True)
for k in ka:
    if k != "general.name": assert a.kv[k][0] == b.kv[k][0] and str(a.kv[k][1]) == str(b.kv[k][1]), k
PY
then ok "--set writes the keys, tensors byte-identical"; else bad "--set writes the keys, tensors byte-identical"; fi
for badset in "nokey" "=f32:1" "k=f64:1" "k=f32:abc" "k=f32:inf" "k=i32:2147483648" "k=u32:-1" "k=bool:yes"; do
  if "$TERN" convert "$A/model-pq2_0.gguf" "$W/bad.gguf" --to pq2_0 --quiet --set "$badset" >"$W/out" 2>&1 || [ -e "$W/bad.gguf" ]; then
    bad "--set $badset refused"
  elif grep -q -- "--set" "$W/out"; then ok "--set $badset refused"; else cat "$W/out"; bad "--set $badset message"; fi
done
"$TERN" convert "$A/model-pq2_0.gguf" "$W/pk" --to mlx --quiet --set a=f32:1 >"$W/out" 2>&1 && bad "--set to an MLX pack refused" ||
  { grep -q "GGUF to GGUF" "$W/out" && ok "--set to an MLX pack refused" || { cat "$W/out"; bad "--set MLX message"; }; }
"$TERN" convert "$A/model-pq2_0.gguf" "$W/y.gguf" --to q3_0 >/dev/null 2>&1; [ $? -eq 2 ] && ok "bad --to is a usage error" || bad "bad --to is a usage error"
"$TERN" convert "$W/missing.gguf" "$W/y.gguf" --to pq2_0 >/dev/null 2>&1; [ $? -eq 1 ] && ok "missing input fails" || bad "missing input fails"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
