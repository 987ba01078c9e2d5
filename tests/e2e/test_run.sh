#!/usr/bin/env bash
# test_run.sh - `tern run` end to end on the fixture models:
#   - greedy --raw continuation of the fixtures' chat-text sequence equals the
#     24 reference ids in the fixture README (transformers float64), which checks
#     tokenizer + model + greedy loop together;
#   - --json fields, -n, --stop, --ctx (context_full), seeds (reproducible),
#     streaming stdout equals the JSON text, stats on stderr;
#   - --help, bad flags and values exit 2 with one line.
# Usage: bash test_run.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_run.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
if [ ! -d "$FIX/qwen3-tiny" ]; then echo "*** SKIPPED: fixtures missing ($FIX) ***"; exit 77; fi
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $1"; }
bad() { fail=$((fail+1)); echo "FAIL $1"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
jget() { python3 -c "import json,sys; d=json.loads(sys.stdin.read()); v=d$1; print(' '.join(map(str,v)) if isinstance(v,list) else v)"; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
Q3="$FIX/qwen3-tiny/model-q2_0.gguf"; Q35="$FIX/qwen35-tiny/model-pq2_0.gguf"

# --- usage
"$TERN" run --help >"$TMP/h" 2>&1; check "help exits 0" [ $? -eq 0 ]
check "help lists options" grep -q -- "--top-p" "$TMP/h"
"$TERN" run -m "$Q3" -p hi --bogus >"$TMP/o" 2>"$TMP/e"; rc=$?
check "unknown flag exits 2" [ $rc -eq 2 ]
check "unknown flag: one line" [ "$(wc -l <"$TMP/e")" -eq 1 ]
for args in "--temp abc" "--top-p 0" "--top-k -1" "-n x" "--seed -3" "--min-p 2" "--ctx 1"; do
  "$TERN" run -m "$Q3" -p hi $args >/dev/null 2>"$TMP/e"; rc=$?
  check "bad value '$args' exits 2 with one line" [ $rc -eq 2 -a "$(wc -l <"$TMP/e")" -eq 1 ]
done
"$TERN" run -m "$Q3" >/dev/null 2>&1; check "missing -p exits 2" [ $? -eq 2 ]
"$TERN" run -m /nonexistent.gguf -p hi >/dev/null 2>"$TMP/e"; rc=$?
check "missing model exits 1 naming the file" [ $rc -eq 1 ] && grep -q nonexistent "$TMP/e"
# --batch-invariant: the CPU's batches of up to 5 rows are bit-identical already; serve refuses more
"$TERN" serve -m "$Q3" --batch-invariant --decode-batch 6 >/dev/null 2>"$TMP/e"; rc=$?
check "serve --batch-invariant --decode-batch 6 on the CPU exits 2 with one line naming it" \
  [ $rc -eq 2 -a "$(wc -l <"$TMP/e")" -eq 1 ] && grep -q -- "--batch-invariant" "$TMP/e"
a=$("$TERN" run -m "$Q3" -p hi -n 6 --temp 0 --json 2>/dev/null | tail -n 1 | jget "['tokens']")
b=$("$TERN" run -m "$Q3" -p hi -n 6 --temp 0 --json --batch-invariant 2>/dev/null | tail -n 1 | jget "['tokens']")
check "run --batch-invariant on the CPU: the same greedy tokens" [ -n "$a" -a "$a" = "$b" ]

# an A/B switch with a value it does not know: a warning naming it, and the run goes on
for ev in TERN_CUDA_GEMM=wgmma3 TERN_CUDA_GDN=walk TERN_CUDA_TC=fp8; do
  env "$ev" "$TERN" run -m "$Q3" -p hi -n 2 --temp 0 --quiet >/dev/null 2>"$TMP/e"; rc=$?
  check "$ev: exits 0, a warning naming it" [ $rc -eq 0 ] && grep -q "tern: $ev is not" "$TMP/e"
done
TERN_CUDA_GEMM=wgmma2 "$TERN" run -m "$Q3" -p hi -n 2 --temp 0 --quiet >/dev/null 2>"$TMP/e"; rc=$?
check "TERN_CUDA_GEMM=wgmma2: exits 0 without a warning" [ $rc -eq 0 ] && ! grep -q "TERN_CUDA_GEMM" "$TMP/e"

# --- greedy continuation vs the fixture reference (README table)
ref_text() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sequences'][2]['text']+'X', end='')" "$1"; }
ref_cont() { grep -E "$2" "$1" | head -1 | awk -F'|' '{print $(NF-1)}' | xargs; }
for spec in "qwen3-tiny|$Q3|^\| chat-text \||53" "qwen35-tiny|$Q35|^\| A \| chat-text \||80"; do
  IFS='|' read -r d model pat n <<<"$(echo "$spec" | sed 's/\\|/\x01/g' | tr '\001' '!' )"
  pat=$(echo "$pat" | sed 's/!/\\|/g')
  TEXT=$(ref_text "$FIX/$d/reference.json"); TEXT=${TEXT%X}
  want=$(ref_cont "$FIX/$d/README.md" "$pat")
  "$TERN" run -m "$model" --raw -p "$TEXT" --temp 0 -n 24 --json --quiet >"$TMP/j" 2>"$TMP/e"
  got=$(jget "['tokens']" <"$TMP/j")
  check "$d greedy continuation = reference ($want)" [ -n "$want" -a "$got" = "$want" ]
  check "$d prompt_tokens = $n" [ "$(jget "['prompt_tokens']" <"$TMP/j")" = "$n" ]
  check "$d stop_reason max_tokens" [ "$(jget "['stop_reason']" <"$TMP/j")" = "max_tokens" ]
  check "$d json has speeds" python3 -c "import json,sys; d=json.load(open('$TMP/j')); assert d['pp_tok_s']>0 and d['tg_tok_s']>0 and 'text' in d"
done

# --- streaming text equals the JSON text; stats on stderr
TEXT=$(ref_text "$FIX/qwen3-tiny/reference.json"); TEXT=${TEXT%X}
"$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 24 >"$TMP/stream" 2>"$TMP/err"
"$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 24 --json --quiet >"$TMP/j"
python3 -c "import json; t=json.load(open('$TMP/j'))['text']; s=open('$TMP/stream',encoding='utf-8').read(); assert s==t+'\n', (s,t)"
check "stream == json text" [ $? -eq 0 ]
check "stderr has speed and stop reason" grep -q "tok/s.*stop: max_tokens" "$TMP/err"

# --- -n, --stop, --ctx
"$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 5 --json --quiet >"$TMP/j"
check "-n 5 gives 5 tokens" [ "$(jget "['generated_tokens']" <"$TMP/j")" = 5 ]
full=$("$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 24 --json --quiet | jget "['text']")
stop=$(python3 -c "import sys; t=sys.argv[1]; print(t[len(t)//2:len(t)//2+4])" "$full")
"$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 24 --stop "$stop" --json --quiet >"$TMP/j"
python3 - "$TMP/j" "$full" "$stop" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); full, stop = sys.argv[2], sys.argv[3]
assert d["stop_reason"] == "stop_string", d
assert d["text"] == full[:full.index(stop)], (d["text"], full, stop)
PY
check "--stop cuts before the stop string" [ $? -eq 0 ]
"$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 24 --ctx 60 --json --quiet >"$TMP/j"
# 53 prompt + 7 evaluated fill 60 positions; the 8th id is sampled from the last logits
check "--ctx 60: context_full after 8 tokens" [ "$(jget "['stop_reason']" <"$TMP/j")" = context_full -a "$(jget "['generated_tokens']" <"$TMP/j")" = 8 ]
"$TERN" run -m "$Q3" --raw -p "$TEXT" --ctx 40 -n 4 >/dev/null 2>"$TMP/e"; rc=$?
check "prompt longer than --ctx fails with a message" [ $rc -eq 1 ] && grep -qi "context" "$TMP/e"

# --- seeds
a=$("$TERN" run -m "$Q35" -p "Tell me a story" --temp 1.0 --top-k 0 --top-p 1 --seed 7 -n 16 --json --quiet | jget "['tokens']")
b=$("$TERN" run -m "$Q35" -p "Tell me a story" --temp 1.0 --top-k 0 --top-p 1 --seed 7 -n 16 --json --quiet | jget "['tokens']")
c=$("$TERN" run -m "$Q35" -p "Tell me a story" --temp 1.0 --top-k 0 --top-p 1 --seed 8 -n 16 --json --quiet | jget "['tokens']")
check "same seed, same tokens" [ -n "$a" -a "$a" = "$b" ]
check "other seed, other tokens" [ "$a" != "$c" ]

# --- chat mode: prompt through the template, --no-think, --system; MLX pack folder
"$TERN" run -m "$Q35" -p "Hi" --no-think --system "Be brief." --temp 0 -n 4 --json --quiet >"$TMP/j"
check "chat prompt tokens (qwen35, system + no-think)" [ "$(jget "['chat']" <"$TMP/j")" = True ]
"$TERN" run -m "$FIX/qwen35-tiny/mlx-pack" --raw -p "$TEXT" --temp 0 -n 4 --json --quiet >"$TMP/j" 2>"$TMP/e"
check "MLX pack folder runs" [ $? -eq 0 ]
# --- prompt from stdin, tools block in the prompt
a=$("$TERN" run -m "$Q3" -p "Weather?" --temp 0 -n 2 --json --quiet | jget "['prompt_tokens']")
b=$(printf 'Weather?' | "$TERN" run -m "$Q3" -p - --temp 0 -n 2 --json --quiet | jget "['prompt_tokens']")
check "-p - reads stdin" [ -n "$a" -a "$a" = "$b" ]
echo '[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]' >"$TMP/tools.json"
c=$("$TERN" run -m "$Q3" -p "Weather?" --tools "$TMP/tools.json" --temp 0 -n 2 --json --quiet | jget "['prompt_tokens']")
check "--tools adds the tools block ($a -> $c prompt tokens)" [ -n "$c" ] && [ "$c" -gt $((a + 50)) ]
echo '{"not": "a list"}' >"$TMP/bad.json"
"$TERN" run -m "$Q3" -p "x" --tools "$TMP/bad.json" -n 1 >/dev/null 2>"$TMP/e"; rc=$?
check "--tools with a non-array fails with a message" [ $rc -eq 1 ] && grep -q "array" "$TMP/e"
# --- memory on demand and the fit check (session.c): the KV cache's pages are backed
# as positions fill, so RSS after load does not follow --ctx; a context that cannot fit
# is refused before any allocation, naming the sizes and a --ctx that fits
rss() { /usr/bin/time -f '%M' -o "$TMP/t" "$TERN" run -m "$Q3" --raw -p hi -n 2 --quiet --ctx "$1" >/dev/null 2>&1; tail -n 1 "$TMP/t"; }
r1=$(rss 4096); r2=$(rss 1048576)
check "RSS independent of --ctx ($r1 KB at 4096, $r2 KB at 1048576; KV would be 2 GiB in f16)" \
  [ -n "$r1" -a -n "$r2" ] && [ "$r2" -lt $((r1 + 51200)) ]
"$TERN" run -m "$Q3" --raw -p hi -n 2 --ctx 4194304 --cache-type f32 >/dev/null 2>"$TMP/e"; rc=$?
avail=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
if [ "${avail:-0}" -lt 30000000 ]; then
  check "a context that cannot fit exits 1 naming the sizes, the type and a --ctx that fits" \
    [ $rc -eq 1 ] && grep -q "KV cache [0-9]* MiB in f32" "$TMP/e" && grep -q -- "--ctx [0-9]* would fit" "$TMP/e"
  if [ "${avail:-0}" -gt 10000000 ]; then
    check "the refusal names the q8_0 cache that would fit (8.5 GiB)" grep -q -- "--cache-type q8_0" "$TMP/e"
  fi
else
  check "a 32 GiB KV cache fits this machine's memory and runs" [ $rc -eq 0 ]
fi
# --- KV cache types: each runs, the load line names it, a bad one is a usage error
for ct in f32 f16 bf16 q8_0; do
  "$TERN" run -m "$Q3" --raw -p "$TEXT" --temp 0 -n 4 --cache-type $ct >/dev/null 2>"$TMP/e"; rc=$?
  check "--cache-type $ct runs and reports its cache bytes" [ $rc -eq 0 ] && grep -q "KV cache $ct: .* MiB at ctx" "$TMP/e"
done
"$TERN" run -m "$Q3" --raw -p hi -n 1 -ctk f16 -ctv q8_0 >/dev/null 2>"$TMP/e"
check "-ctk / -ctv set keys and values apart" grep -q "KV cache f16/q8_0" "$TMP/e"
"$TERN" run -m "$Q3" --raw -p hi -n 1 --cache-type q4 >/dev/null 2>"$TMP/e"; rc=$?
check "a bad --cache-type exits 2 naming the choices" [ $rc -eq 2 ] && grep -q "q8_0" "$TMP/e"
"$TERN" run -m "$Q3" --raw -p hi -n 1 --quiet --cache-type q8_0 >/dev/null 2>"$TMP/e"
check "--quiet silences the cache line" [ ! -s "$TMP/e" ]
# the thinking default: the embedded model's tern.chat.thinking key (false); a key of
# the wrong type is ignored with a warning naming it, the run still works
"$TERN" run -p "Hi" -n 1 --temp 0 2>"$TMP/e" >/dev/null
check "embedded model: thinking off by its tern.chat.thinking key" grep -q "thinking off" "$TMP/e"
if "$TERN" convert "$SRC/models/tern-default.gguf" "$TMP/badkey.gguf" --to pq2_0 --quiet \
     --set tern.chat.thinking=str:no; then
  "$TERN" run -m "$TMP/badkey.gguf" -p "Hi" -n 1 --temp 0 2>"$TMP/e" >/dev/null; rc=$?
  check "a STRING tern.chat.thinking: warned, ignored, exit 0" \
    [ $rc -eq 0 ] && grep -q "ignoring tern.chat.thinking.*expected BOOL" "$TMP/e"
else bad "tern convert --set tern.chat.thinking=str:no"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
