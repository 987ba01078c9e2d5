#!/usr/bin/env bash
# test_run_tokenize.sh - `tern tokenize` / `tern detokenize` as scripts use them:
# ids for the fixture's tokenizer-cases.json strings (transformers' ids) through
# --text, --file and --json, --no-special, a byte-exact detokenize round trip
# (including invalid UTF-8 and a trailing newline), --help, usage errors (exit 2).
# Usage: bash test_run_tokenize.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_run_tokenize.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
if [ ! -d "$FIX/qwen3-tiny" ]; then echo "*** SKIPPED: fixtures missing ($FIX) ***"; exit 77; fi
pass=0; fail=0
check() { local name=$1; shift; if "$@"; then pass=$((pass+1)); echo "ok   $name"; else fail=$((fail+1)); echo "FAIL $name"; fi; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
M="$FIX/qwen3-tiny/model-q2_0.gguf"
# "Hello world" -> [3006, 334, 1273, 1385] per tokenizer-cases.json
check "--text" [ "$("$TERN" tokenize -m "$M" --text "Hello world")" = "3006 334 1273 1385" ]
check "--json" [ "$("$TERN" tokenize -m "$M" --json --text "Hello world")" = "[3006, 334, 1273, 1385]" ]
printf 'Hello world' >"$TMP/t"
check "--file" [ "$("$TERN" tokenize -m "$M" --file "$TMP/t")" = "3006 334 1273 1385" ]
check "--file - (stdin)" [ "$(printf 'Hello world' | "$TERN" tokenize -m "$M" --file -)" = "3006 334 1273 1385" ]
check "specials matched" [ "$("$TERN" tokenize -m "$M" --text "<|im_start|>")" = "4092" ]
check "--no-special keeps them text" [ "$("$TERN" tokenize -m "$M" --no-special --text "<|im_start|>" | wc -w)" -gt 1 ]
# every case of tokenizer-cases.json through the CLI
python3 - "$TERN" "$M" "$FIX/qwen3-tiny/tokenizer-cases.json" "$TMP" <<'PY'
import json, subprocess, sys
tern, model, cases, tmp = sys.argv[1:5]
bad = 0
for c in json.load(open(cases, encoding="utf-8"))["cases"]:
    p = f"{tmp}/case"
    open(p, "w", encoding="utf-8", newline="").write(c["text"])
    ids = json.loads(subprocess.run([tern, "tokenize", "-m", model, "--json", "--file", p], capture_output=True, text=True).stdout)
    dec = subprocess.run([tern, "detokenize", "-m", model, "--ids", ",".join(map(str, ids))], capture_output=True).stdout
    if ids != c["ids"] or dec.decode("utf-8") != c["decoded"]:
        bad += 1
        print("mismatch", repr(c["text"][:40]))
sys.exit(1 if bad else 0)
PY
check "tokenizer-cases.json through tokenize + detokenize" [ $? -eq 0 ]
# byte-exact round trip of odd bytes
printf 'caf\xc3\xa9 \xff\xfe raw\n\n' >"$TMP/odd"
ids=$("$TERN" tokenize -m "$M" --no-special --file "$TMP/odd")
"$TERN" detokenize -m "$M" --ids "$ids" >"$TMP/back"
check "detokenize is byte-exact (invalid UTF-8, trailing newlines)" cmp -s "$TMP/odd" "$TMP/back"
# usage
"$TERN" tokenize --help >/dev/null; check "tokenize --help" [ $? -eq 0 ]
"$TERN" detokenize --help >/dev/null; check "detokenize --help" [ $? -eq 0 ]
"$TERN" tokenize -m "$M" >/dev/null 2>"$TMP/e"; rc=$?
check "tokenize without text: exit 2, one line" [ $rc -eq 2 -a "$(wc -l <"$TMP/e")" -eq 1 ]
"$TERN" tokenize -m "$M" --text a --file b >/dev/null 2>&1; check "tokenize --text + --file: exit 2" [ $? -eq 2 ]
"$TERN" detokenize -m "$M" --ids 1,x >/dev/null 2>"$TMP/e"; rc=$?
check "detokenize bad ids: exit 2, one line" [ $rc -eq 2 -a "$(wc -l <"$TMP/e")" -eq 1 ]
"$TERN" detokenize -m "$M" --ids 99999 >/dev/null 2>"$TMP/e"; rc=$?
check "detokenize out-of-range id: exit 1 with message" [ $rc -eq 1 ] && grep -q "99999" "$TMP/e"
"$TERN" tokenize -m "$M" --bogus >/dev/null 2>&1; check "tokenize unknown flag: exit 2" [ $? -eq 2 ]
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
