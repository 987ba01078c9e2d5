#!/usr/bin/env bash
# test_server_endpoints.sh - the auxiliary endpoints of `tern serve` on the
# embedded default model: /tokenize and /detokenize (against `tern tokenize`
# and a round trip), /props, /slots, /metrics (Prometheus text; counters move
# with a request), GET /v1/models/{id} (200 / 404), CORS (--cors: headers on
# replies, OPTIONS preflight 204; none without the flag); logit_bias; logprobs,
# streamed ones equal to the non-streamed ones.
# Usage: bash test_server_endpoints.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_endpoints.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 0; fi
if ! command -v python3 >/dev/null; then echo "*** SKIPPED: python3 missing ***"; exit 0; fi
unset TERN_MODEL
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
start() {
  local name=$1; shift
  "$TERN" serve --port 0 --threads 2 --quiet "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break; sleep 0.05; done
  grep -o 'http://[^ ]*' "$TMP/$name.out" >"$TMP/$name.url" || { echo "FAIL $name did not start"; cat "$TMP/$name.err"; exit 1; }
}
start cors --parallel 2 --ctx 512 --cors https://example.test --alias mymodel --max-tokens 7
# the embedded model named explicitly: its defaults come from its keys, not from -m being absent
start plain --parallel 1 --ctx 512 -m "${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/models/tern-default.gguf"
TEXT="Hello <|im_start|> wörld"
"$TERN" tokenize --text "$TEXT" --json >"$TMP/tok.json" || exit 1

# a sanitized build on a loaded 2-core machine runs 10-30x slower (a CI run on
# 2026-12-02 took 258-297 s for what takes 10 s on a quiet one): more time there
LIMIT=120; [ "${TERN_SANITIZED:-0}" = 1 ] && LIMIT=900
timeout $LIMIT python3 - "$TMP" "$TEXT" <<'PY'
import http.client, json, re, sys, time
tmp, TEXT = sys.argv[1], sys.argv[2]
def hp(name):
    h, p = open(f"{tmp}/{name}.url").read().split()[0].replace("http://", "").rsplit(":", 1)
    return h, int(p)
fails = 0
def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{info}]"), flush=True)
    if not cond: fails += 1
def req(name, method, path, body=None, headers=None):
    c = http.client.HTTPConnection(*hp(name), timeout=60)
    h = {"Content-Type": "application/json"}; h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data

ref = json.load(open(f"{tmp}/tok.json"))
ref_ids = ref["ids"] if isinstance(ref, dict) and "ids" in ref else ref.get("tokens", ref) if isinstance(ref, dict) else ref
st, _, b = req("cors", "POST", "/tokenize", {"content": TEXT, "add_special": True})
toks = json.loads(b).get("tokens") if st == 200 else None
check("/tokenize equals tern tokenize", st == 200 and toks == ref_ids, (st, b[:200], ref))
st, _, b = req("cors", "POST", "/detokenize", {"tokens": toks or []})
check("/detokenize round trip", st == 200 and json.loads(b)["content"] == TEXT, b[:200])
st, _, b = req("cors", "POST", "/tokenize", {"content": TEXT, "add_special": False})
plain = json.loads(b)["tokens"]
check("/tokenize add_special false does not make control tokens", st == 200 and len(plain) > len(toks or []), (plain, toks))
st, _, b = req("cors", "POST", "/tokenize", {"content": "ab", "with_pieces": True})
j = json.loads(b)
check("/tokenize with_pieces", st == 200 and "".join(t["piece"] for t in j["tokens"]) == "ab", b)
for body, what in [({"content": 5}, "content"), ({}, "content"), ("x", "object")]:
    st, _, b = req("cors", "POST", "/tokenize", body)
    check(f"/tokenize bad body {body!r} -> 400", st == 400 and what in json.loads(b)["error"]["message"], b)
for body in [{"tokens": [-1]}, {"tokens": [1.5]}, {"tokens": [10**9]}, {"tokens": "1"}]:
    st, _, b = req("cors", "POST", "/detokenize", body)
    check(f"/detokenize bad {body!r} -> 400", st == 400, b)
st, _, _ = req("cors", "GET", "/tokenize")
check("GET /tokenize -> 405", st == 405)

st, _, b = req("cors", "GET", "/props")
p = json.loads(b)
check("/props", st == 200 and p["total_slots"] == 2 and p["n_ctx"] == 512 and p["model"] == "mymodel", p)
check("embedded (raw-text) model: thinking off by default", p.get("thinking_default") is False, p)
check("/props: batch_invariant off by default", p.get("batch_invariant") is False, p)
pp = json.loads(req("plain", "GET", "/props")[2])
check("embedded model given with -m: thinking off (its tern.chat.thinking key)", pp.get("thinking_default") is False, pp)
st, _, b = req("plain", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                                                         "temperature": 0})
msg = json.loads(b)["choices"][0]["message"] if st == 200 else {}
check("embedded model given with -m: a plain chat reply is content, not reasoning",
      st == 200 and msg.get("content") and not msg.get("reasoning_content"), b)
ds = p.get("default_generation_settings", {})
check("embedded model: default sampling from its general.sampling keys",
      ds.get("source") == "model" and abs(ds.get("temperature", 0) - 0.8) < 1e-6 and ds.get("top_k") == 40
      and abs(ds.get("top_p", 0) - 0.95) < 1e-6 and abs(ds.get("min_p", 0) - 0.05) < 1e-6
      and abs(ds.get("repeat_penalty", 0) - 1.3) < 1e-6 and ds.get("repeat_last_n") == 256
      and abs(ds.get("frequency_penalty", 0) - 0.1) < 1e-6 and ds.get("presence_penalty") == 0, ds)
st, _, b = req("cors", "POST", "/v1/completions", {"prompt": "Hello", "ignore_eos": True, "temperature": 0})
check("no max_tokens: --max-tokens (7) applies", st == 200 and json.loads(b)["usage"]["completion_tokens"] == 7, b[:300])
st, _, b = req("cors", "GET", "/slots")
s = json.loads(b)
check("/slots", st == 200 and len(s) == 2 and all(not x["is_processing"] for x in s), s)

st, _, b = req("cors", "GET", "/v1/models/mymodel")
check("GET /v1/models/{id}", st == 200 and json.loads(b)["id"] == "mymodel", b)
st, _, b = req("cors", "GET", "/v1/models/other")
check("GET /v1/models/{unknown} -> 404", st == 404, b)

def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None
st, h, b = req("cors", "GET", "/metrics")
m0 = b.decode()
check("/metrics is Prometheus text", st == 200 and h["content-type"].startswith("text/plain") and
      "# TYPE tern_request_duration_seconds histogram" in m0 and metric(m0, "tern_queue_depth") == 0, m0[:300])
st, _, b = req("cors", "POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 5, "temperature": 0})
u = json.loads(b)["usage"]
# a client that has its reply sees it counted (the server records a request before it
# publishes the reply): read once, no waiting
st, _, b = req("cors", "GET", "/metrics")
m1 = b.decode()
check("/metrics counts tokens", metric(m1, "tern_generated_tokens_total") - (metric(m0, "tern_generated_tokens_total") or 0)
      == u["completion_tokens"] and metric(m1, "tern_prompt_tokens_total") >= u["prompt_tokens"], m1[:600])
check("/metrics histogram count", metric(m1, "tern_request_duration_seconds_count") == 2 and
      'tern_request_duration_seconds_bucket{le="+Inf"} 2' in m1, m1)
# before m1 was rendered: 10 answered 2xx (4 tokenize/detokenize, props, completion, slots, model, metrics, completion)
# and 9 answered 4xx (7 bad bodies, the 405, the 404)
check("/metrics counts by status class", 'tern_requests_total{status="2xx"} 10\n' in m1 and
      'tern_requests_total{status="4xx"} 9\n' in m1, m1[:400])

# logit_bias: +100 on a chosen id makes greedy pick it; -100 on the greedy pick bans it
def one(bias):
    st, _, b = req("plain", "POST", "/v1/completions", {"prompt": "The Linux kernel", "max_tokens": 1, "temperature": 0,
                                                        "logit_bias": bias})
    return st, json.loads(b)
st, r = one({})
greedy = r["choices"][0]["text"]
X = json.loads(req("plain", "POST", "/tokenize", {"content": " zebra"})[2])["tokens"][0]
xt = json.loads(req("plain", "POST", "/detokenize", {"tokens": [X]})[2])["content"]
st, r = one({str(X): 100})
check("logit_bias +100 forces the token", st == 200 and r["choices"][0]["text"] == xt, (xt, r))
G = json.loads(req("plain", "POST", "/tokenize", {"content": greedy})[2])["tokens"]
if len(G) == 1:
    st, r = one({str(G[0]): -100})
    check("logit_bias -100 bans the greedy token", st == 200 and r["choices"][0]["text"] != greedy, (greedy, r))
st, r = one({"99999999": 1})
check("logit_bias id outside the vocabulary -> 400", st == 400 and "logit_bias" in r["error"]["message"], r)

# logprobs: greedy picks the top alternative; tokens add up to the text; probabilities sum to <= 1
# (repeat_penalty 1: the embedded model's default penalty is applied after the logprobs are taken)
import math
st, _, b = req("plain", "POST", "/v1/completions", {"prompt": "The Linux kernel", "max_tokens": 8, "temperature": 0,
                                                    "logprobs": 3, "ignore_eos": True, "repeat_penalty": 1})
r = json.loads(b)
lp = r["choices"][0].get("logprobs") or {}
ok = st == 200 and len(lp.get("tokens", [])) == 8 and "".join(lp["tokens"]) == r["choices"][0]["text"]
for t, l, top in zip(lp.get("tokens", []), lp.get("token_logprobs", []), lp.get("top_logprobs", [])):
    best = max(top.values()) if top else None
    ok = ok and l <= 0 and len(top) >= 1 and abs(best - l) < 1e-6 and sum(math.exp(v) for v in top.values()) <= 1 + 1e-6
check("completions logprobs (greedy = top 1, tokens = text)", ok, lp)
st, _, b = req("plain", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
               "temperature": 0, "logprobs": True, "top_logprobs": 2})
r = json.loads(b)
c = (r["choices"][0].get("logprobs") or {}).get("content", [])
ok = st == 200 and 1 <= len(c) <= 6 and all(len(e["top_logprobs"]) == 2 and e["top_logprobs"][0]["token"] == e["token"]
                                            and abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-6 for e in c)
joined = bytes(x for e in c for x in e["bytes"]).decode("utf-8", "replace")
ok = ok and joined.strip() == (r["choices"][0]["message"]["content"] or "").strip()
check("chat logprobs + top_logprobs (bytes add up to the content)", ok, (c, r["choices"][0]["message"]))

# streamed logprobs: the entries of the chunks, in order, equal the non-streamed
# request's (greedy: token for token, value for value), each chunk's entries go
# with text (or the finish chunk), none lost or repeated; also with a stop string
# cut in the middle of the reply (text held back while it might match)
def sse(name, path, body):
    c = http.client.HTTPConnection(*hp(name), timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200: return r.status, []
    out = []
    for line in r.read().decode().split("\n"):
        if line.startswith("data: ") and line[6:] != "[DONE]": out.append(json.loads(line[6:]))
    return 200, out
def flat_chat(lp): return [(e["token"], e["logprob"], e["bytes"], [(t["token"], t["logprob"], t["bytes"]) for t in e["top_logprobs"]])
                           for e in (lp or {}).get("content", [])]
def flat_cmpl(lp):
    lp = lp or {}
    return [(t, l, sorted(top.items()), o) for t, l, top, o in zip(lp.get("tokens", []), lp.get("token_logprobs", []),
                                                                 lp.get("top_logprobs", []), lp.get("text_offset", []))]
def stream_vs_not(label, path, body, chat):
    st, _, b = req("plain", "POST", path, body)
    r = json.loads(b)
    ref = (flat_chat if chat else flat_cmpl)(r["choices"][0].get("logprobs"))
    sst, chunks = sse("plain", path, dict(body, stream=True))
    got, bare = [], True
    for ch in chunks:
        for c in ch.get("choices", []):
            lp = c.get("logprobs")
            if not lp: continue
            d = c.get("delta", {}) if chat else {"content": c.get("text")}
            if not (d.get("content") or d.get("reasoning_content") or c.get("finish_reason")): bare = False
            got += (flat_chat if chat else flat_cmpl)(lp)
    check(f"streamed logprobs = non-streamed ({label})", st == 200 and sst == 200 and len(ref) > 0 and got == ref and bare,
          (len(ref), len(got), ref[:3], got[:3]))
    return r
msgs = [{"role": "user", "content": "Write a sentence about rivers."}]
r = stream_vs_not("chat", "/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0,
                  "logprobs": True, "top_logprobs": 3, "ignore_eos": True}, True)
stream_vs_not("chat, no top", "/v1/chat/completions", {"messages": msgs, "max_tokens": 10, "temperature": 0,
              "logprobs": True}, True)
r2 = stream_vs_not("completions", "/v1/completions", {"prompt": "The Linux kernel", "max_tokens": 24, "temperature": 0,
                   "logprobs": 3, "ignore_eos": True}, False)
txt = r2["choices"][0]["text"]
if len(txt) > 8:
    stop = txt[len(txt) // 2:len(txt) // 2 + 3]
    stream_vs_not("completions, stop string", "/v1/completions", {"prompt": "The Linux kernel", "max_tokens": 24,
                  "temperature": 0, "logprobs": 2, "ignore_eos": True, "stop": [stop]}, False)
ctext = r["choices"][0]["message"].get("content") or ""
if len(ctext) > 8:
    stop = ctext[len(ctext) // 2:len(ctext) // 2 + 3]
    stream_vs_not("chat, stop string", "/v1/chat/completions", {"messages": msgs, "max_tokens": 24, "temperature": 0,
                  "logprobs": True, "top_logprobs": 1, "ignore_eos": True, "stop": [stop]}, True)

st, h, _ = req("cors", "GET", "/health", headers={"Origin": "https://example.test"})
check("CORS header on replies", h.get("access-control-allow-origin") == "https://example.test", h)
st, h, _ = req("cors", "OPTIONS", "/v1/chat/completions", headers={"Origin": "https://example.test",
               "Access-Control-Request-Method": "POST"})
check("OPTIONS preflight -> 204 with CORS", st == 204 and "POST" in h.get("access-control-allow-methods", "") and
      "Content-Type" in h.get("access-control-allow-headers", ""), (st, h))
st, h, _ = req("plain", "GET", "/health")
check("no CORS header without --cors", "access-control-allow-origin" not in h, h)
st, h, _ = req("plain", "OPTIONS", "/v1/completions")
check("OPTIONS without --cors -> 204, Allow", st == 204 and "POST" in h.get("allow", ""), (st, h))

# a client gone mid-stream: what was generated for it is counted all the same
def gen_total():
    return metric(req("plain", "GET", "/metrics")[2].decode(), "tern_generated_tokens_total") or 0
g0 = gen_total()
c = http.client.HTTPConnection(*hp("plain"), timeout=60)
c.request("POST", "/v1/completions", body=json.dumps({"prompt": "The Linux kernel", "max_tokens": 400, "temperature": 0,
          "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
resp = c.getresponse()
events = 0
while events < 5:
    line = resp.fp.readline()
    if not line:
        break
    events += line.startswith(b"data: {")
c.sock.shutdown(2)
c.close()
g1 = g0
for _ in range(300):        # the scheduler cancels the job at its next round: wait for that state
    g1 = gen_total()
    if g1 > g0:
        break
    time.sleep(0.1)
check("a stream closed by its client: its tokens are counted", events == 5 and 5 <= g1 - g0 < 400, (events, g0, g1))
sys.exit(1 if fails else 0)
PY
