#!/usr/bin/env bash
# test_spec.sh - speculative decoding from the command line (issue 24): `tern run --spec
# ngram` and `--spec draft:PATH` give the same greedy text as without, at --spec-k 1, 4, 8,
# on the embedded model and the qwen35/qwen3 fixtures; a draft model with another tokenizer
# is refused naming the difference; `tern serve --spec ngram`: a greedy reply equals the one
# with "speculative": false, a non-boolean is a 400 naming the field, /metrics counts the
# drafted and accepted tokens; bad flags are usage errors; --help describes them.
# Usage: bash test_spec.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_spec.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
unset TERN_MODEL
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
fail=0
DEV=${TERN_E2E_DEVICE:+--device $TERN_E2E_DEVICE}
for c in run chat serve; do
  "$TERN" $c --help >"$TMP/h" 2>&1
  grep -q -- "--spec" "$TMP/h" || { echo "FAIL tern $c --help has no --spec"; fail=1; }
done
"$TERN" run -p x --spec bogus >/dev/null 2>"$TMP/e"; rc=$?
{ [ $rc = 2 ] && grep -q "spec" "$TMP/e"; } || { echo "FAIL --spec bogus: rc $rc"; fail=1; }
"$TERN" run -p x --spec-k 99 >/dev/null 2>"$TMP/e"; rc=$?
[ $rc = 2 ] || { echo "FAIL --spec-k 99: rc $rc"; fail=1; }
P=$(printf 'def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n')
models=("$SRC/models/tern-default.gguf")
[ -f "$FIX/qwen35-tiny/model-pq2_0.gguf" ] && models+=("$FIX/qwen35-tiny/model-pq2_0.gguf")
[ -f "$FIX/qwen3-tiny/model-q2_0.gguf" ] && models+=("$FIX/qwen3-tiny/model-q2_0.gguf")
for m in "${models[@]}"; do
  [ -f "$m" ] || continue
  a=$("$TERN" run -m "$m" --raw -p "$P" -n 48 --temp 0 --repeat-penalty 1 --threads 2 --quiet $DEV 2>/dev/null)
  for spec in ngram "draft:$m"; do
    for k in 1 4 8; do
      b=$("$TERN" run -m "$m" --raw -p "$P" -n 48 --temp 0 --repeat-penalty 1 --threads 2 --spec "$spec" --spec-k $k $DEV \
          2>"$TMP/err")
      if [ "$a" != "$b" ]; then echo "FAIL $(basename "$m") --spec ${spec%%:*} --spec-k $k differs"; fail=1; fi
      grep -q "speculation (" "$TMP/err" || { echo "FAIL no speculation line: $(tail -2 "$TMP/err")"; fail=1; }
    done
  done
done
[ $fail = 0 ] && echo "ok   run --spec ngram|draft: greedy text identical (k 1, 4, 8; ${#models[@]} models)"
# tern chat: three turns (the drafter also looks up the earlier turns), the same text
turns=$'Write: def add(a, b): return a + b\nNow write it again, exactly.\nAnd once more.\n/exit\n'
c0=$(printf '%s' "$turns" | "$TERN" chat -m "$SRC/models/tern-default.gguf" --temp 0 -n 48 --repeat-penalty 1 $DEV 2>/dev/null)
for spec in ngram "draft:$SRC/models/tern-default.gguf"; do
  c1=$(printf '%s' "$turns" | "$TERN" chat -m "$SRC/models/tern-default.gguf" --temp 0 -n 48 --repeat-penalty 1 --spec "$spec" $DEV \
       2>"$TMP/cerr")
  [ "$c0" == "$c1" ] || { echo "FAIL chat --spec ${spec%%:*}: the three turns differ"; fail=1; }
  [ "$(grep -c 'speculation (' "$TMP/cerr")" = 3 ] || { echo "FAIL chat --spec ${spec%%:*}: no speculation line per turn"; fail=1; }
done
[ $fail = 0 ] && echo "ok   chat --spec ngram|draft: three turns identical"
if [ -f "$FIX/qwen3-tiny/model-q2_0.gguf" ]; then
  "$TERN" run -m "$FIX/qwen3-tiny/model-q2_0.gguf" -p hi -n 4 --spec "draft:$SRC/models/tern-default.gguf" $DEV \
    >/dev/null 2>"$TMP/e"; rc=$?
  { [ $rc != 0 ] && grep -q "tokenizers differ" "$TMP/e"; } ||
    { echo "FAIL another tokenizer's draft model: rc $rc $(cat "$TMP/e")"; fail=1; }
  [ $fail = 0 ] && echo "ok   draft model with another tokenizer refused: $(grep -o 'the tokenizers differ[^(]*' "$TMP/e")"
fi
# the server
"$TERN" serve -m "$SRC/models/tern-default.gguf" --spec draft: >/dev/null 2>"$TMP/e"; rc=$?
[ $rc = 2 ] || { echo "FAIL serve --spec draft: (no path): rc $rc"; fail=1; }
if [ -f "$FIX/qwen3-tiny/model-q2_0.gguf" ]; then
  "$TERN" serve -m "$SRC/models/tern-default.gguf" --port 0 --spec "draft:$FIX/qwen3-tiny/model-q2_0.gguf" \
    >/dev/null 2>"$TMP/e"; rc=$?
  { [ $rc = 1 ] && grep -q "tokenizers differ" "$TMP/e"; } || { echo "FAIL serve: another tokenizer's draft model: rc $rc"; fail=1; }
fi
for spec in ngram "draft:$SRC/models/tern-default.gguf"; do
"$TERN" serve -m "$SRC/models/tern-default.gguf" --port 0 --threads 2 --quiet --parallel 2 --spec "$spec" $DEV \
  >"$TMP/s.out" 2>"$TMP/s.err" &
PIDS+=($!)
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/s.out" 2>/dev/null && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$TMP/s.out") || { echo "FAIL serve did not start"; cat "$TMP/s.err"; exit 1; }
timeout 120 python3 - "$URL" "$P" "${spec%%:*}" <<'PY' || fail=1
import json, sys, urllib.request, urllib.error
url, prompt = sys.argv[1].rstrip('/'), sys.argv[2]
def post(body):
    r = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r) as f: return 200, json.load(f)
    except urllib.error.HTTPError as e: return e.code, json.load(e)
base = {"prompt": prompt, "max_tokens": 64, "temperature": 0, "repeat_penalty": 1.0}
c1, a = post(base); c2, b = post(dict(base, speculative=False)); c3, e = post(dict(base, speculative="yes"))
ok = c1 == 200 and c2 == 200 and a["choices"][0]["text"] == b["choices"][0]["text"]
ok = ok and c3 == 400 and "speculative" in e["error"]["message"]
m = urllib.request.urlopen(url + "/metrics").read().decode()
vals = {l.split()[0]: float(l.split()[1]) for l in m.splitlines() if l.startswith("tern_spec_")}
ok = ok and vals.get("tern_spec_drafted_total", 0) > 0 and 0 < vals.get("tern_spec_accepted_total", 0) <= vals["tern_spec_drafted_total"]
print(("ok  " if ok else "FAIL") + " serve --spec %s: same greedy reply as \"speculative\": false, 400 on a non-boolean, metrics" % sys.argv[3],
      {k: v for k, v in vals.items()})
sys.exit(0 if ok else 1)
PY
kill "${PIDS[-1]}" 2>/dev/null; wait "${PIDS[-1]}" 2>/dev/null
rm -f "$TMP/s.out"
done
exit $fail
