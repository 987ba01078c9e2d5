#!/usr/bin/env bash
# test_server_prefix_cache.sh - the prefix cache of `tern serve`: a follow-up
# request continues the slot whose session holds the start of its prompt
# (usage.prompt_tokens_details.cached_tokens > 0, fewer prompt tokens evaluated
# in /metrics) and answers exactly what a server with --no-prefix-cache answers
# at temperature 0; an unrelated prompt and cache_prompt: false reuse nothing.
#   - the embedded model (qwen35, recurrent GDN state): a completion whose prompt
#     extends the previous prompt + reply (the whole cached sequence);
#   - the qwen3 fixture (attention only, rewound KV cache): the next chat turn,
#     which shares the history up to the previous turn's generation prompt.
# Usage: bash test_server_prefix_cache.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_prefix_cache.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
MODEL="$SRC/models/tern-default.gguf"
Q3="$FIX/qwen3-tiny/model-q2_0.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "*** SKIPPED: python3 missing ***"; exit 77; fi
unset TERN_MODEL
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
start() {
  local name=$1; shift
  "$TERN" serve --port 0 --threads 2 --quiet "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 200); do grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break; sleep 0.05; done
  grep -o 'http://[^ ]*' "$TMP/$name.out" >"$TMP/$name.url" || { echo "FAIL $name did not start"; cat "$TMP/$name.err"; exit 1; }
}
start warm --parallel 2 --ctx 1024
start cold --parallel 2 --ctx 1024 --no-prefix-cache
HAVE_Q3=0
if [ -f "$Q3" ]; then
  start q3warm -m "$Q3" --parallel 2 --ctx 1024
  start q3cold -m "$Q3" --parallel 2 --ctx 1024 --no-prefix-cache
  HAVE_Q3=1
else
  echo "note: $Q3 missing: the qwen3 (rewind) part is skipped"
fi

timeout 300 python3 - "$TMP" "$HAVE_Q3" <<'PY'
import http.client, json, re, sys
tmp, have_q3 = sys.argv[1], sys.argv[2] == "1"
fails = 0
def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{info}]"), flush=True)
    if not cond: fails += 1
def hp(name):
    h, p = open(f"{tmp}/{name}.url").read().split()[0].replace("http://", "").rsplit(":", 1)
    return h, int(p)
def req(name, method, path, body=None):
    c = http.client.HTTPConnection(*hp(name), timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse(); data = r.read()
    return r.status, data
def post(name, path, body):
    st, data = req(name, "POST", path, body)
    if st != 200: raise SystemExit(f"FAIL {name} {path} -> {st}: {data[:300]!r}")
    return json.loads(data)
def metric(name, key):
    st, data = req(name, "GET", "/metrics")
    m = re.search(rf"^{key} (\S+)$", data.decode(), re.M)
    return float(m.group(1)) if m else None
def cached(r): return r["usage"].get("prompt_tokens_details", {}).get("cached_tokens")

# ---- embedded model (qwen35): completions, the prompt extends prompt + reply
base = {"temperature": 0, "max_tokens": 24}
p1 = "The Linux kernel is the core of the operating system. It manages memory, processes and devices. The kernel"
r1 = post("warm", "/v1/completions", dict(base, prompt=p1))
check("first request: nothing cached", cached(r1) == 0, r1["usage"])
p2 = p1 + r1["choices"][0]["text"] + "\n\nQuestion: what does a module loader do?\nAnswer:"
ev_before = metric("warm", "tern_prompt_tokens_evaluated_total")
r2 = post("warm", "/v1/completions", dict(base, prompt=p2))
ev_after = metric("warm", "tern_prompt_tokens_evaluated_total")
c2 = post("cold", "/v1/completions", dict(base, prompt=p2))
n1 = r1["usage"]["prompt_tokens"] + r1["usage"]["completion_tokens"]
check("qwen35: the follow-up reuses the whole previous sequence",
      cached(r2) == n1 and r2["timings"]["cache_n"] == n1, (cached(r2), n1, r1["choices"][0]["finish_reason"]))
check("qwen35: /metrics counts only the suffix as evaluated",
      ev_after - ev_before == r2["usage"]["prompt_tokens"] - cached(r2) < r2["usage"]["prompt_tokens"],
      (ev_before, ev_after, r2["usage"]))
check("qwen35: tern_prompt_tokens_cached_total", metric("warm", "tern_prompt_tokens_cached_total") == cached(r2))
check("qwen35: cached reply == --no-prefix-cache reply", r2["choices"][0]["text"] == c2["choices"][0]["text"],
      (r2["choices"][0]["text"], c2["choices"][0]["text"]))
check("cold server: nothing cached", cached(c2) == 0 and metric("cold", "tern_prompt_tokens_cached_total") == 0)
# the same follow-up again: its slot now holds p2 + reply, which is not a prefix of p2
r3 = post("warm", "/v1/completions", dict(base, prompt=p2))
check("qwen35: a shorter prompt cannot rewind the recurrent state", cached(r3) == 0, cached(r3))
check("qwen35: ... and still gives the same reply", r3["choices"][0]["text"] == c2["choices"][0]["text"])
other = post("warm", "/v1/completions", dict(base, prompt="import os\nimport sys\n\ndef main"))
check("a different prompt reuses nothing", cached(other) == 0, cached(other))
p4 = p2 + r3["choices"][0]["text"] + " More."
r4 = post("warm", "/v1/completions", dict(base, prompt=p4, cache_prompt=False))
check("cache_prompt false reuses nothing", cached(r4) == 0, cached(r4))
st, data = req("warm", "GET", "/props")
check("/props prefix_cache", json.loads(data).get("prefix_cache") is True)
st, data = req("cold", "GET", "/props")
check("/props prefix_cache (off)", json.loads(data).get("prefix_cache") is False)
st, data = req("warm", "GET", "/slots")
check("/slots n_cached_tokens", all("n_cached_tokens" in s for s in json.loads(data)))
st, data = req("warm", "POST", "/v1/completions", dict(base, prompt="x", cache_prompt=3))
check("cache_prompt must be a bool (400)", st == 400, st)

# ---- qwen3 fixture: the next chat turn (attention only: the KV cache is rewound)
if have_q3:
    cb = {"temperature": 0, "max_tokens": 16}
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Tell me about the Linux kernel."}]
    t1 = post("q3warm", "/v1/chat/completions", dict(cb, messages=msgs))
    msgs2 = msgs + [{"role": "assistant", "content": t1["choices"][0]["message"]["content"] or ""},
                    {"role": "user", "content": "And what are modules?"}]
    ev0 = metric("q3warm", "tern_prompt_tokens_evaluated_total")
    t2 = post("q3warm", "/v1/chat/completions", dict(cb, messages=msgs2))
    ev1 = metric("q3warm", "tern_prompt_tokens_evaluated_total")
    u2 = post("q3cold", "/v1/chat/completions", dict(cb, messages=msgs2))
    check("qwen3: the second chat turn reuses the history", cached(t2) > 0 and cached(t2) >= t1["usage"]["prompt_tokens"] - 8,
          (cached(t2), t1["usage"]))
    check("qwen3: fewer prompt tokens evaluated", ev1 - ev0 == t2["usage"]["prompt_tokens"] - cached(t2), (ev0, ev1))
    check("qwen3: cached turn == --no-prefix-cache turn",
          t2["choices"][0]["message"] == u2["choices"][0]["message"], (t2["choices"][0], u2["choices"][0]))
    # streamed with usage: the same cached count
    msgs3 = msgs2 + [{"role": "assistant", "content": t2["choices"][0]["message"]["content"] or ""},
                     {"role": "user", "content": "Thanks."}]
    c = http.client.HTTPConnection(*hp("q3warm"), timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps(dict(cb, messages=msgs3, stream=True,
              stream_options={"include_usage": True})), headers={"Content-Type": "application/json"})
    ev = [json.loads(l[6:]) for l in c.getresponse().read().decode().split("\n") if l.startswith("data: {")]
    us = [e["usage"] for e in ev if e.get("usage")]
    check("qwen3: streamed usage carries cached_tokens", us and us[-1]["prompt_tokens_details"]["cached_tokens"] > 0, us)
    u3 = post("q3cold", "/v1/chat/completions", dict(cb, messages=msgs3))
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev if e.get("choices"))
    check("qwen3: streamed cached turn == cold turn", text == (u3["choices"][0]["message"]["content"] or ""),
          (text, u3["choices"][0]["message"]))
    # a partial prefix: the same history with another last question
    msgs4 = msgs + [{"role": "user", "content": "Something else entirely"}]
    t4 = post("q3warm", "/v1/chat/completions", dict(cb, messages=msgs4))
    u4 = post("q3cold", "/v1/chat/completions", dict(cb, messages=msgs4))
    check("qwen3: a diverging prompt reuses the common prefix only",
          0 < cached(t4) < t4["usage"]["prompt_tokens"], cached(t4))
    check("qwen3: ... with the cold reply", t4["choices"][0]["message"] == u4["choices"][0]["message"])
sys.exit(1 if fails else 0)
PY
rc=$?
[ $rc -eq 0 ] && echo "PASS test_server_prefix_cache" || { echo "FAIL test_server_prefix_cache (rc $rc)"; for f in "$TMP"/*.err; do echo "== $f"; tail -5 "$f"; done; }
exit $rc
