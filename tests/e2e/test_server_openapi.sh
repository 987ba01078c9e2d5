#!/usr/bin/env bash
# test_server_openapi.sh - docs/openapi.yaml against the running `tern serve`
# (embedded default model) with schemathesis (tools/requirements.txt): generated
# requests for every path (embeddings on: --embedding); no 5xx, statuses, content types, headers and bodies
# as the description says. Bounded: few examples per operation, --ctx 128 (so no
# generation runs long), a wall-clock limit.
# Usage: bash test_server_openapi.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_openapi.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 77; fi
ST=$(command -v schemathesis || command -v st)
if [ -z "$ST" ]; then echo "*** SKIPPED: schemathesis missing (pip install -r tools/requirements.txt) ***"; exit 77; fi
# Conformance is checked on the release build; under ASan the server answers too slowly
# for schemathesis' per-request timeouts (a "network error" is not a finding there).
if [ "${TERN_SANITIZED:-0}" = 1 ]; then echo "*** SKIPPED: sanitizer build (run on the release build) ***"; exit 77; fi
unset TERN_MODEL
TMP=$(mktemp -d)
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
"$TERN" serve --port 0 --threads 2 --parallel 2 --queue 64 --ctx 128 --quiet --grace-s 1 --embedding >"$TMP/out" 2>"$TMP/err" &
SPID=$!
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/out" 2>/dev/null && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$TMP/out") || { echo "FAIL server did not start"; cat "$TMP/err"; exit 1; }
cd "$TMP" || exit 1   # schemathesis writes its cache in the working directory
timeout 150 "$ST" run "$SRC/docs/openapi.yaml" --url "$URL" --max-examples "${TERN_SCHEMATHESIS_EXAMPLES:-5}" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
  --phases examples,fuzzing --request-timeout 30 --seed 1 --no-color >"$TMP/st.log" 2>&1
rc=$?
tail -25 "$TMP/st.log"
if [ $rc -eq 0 ]; then echo "ok   schemathesis: docs/openapi.yaml holds"; else echo "FAIL schemathesis (rc $rc)"; fi
kill -0 "$SPID" 2>/dev/null || { echo "FAIL the server died"; rc=1; }
exit $rc
