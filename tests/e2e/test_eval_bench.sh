#!/usr/bin/env bash
# test_eval_bench.sh - `tern bench model` on the tiny fixtures: --json carries the
# promised keys with sane values (tg/pp > 0, bytes_per_token = the model's weight
# traffic, ceiling > 0, peak RSS > 0); --depth with a real prefill and with
# --depth-fill random; --help exits 0; bad flags exit 2.
# Usage: bash test_eval_bench.sh /path/to/tern
set -u
TERN=${1:?usage: test_eval_bench.sh /path/to/tern}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-}}
if [ -z "$FIX" ] || [ ! -d "$FIX/qwen35-tiny" ]; then
  echo "*** FIXTURES MISSING: set TERN_FIXTURES; test_eval_bench SKIPPED ***"; exit 77
fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass+1)); }
bad() { echo "not ok $1"; fail=$((fail+1)); }
for m in qwen35-tiny/model-pq2_0.gguf qwen3-tiny/model-q2_0.gguf; do
  if "$TERN" bench model -m "$FIX/$m" --threads 1 -p 8 -n 4 --reps 1 --json >"$W/j" 2>"$W/e"; then
    if python3 - "$W/j" "$FIX/$m" <<'EOF'
import json, os, sys
j = json.loads(open(sys.argv[1]).read())
for k in ("tg_tok_s", "pp_tok_s", "bytes_per_token", "ceiling_gbps", "peak_rss_bytes"):
    assert k in j, k
assert j["tg_tok_s"] > 0 and j["pp_tok_s"] > 0 and j["ceiling_gbps"] > 0 and j["peak_rss_bytes"] > 0
size = os.path.getsize(sys.argv[2])
# decode traffic: every weight but the embedding table; less than the file, more than half of it
assert 0.5 * size < j["bytes_per_token"] < size, (j["bytes_per_token"], size)
print("  tg %.1f tok/s, pp %.1f tok/s, %.0f bytes/token" % (j["tg_tok_s"], j["pp_tok_s"], j["bytes_per_token"]))
EOF
    then ok "bench json $m"; else cat "$W/j"; bad "bench json $m"; fi
  else cat "$W/e"; bad "bench $m"; fi
done
# --depth: a real prefill (the default) and --depth-fill random put decode at the same
# positions with the same KV bytes per token (q8_0 cache: every attention layer's keys and
# values at the tg steps' middle position); a bad --depth-fill value exits 2
for fill in real random; do
  if "$TERN" bench model -m "$FIX/qwen35-tiny/model-pq2_0.gguf" --threads 1 -p 8 -n 4 --reps 2 --depth 40 \
       --depth-fill $fill --cache-type q8_0 --json >"$W/d_$fill" 2>"$W/e"; then
    if python3 - "$W/d_$fill" $fill <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["depth"] == 40 and j["depth_fill"] == sys.argv[2], j
assert j["tg_pos"] == 40 + 2 * 8 + 4 // 2, j["tg_pos"]      # depth + reps * p + n/2
assert j["cache_type_k"] == "q8_0" and j["cache_type_v"] == "q8_0"
assert j["kv_bytes_per_token"] > 0 and j["tg_tok_s"] > 0 and j["pp_tok_s"] > 0
assert j["bytes_per_token"] == j["weight_bytes_per_token"] + j["kv_bytes_per_token"]
print("  depth 40 (%s): tg_pos %d, kv bytes/token %d" % (sys.argv[2], j["tg_pos"], j["kv_bytes_per_token"]))
EOF
    then ok "bench --depth-fill $fill"; else cat "$W/d_$fill"; bad "bench --depth-fill $fill"; fi
  else cat "$W/e"; bad "bench --depth 40 --depth-fill $fill"; fi
done
if [ -s "$W/d_real" ] && [ -s "$W/d_random" ] && python3 - "$W/d_real" "$W/d_random" <<'EOF'
import json, sys
a, b = (json.loads(open(p).read()) for p in sys.argv[1:3])
assert a["kv_bytes_per_token"] == b["kv_bytes_per_token"] and a["tg_pos"] == b["tg_pos"], (a, b)
EOF
then ok "depth fills: same positions and bytes"; else bad "depth fills: same positions and bytes"; fi
# -p LIST: each prompt length measured, the projections' int8 operations per prompt token
# equal to 2 x the matrices' weights as the fixture's HF config gives them (the head, made
# for the last position only, left out); no int8 rate on the CPU
if "$TERN" bench model -m "$FIX/qwen3-tiny/model-q2_0.gguf" --threads 1 -p 8,16,12 -n 2 --reps 1 --json >"$W/pl" 2>"$W/e" &&
   python3 - "$W/pl" "$FIX/qwen3-tiny/reference.json" <<'EOF'
import json, sys
j = json.loads(open(sys.argv[1]).read())
c = json.load(open(sys.argv[2]))["config"]["hf_config"]
h, nh, nkv, hd, ff, L = (c[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                         "intermediate_size", "num_hidden_layers"))
want = 2 * L * (h * nh * hd + 2 * h * nkv * hd + nh * hd * h + 3 * h * ff)
assert j["prompt_ops_per_token"] == want, (j["prompt_ops_per_token"], want)
assert [p["tokens"] for p in j["prompts"]] == [8, 16, 12], j["prompts"]
assert all(p["tok_s"] > 0 and p["int8_share"] == 0 for p in j["prompts"]) and j["int8_tops"] == 0, j["prompts"]
assert j["prompts"][0]["tok_s"] == j["pp_tok_s"] and j["prompt_tokens"] == 8
EOF
then ok "bench -p list"; else cat "$W/pl" "$W/e"; bad "bench -p list"; fi
"$TERN" bench model -m "$FIX/qwen3-tiny/model-q2_0.gguf" -p 8,16 --depth 4 >/dev/null 2>&1
if [ $? = 2 ]; then ok "-p list with --depth refused"; else bad "-p list with --depth refused"; fi
"$TERN" bench model -m "$FIX/qwen3-tiny/model-q2_0.gguf" --depth 8 --depth-fill zeros >/dev/null 2>&1
if [ $? = 2 ]; then ok "bad --depth-fill"; else bad "bad --depth-fill"; fi
if "$TERN" bench model --help >/dev/null; then ok "help"; else bad "help"; fi
"$TERN" bench model -m "$FIX/qwen3-tiny/model-q2_0.gguf" -p 0 >/dev/null 2>&1
if [ $? = 2 ]; then ok "bad -p"; else bad "bad -p"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
