#!/usr/bin/env bash
# test_serve_bench.sh - scripts/serve_bench.py against `tern serve` on the embedded model:
# every request of each concurrency level completes with exactly --output-len tokens
# (ignore_eos), the prompts come out near --input-len tokens (sized with /tokenize), the
# latency figures are ordered (0 < p50 <= p99), Poisson arrivals and the chat endpoint
# work, failed requests (prompts longer than the context) are counted as errors with exit
# status 1, an unreachable server exits 2, and --plot writes a PNG (when matplotlib is
# installed: tools/requirements.txt has it).
# Usage: bash test_serve_bench.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_serve_bench.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
BENCH="$SRC/scripts/serve_bench.py"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "*** SKIPPED: python3 missing ***"; exit 77; fi
unset TERN_MODEL
TMP=$(mktemp -d)
PID=""
cleanup() { [ -n "$PID" ] && { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }; rm -rf "$TMP"; }
trap cleanup EXIT
"$TERN" serve -m "$MODEL" --port 0 --threads 2 --parallel 2 --ctx 512 --quiet >"$TMP/out" 2>"$TMP/err" &
PID=$!
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/out" 2>/dev/null && break; sleep 0.05; done
URL=$(grep -o 'http://[^ ]*' "$TMP/out") || { echo "FAIL server did not start"; cat "$TMP/err"; exit 1; }
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails+1)); fi; }

python3 "$BENCH" --base-url "$URL" --label tern --concurrency 1,2 --num-requests 4 --input-len 48 \
  --output-len 12 --json-out "$TMP/a.json" --plot "$TMP/a.png" >"$TMP/a.txt" 2>&1
check "fixed concurrency: exit 0" "[ $? -eq 0 ]"
python3 - "$TMP/a.json" <<'PY' > "$TMP/a.chk" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert [L["concurrency"] for L in d["levels"]] == [1, 2], d["levels"]
for L in d["levels"]:
    assert L["requests"] == 4 and L["completed"] == 4 and L["errors"] == 0, L
    assert L["output_tokens"] == 4 * 12, L["output_tokens"]          # ignore_eos: exact
    assert 0.75 * 4 * 48 <= L["input_tokens"] <= 1.25 * 4 * 48, L["input_tokens"]
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_s"):
        assert 0 < L[k]["p50"] <= L[k]["p99"], (k, L[k])
    assert abs(L["output_tok_s"] - L["output_tokens"] / L["duration_s"]) < 1e-6
    assert L["total_tok_s"] > L["output_tok_s"] > 0
assert "/tokenize" in d["workload"]["prompt_sizing"], d["workload"]
print("json ok")
PY
check "fixed concurrency: counts, lengths and latencies ($(tail -n 1 "$TMP/a.chk"))" "grep -q 'json ok' '$TMP/a.chk'"
check "fixed concurrency: the table has both levels" "grep -q 'c=1' '$TMP/a.txt' && grep -q 'c=2' '$TMP/a.txt'"
if python3 -c "import matplotlib" 2>/dev/null; then
  check "--plot writes a PNG" "head -c 8 '$TMP/a.png' | od -An -tx1 | grep -q '89 50 4e 47'"
  python3 "$BENCH" --plot-from "$TMP/a.json" "$TMP/a.json" --plot "$TMP/b.png" >/dev/null 2>&1
  check "--plot-from two results writes a PNG" "[ -s '$TMP/b.png' ]"
else
  echo "note: matplotlib missing: the plot checks are skipped"
fi

python3 "$BENCH" --base-url "$URL" --request-rate 20 --num-requests 5 --input-len 32:0.5 --output-len 6 \
  --endpoint chat --json-out "$TMP/p.json" >"$TMP/p.txt" 2>&1
check "Poisson arrivals on the chat endpoint: exit 0" "[ $? -eq 0 ]"
check "Poisson arrivals: 5 requests of 6 tokens" "python3 -c \"import json; L=json.load(open('$TMP/p.json'))['levels'][0]; assert L['completed']==5 and L['output_tokens']==30 and L['request_rate']==20, L\""

python3 "$BENCH" --base-url "$URL" --concurrency 2 --num-requests 2 --input-len 900 --output-len 4 \
  --warmup 0 --json-out "$TMP/e.json" >"$TMP/e.txt" 2>&1
check "prompts past the context: exit 1" "[ $? -eq 1 ]"
check "prompts past the context: 2 errors counted with the server's reason" "python3 -c \"import json; L=json.load(open('$TMP/e.json'))['levels'][0]; assert L['errors']==2 and L['completed']==0 and 'HTTP 4' in L['error_samples'][0], L\""

python3 "$BENCH" --base-url "$URL" --concurrency 1 --num-requests 3 --input-len 24 --output-len 8 \
  --background-prompt 300 --json-out "$TMP/g.json" >"$TMP/g.txt" 2>&1
check "--background-prompt: exit 0" "[ $? -eq 0 ]"
check "--background-prompt: the level's figures exclude the long prompts, which all completed" "python3 -c \"import json; d=json.load(open('$TMP/g.json')); L=d['levels'][0]; b=L['background']; assert L['completed']==3 and L['output_tokens']==24 and L['input_tokens']<3*40, L; assert b['requests']>=1 and b['completed']==b['requests'] and b['prompt_tokens']==300 and d['workload']['background_prompt']==300, b\""
python3 "$BENCH" --base-url "$URL" --background-prompt -1 >"$TMP/bn.txt" 2>&1
check "--background-prompt -1 is refused" "[ $? -eq 2 ] && grep -q 'background-prompt' '$TMP/bn.txt'"

python3 "$BENCH" --base-url "$URL" --concurrency 2 --num-requests 4 --input-len 40 --output-len 8 \
  --check-alone --json-out "$TMP/s.json" >"$TMP/s.txt" 2>&1
check "--check-alone: the embedded model's greedy replies under load equal them sent alone" "[ $? -eq 0 ] && python3 -c \"import json; a=json.load(open('$TMP/s.json'))['levels'][0]['alone']; assert a['compared']==4 and a['equal']==4 and a['different']==0, a\""
python3 "$BENCH" --base-url "$URL" --check-alone --temperature 1 >"$TMP/st.txt" 2>&1
check "--check-alone at temperature 1 is refused" "[ $? -eq 2 ] && grep -q 'check-alone' '$TMP/st.txt'"
# a server whose replies depend on what else it serves: every reply differs, so the check must fail
cat > "$TMP/fake.py" <<'PY'
import itertools, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
n = itertools.count()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"{}")
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path != "/v1/completions":
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        k = next(n)
        for piece in ("reply", " %d" % k):
            self.wfile.write(b"data: " + json.dumps({"choices": [{"text": piece}]}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$TMP/fake.py" >"$TMP/fake.port" & FPID=$!
for _ in $(seq 1 200); do [ -s "$TMP/fake.port" ] && break; sleep 0.05; done
python3 "$BENCH" --base-url "http://127.0.0.1:$(cat "$TMP/fake.port")" --concurrency 2 --num-requests 3 --input-len 8 \
  --output-len 2 --warmup 0 --check-alone --json-out "$TMP/f.json" >"$TMP/f.txt" 2>&1
check "--check-alone: a server whose replies change fails the run, naming the difference" "[ $? -eq 1 ] && python3 -c \"import json; a=json.load(open('$TMP/f.json'))['levels'][0]['alone']; assert a['different']==3 and a['equal']==0 and 'first_difference_at_char' in a['samples'][0], a\""
kill $FPID 2>/dev/null; wait $FPID 2>/dev/null

m4xx() { curl -s "$URL/metrics" | awk '/^tern_requests_total\{status="4xx"\}/ {print $2}'; }
before=$(m4xx)
python3 "$BENCH" --base-url "$URL" --concurrency 2 --num-requests 4 --input-len 24 --output-len 200 \
  --cancel-after 3 --json-out "$TMP/x.json" >"$TMP/x.txt" 2>&1
check "--cancel-after: exit 0, every stream cancelled after 3 tokens, the slots idle again" "[ $? -eq 0 ] && python3 -c \"import json; L=json.load(open('$TMP/x.json'))['levels'][0]; a=L['after_cancel']; assert L['cancelled']==4 and L['errors']==0 and L['output_tokens']==12 and a['slots_busy']==0, L\""
# the closed streams are counted when the server notices them: wait for the counter (bounded)
for _ in $(seq 1 200); do after=$(m4xx); [ $((after - before)) -ge 4 ] && break; sleep 0.05; done
check "--cancel-after: the server counted the 4 closed streams (499: 4xx; the warm-up completes): $before -> $after" "[ $((after - before)) -eq 4 ]"
python3 "$BENCH" --base-url "$URL" --cancel-after 2 --check-alone >"$TMP/xc.txt" 2>&1
check "--cancel-after with --check-alone is refused" "[ $? -eq 2 ] && grep -q 'cancel-after' '$TMP/xc.txt'"

python3 "$BENCH" --base-url http://127.0.0.1:9 --concurrency 1 >"$TMP/u.txt" 2>&1
check "unreachable server: exit 2 with a message" "[ $? -eq 2 ] && grep -q 'cannot reach' '$TMP/u.txt'"
python3 "$BENCH" --base-url "$URL" --concurrency 0 >"$TMP/z.txt" 2>&1
check "--concurrency 0 is refused" "[ $? -eq 2 ] && grep -q 'concurrency' '$TMP/z.txt'"

[ "$fails" -eq 0 ] || { echo "--- a.txt"; cat "$TMP/a.txt" "$TMP/a.chk"; echo "--- e.txt"; cat "$TMP/e.txt"; exit 1; }
echo "test_serve_bench: all passed"
