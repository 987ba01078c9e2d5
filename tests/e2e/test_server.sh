#!/usr/bin/env bash
# test_server.sh - `tern serve` end to end on the embedded default model, driven
# by python3's standard library (http.client):
#   - /health, /v1/models; greedy /v1/completions and /v1/chat/completions equal
#     `tern run --raw` / `tern run` (chat) greedy output for the same prompt and
#     -n, and their usage counts equal `tern tokenize` / `tern run` counts;
#   - streaming (SSE) deltas add up to the non-streamed reply (role chunk first,
#     finish_reason last, usage chunk, [DONE]); seeds reproduce, and equal
#     `tern run` with the same seed and sampler settings; stop strings;
#     finish_reason length;
#   - 3 concurrent requests each equal their solo greedy result;
#   - errors: bad JSON, wrong types, n=2, too long a prompt (400), body over
#     --max-body (413), unknown path (404), wrong method (405), API key (401),
#     full queue (503), each with an OpenAI error object;
#   - a client that disconnects mid-stream frees its slot; /health still answers;
#     SIGTERM ends the server with exit code 0.
# Usage: bash test_server.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "*** SKIPPED: python3 missing ***"; exit 77; fi
unset TERN_MODEL
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
# The sanitizer build is slower: fewer tokens there.
N=24; [ "${TERN_SANITIZED:-0}" = 1 ] && N=12

# start NAME ARGS...: a server on a free port; its URL in $TMP/NAME.url
start() {
  local name=$1; shift
  "$TERN" serve --port 0 --threads 2 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  eval "${name}_PID=$!"
  for _ in $(seq 1 1200); do
    grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break
    sleep 0.05
  done
  grep -o 'http://[^ ]*' "$TMP/$name.out" >"$TMP/$name.url" || { echo "FAIL $name did not start"; cat "$TMP/$name.err"; exit 1; }
}
start main --parallel 3 --ctx 512 --max-body 65536
start small --parallel 1 --queue 1 --ctx 4096 --api-key sekret --quiet

# References from the CLI (same binary, same model)
P1="The Linux kernel provides"; P2="import os"; P3="To build the documentation, run"; Q="How do I load a module?"
for i in 1 2 3; do
  eval "p=\$P$i"
  "$TERN" run --raw -p "$p" --temp 0 -n $N --json --quiet --threads 2 >"$TMP/run$i.json" || exit 1
  "$TERN" tokenize --text "$p" --json >"$TMP/tok$i.json" || exit 1
done
"$TERN" run -p "$Q" --no-think --temp 0 -n $N --json --quiet --threads 2 >"$TMP/chat.json" || exit 1
"$TERN" run --raw -p "$P1" --temp 0.9 --top-k 40 --top-p 0.9 --min-p 0 --seed 5 -n $N --json --quiet --threads 2 \
  >"$TMP/seed.json" || exit 1

python3 - "$TMP" "$N" "$P1" "$P2" "$P3" "$Q" <<'PY'
import http.client, json, socket, sys, threading, time
tmp, N = sys.argv[1], int(sys.argv[2])
prompts, Q = sys.argv[3:6], sys.argv[6]
url = open(f"{tmp}/main.url").read().split()[0]
small = open(f"{tmp}/small.url").read().split()[0]
def hp(u):
    h, p = u.replace("http://", "").rsplit(":", 1)
    return h, int(p)
fails = 0
def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{info}]"))
    if not cond: fails += 1

def req(method, path, body=None, headers=None, base=url, raw=None):
    c = http.client.HTTPConnection(*hp(base), timeout=120)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    try:
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    except (BrokenPipeError, ConnectionResetError) as e:
        return -1, str(e).encode()
    finally:
        c.close()

def post(path, body, **kw):
    st, b = req("POST", path, body, **kw)
    try: return st, json.loads(b)
    except Exception: return st, {"_raw": b}

def sse(path, body):
    """Stream; returns the list of decoded events and whether [DONE] came last."""
    c = http.client.HTTPConnection(*hp(url), timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    ctype = r.getheader("Content-Type")
    events, done = [], False
    for line in r.read().decode().split("\n\n"):
        if not line.strip(): continue
        assert line.startswith("data: "), line
        if line == "data: [DONE]": done = True; continue
        check_done_last = not done
        events.append(json.loads(line[6:]))
    c.close()
    return r.status, ctype, events, done

def is_error(obj, status):
    e = obj.get("error") if isinstance(obj, dict) else None
    return isinstance(e, dict) and all(isinstance(e.get(k), str) for k in ("message", "type", "code"))

# --- health and models
st, h = post("/health", None) if False else (None, None)
st, b = req("GET", "/health"); h = json.loads(b)
check("GET /health 200 ok", st == 200 and h["status"] == "ok" and h["slots_total"] == 3 and h["slots_busy"] == 0, b)
st, b = req("GET", "/v1/models"); m = json.loads(b)
check("GET /v1/models lists the model", st == 200 and m["object"] == "list" and m["data"][0]["id"] == "tern-default.gguf", b)

# --- greedy completions == tern run --raw; usage == tern tokenize / tern run
solo = []
for i, p in enumerate(prompts, 1):
    ref = json.load(open(f"{tmp}/run{i}.json")); ntok = len(json.load(open(f"{tmp}/tok{i}.json")))
    st, r = post("/v1/completions", {"prompt": p, "max_tokens": N, "temperature": 0})
    ok = st == 200
    text = r["choices"][0]["text"] if ok else None
    solo.append(text)
    check(f"completion {i} greedy == tern run --raw", ok and text == ref["text"], (st, text, ref["text"]))
    if ok:
        u = r["usage"]
        check(f"completion {i} usage: prompt {ntok} (tern tokenize), completion {ref['generated_tokens']}",
              u["prompt_tokens"] == ntok == ref["prompt_tokens"] and u["completion_tokens"] == ref["generated_tokens"]
              and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u)
        check(f"completion {i} object fields", r["object"] == "text_completion" and r["id"].startswith("cmpl-")
              and r["model"] == "tern-default.gguf" and isinstance(r["created"], int)
              and r["timings"]["predicted_n"] == u["completion_tokens"], r)
        if ref["stop_reason"] == "max_tokens":
            check(f"completion {i} finish_reason length", r["choices"][0]["finish_reason"] == "length", r)

# --- greedy chat == tern run --no-think (the server serves the embedded raw-text model with thinking off by default)
ref = json.load(open(f"{tmp}/chat.json"))
st, r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": Q}], "max_tokens": N, "temperature": 0})
check("chat 200", st == 200, r)
if st == 200:
    msg = r["choices"][0]["message"]
    check("chat greedy content/reasoning == tern run", msg["role"] == "assistant" and msg["content"] == ref["content"]
          and msg.get("reasoning_content", "") == ref["reasoning"], (msg, ref))
    check("chat usage == tern run counts", r["usage"]["prompt_tokens"] == ref["prompt_tokens"]
          and r["usage"]["completion_tokens"] == ref["generated_tokens"], (r["usage"], ref))
    check("chat object", r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-"), r)
    # streaming chat: deltas add up to the same message
    st, ctype, ev, done = sse("/v1/chat/completions", {"messages": [{"role": "user", "content": Q}], "max_tokens": N,
                              "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    check("chat stream 200 text/event-stream, [DONE] last", st == 200 and ctype.startswith("text/event-stream") and done, ctype)
    check("chat stream: role chunk first", ev and ev[0]["choices"][0]["delta"].get("role") == "assistant", ev[:1])
    ch = [e for e in ev if e["choices"]]
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in ch)
    reasoning = "".join(e["choices"][0]["delta"].get("reasoning_content", "") for e in ch)
    check("chat stream deltas == non-streamed message", content == msg["content"] and reasoning == msg.get("reasoning_content", ""),
          (content, reasoning, msg))
    check("chat stream: finish_reason only on the last choice chunk",
          ch[-1]["choices"][0]["finish_reason"] == r["choices"][0]["finish_reason"]
          and all(e["choices"][0]["finish_reason"] is None for e in ch[:-1]), ch[-1])
    # (the same prompt again: the prefix cache may hold all of it, so cached_tokens differs)
    strip = lambda u: {k: v for k, v in u.items() if k != "prompt_tokens_details"}
    check("chat stream: usage chunk last", not ev[-1]["choices"] and strip(ev[-1]["usage"]) == strip(r["usage"]), ev[-1])
    check("chat stream: one id, chunk objects", len({e["id"] for e in ev}) == 1
          and all(e["object"] == "chat.completion.chunk" for e in ev), ev[:2])

# --- streaming completion == non-streamed
st, ctype, ev, done = sse("/v1/completions", {"prompt": prompts[0], "max_tokens": N, "temperature": 0, "stream": True})
text = "".join(e["choices"][0]["text"] for e in ev if e["choices"])
check("completion stream text == non-streamed", st == 200 and done and text == solo[0], (text, solo[0]))
check("completion stream: last finish_reason length, no usage chunk", ev[-1]["choices"][0]["finish_reason"] == "length"
      and all("usage" not in e for e in ev), ev[-1])

# --- seeds: reproducible, equal to tern run with the same seed and settings
body = {"prompt": prompts[0], "max_tokens": N, "temperature": 0.9, "top_k": 40, "top_p": 0.9, "min_p": 0, "seed": 5}
_, a = post("/v1/completions", body); _, b2 = post("/v1/completions", body)
_, c = post("/v1/completions", dict(body, seed=6))
ta, tb, tc = (x["choices"][0]["text"] for x in (a, b2, c))
check("same seed, same text", ta == tb, (ta, tb))
check("same seed == tern run --seed", ta == json.load(open(f"{tmp}/seed.json"))["text"], ta)
check("other seed, other text", ta != tc, tc)

# --- stop strings
full = solo[0]
stop = full[len(full) // 2: len(full) // 2 + 3]
st, r = post("/v1/completions", {"prompt": prompts[0], "max_tokens": N, "temperature": 0, "stop": [stop, "\u00ff\u00fe"]})
check("stop string: cut before it, finish stop", st == 200 and r["choices"][0]["text"] == full[:full.index(stop)]
      and r["choices"][0]["finish_reason"] == "stop", (r, stop))
st, r = post("/v1/completions", {"prompt": prompts[0], "max_tokens": 3, "temperature": 0})
check("max_tokens 3: finish length, 3 tokens", st == 200 and r["choices"][0]["finish_reason"] == "length"
      and r["usage"]["completion_tokens"] == 3, r)

# --- concurrency: 3 at once, each equals its solo result
res = [None] * 3
def worker(i):
    res[i] = post("/v1/completions", {"prompt": prompts[i], "max_tokens": N, "temperature": 0})
th = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
[t.start() for t in th]; [t.join() for t in th]
for i in range(3):
    st, r = res[i]
    check(f"concurrent request {i + 1} == solo", st == 200 and r["choices"][0]["text"] == solo[i], (st, r))

# --- errors
def err(name, status, path, body=None, method="POST", raw=None, base=url, headers=None):
    st, b = req(method, path, body, raw=raw, base=base, headers=headers)
    try: obj = json.loads(b)
    except Exception: obj = None
    check(f"{name} -> {status} + error JSON", st == status and is_error(obj, status), (st, b[:200]))
err("malformed JSON", 400, "/v1/chat/completions", raw=b'{"messages": [')
err("messages not an array", 400, "/v1/chat/completions", {"messages": "hi"})
err("temperature a string", 400, "/v1/completions", {"prompt": "x", "temperature": "hot"})
err("max_tokens negative", 400, "/v1/completions", {"prompt": "x", "max_tokens": -5})
err("n = 9 (over the limit of 8)", 400, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 9})
err("prompt longer than the context", 400, "/v1/completions", {"prompt": "word " * 2000})
err("body over --max-body", 413, "/v1/completions", raw=b'{"prompt":"' + b"a" * 100000 + b'"}')
# a chunked body over --max-body whose final chunk never comes: 413 at once, then the
# server closes (no wait for --body-timeout-s)
cs_ = socket.create_connection(hp(url), timeout=20)
cs_.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % 70000 + b"a" * 70000 + b"\r\n")
t0_, got_ = time.time(), b""
try:
    while True:
        d_ = cs_.recv(65536)
        if not d_: break
        got_ += d_
except (socket.timeout, ConnectionResetError):
    pass
cs_.close()
check("chunked body over --max-body, never ended -> 413 and close within 5 s",
      got_.startswith(b"HTTP/1.1 413") and b'"error"' in got_ and time.time() - t0_ < 5, (round(time.time() - t0_, 1), got_[:120]))
err("unknown path", 404, "/v1/nothing", method="GET")
err("GET on a POST endpoint", 405, "/v1/chat/completions", method="GET")
err("POST on a GET endpoint", 405, "/v1/models", raw=b"{}")
# API key and a full queue: the second server (1 slot, queue 1, --api-key sekret)
err("no API key", 401, "/v1/models", method="GET", base=small)
err("wrong API key", 401, "/v1/models", method="GET", base=small, headers={"Authorization": "Bearer nope"})
st, _ = req("GET", "/v1/models", base=small, headers={"Authorization": "Bearer sekret"})
check("right API key -> 200", st == 200, st)
st, _ = req("GET", "/health", base=small)
check("/health needs no key", st == 200, st)

def open_stream(base, body, key=None):
    s = socket.create_connection(hp(base), timeout=30)
    data = json.dumps(body).encode()
    hdr = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    if key: hdr += f"Authorization: Bearer {key}\r\n"
    s.sendall(hdr.encode() + b"\r\n" + data)
    return s
def health(base):
    return json.loads(req("GET", "/health", base=base)[1])
def wait_busy(base, n, secs=15):
    t = time.time()
    while time.time() - t < secs:
        if health(base)["slots_busy"] == n: return True
        time.sleep(0.05)
    return False

# ignore_eos: the end-of-generation tokens are never sampled (llama.cpp's option)
eos_body = {"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello.", "max_tokens": 12, "temperature": 0}
st, r = post("/v1/completions", eos_body)
check("greedy stops at end of generation here", st == 200 and r["choices"][0]["finish_reason"] == "stop", r)
st, r = post("/v1/completions", dict(eos_body, ignore_eos=True))
check("ignore_eos: runs to max_tokens", st == 200 and r["choices"][0]["finish_reason"] == "length"
      and r["usage"]["completion_tokens"] == 12, r)
err("ignore_eos must be a boolean", 400, "/v1/completions", dict(eos_body, ignore_eos="yes"))

# no max_tokens and ignore_eos: runs to the full context (ends only when cancelled)
long_body = {"prompt": prompts[0], "temperature": 0, "stream": True, "ignore_eos": True}
a = open_stream(small, long_body, "sekret")
a.recv(64)                                                            # headers arrived (the job may still wait)
check("the first request runs", wait_busy(small, 1), health(small))
b = open_stream(small, dict(long_body, stream=False), "sekret")       # waits in the queue
t = time.time()
while time.time() - t < 10 and health(small)["queued"] != 1: time.sleep(0.05)
check("one request runs, one waits", health(small)["slots_busy"] == 1 and health(small)["queued"] == 1, health(small))
err("queue full", 503, "/v1/completions", {"prompt": "x", "max_tokens": 1}, base=small, headers={"Authorization": "Bearer sekret"})
a.close(); b.close()
check("disconnected clients free the slot and the queue", wait_busy(small, 0) and health(small)["queued"] == 0, health(small))

# --- disconnect mid-stream on the main server
s = open_stream(url, long_body)
got = b""
while got.count(b"data: ") < 3:
    part = s.recv(4096)
    if not part: break
    got += part
check("streaming started", b"text/event-stream" in got, got[:200])
s.close()
check("client disconnect mid-stream: slot freed", wait_busy(url, 0), health(url))
st, r = post("/v1/completions", {"prompt": prompts[1], "max_tokens": N, "temperature": 0})
check("server still serves after the disconnect", st == 200 and r["choices"][0]["text"] == solo[1], r)
h = health(url)
check("/health at the end: ok, no slot busy", h["status"] == "ok" and h["slots_busy"] == 0 and h["queued"] == 0, h)
sys.exit(1 if fails else 0)
PY
rc=$?
fail=0; [ $rc -eq 0 ] || fail=1

# --- request log and clean shutdown on SIGTERM
grep -qE "^POST /v1/completions 200 [0-9]+\+[0-9]+ tokens [0-9.]+ ms" "$TMP/main.err" && echo "ok   request log lines" \
  || { echo "FAIL request log lines"; fail=1; }
for name in main small; do
  eval "pid=\$${name}_PID"
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then echo "FAIL $name: still running 5 s after SIGTERM"; fail=1
  else wait "$pid"; rc=$?; [ $rc -eq 0 ] && echo "ok   $name: SIGTERM -> exit 0" || { echo "FAIL $name: exit $rc after SIGTERM"; fail=1; }
  fi
done
PIDS=()
if [ $fail -ne 0 ]; then echo "--- server log (tail)"; tail -20 "$TMP/main.err"; fi
exit $fail
