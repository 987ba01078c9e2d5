#!/usr/bin/env bash
# test_server_dropin.sh - what llama-server and Anthropic / Responses clients send, against the
# real server on the embedded model at temperature 0: n_predict, unknown fields (400 naming
# them), llama.cpp's sampler fields (accepted, and XTC / samplers order with a visible effect),
# token-id prompts and lists of prompts, prefill (a final assistant message continued),
# /completion (= /v1/completions, streamed too, n_probs), /apply-template, /infill (400: no FIM
# tokens in this vocabulary), /v1/messages and /v1/responses (= chat, streamed with their
# event types).
# Usage: bash test_server_dropin.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_dropin.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 0; fi
if ! command -v python3 >/dev/null; then echo "*** SKIPPED: python3 missing ***"; exit 0; fi
unset TERN_MODEL
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
"$TERN" serve --port 0 --threads 2 --quiet --parallel 2 --ctx 1024 --api-key sekret >"$TMP/out" 2>"$TMP/err" &
PID=$!
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/out" 2>/dev/null && break; sleep 0.05; done
grep -o 'http://[^ ]*' "$TMP/out" >"$TMP/url" || { echo "FAIL server did not start"; cat "$TMP/err"; exit 1; }

# the CLI maps the same sampler fields: top_k 1 run first makes temperature 5 greedy
CLI_FAIL=0
g=$("$TERN" run --temp 0 -n 8 -p "The sky is" 2>/dev/null)
k=$("$TERN" run --temp 5 --top-k 1 --samplers "top_k;temperature" --seed 3 -n 8 -p "The sky is" 2>/dev/null)
if [ -n "$g" ] && [ "$g" = "$k" ]; then echo "ok   tern run --samplers top_k;temperature --top-k 1 = greedy"
else echo "FAIL tern run --samplers: [$g] vs [$k]"; CLI_FAIL=1; fi
"$TERN" run --samplers bogus -n 2 -p x >/dev/null 2>"$TMP/cli.err"
if grep -q "unknown stage" "$TMP/cli.err"; then echo "ok   tern run --samplers bogus: refused"
else echo "FAIL tern run --samplers bogus"; cat "$TMP/cli.err"; CLI_FAIL=1; fi

LIMIT=180; [ "${TERN_SANITIZED:-0}" = 1 ] && LIMIT=900
timeout $LIMIT python3 - "$TMP/url" <<'PY'
import http.client, json, sys
h, p = open(sys.argv[1]).read().split()[0].replace("http://", "").rsplit(":", 1)
fails = 0
def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{str(info)[:400]}]"), flush=True)
    if not cond: fails += 1
AUTH = {"Authorization": "Bearer sekret"}
def raw(path, body, headers=AUTH):
    c = http.client.HTTPConnection(h, int(p), timeout=60)
    hd = {"Content-Type": "application/json"}; hd.update(headers)
    c.request("POST", path, body=json.dumps(body), headers=hd)
    r = c.getresponse(); data = r.read().decode()
    return r.status, data
def req(path, body, headers=AUTH):
    st, data = raw(path, body, headers)
    try: return st, json.loads(data)
    except Exception: return st, {"raw": data}
def events(data):
    """SSE -> [(event name or None, parsed data)]"""
    out = []
    for block in data.split("\n\n"):
        name, d = None, None
        for line in block.split("\n"):
            if line.startswith("event: "): name = line[7:]
            elif line.startswith("data: "): d = line[6:]
        if d is not None and d != "[DONE]": out.append((name, json.loads(d)))
    return out
def comp(prompt, n, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0}; body.update(kw)
    st, b = req("/v1/completions", body)
    return b["choices"][0]["text"] if st == 200 else None

# --- n_predict and unknown fields
st, b = req("/v1/completions", {"prompt": "Once upon a time", "n_predict": 3, "temperature": 0, "ignore_eos": True})
check("n_predict 3 gives 3 tokens", st == 200 and b["usage"]["completion_tokens"] == 3, b)
st, b = req("/v1/completions", {"prompt": "x", "n_predict": 3, "max_tokens": 4})
check("n_predict and max_tokens disagreeing: 400", st == 400 and "n_predict" in b["error"]["message"], b)
st, b = req("/v1/completions", {"prompt": "x", "max_tokens": 2, "mirostat_tau_zz": 5})
check("unknown field: 400 naming it", st == 400 and "'mirostat_tau_zz'" in b["error"]["message"], b)
st, b = req("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "frobnicate": 1})
check("unknown chat field: 400 naming it", st == 400 and "'frobnicate'" in b["error"]["message"], b)
st, b = req("/v1/completions", {"prompt": "x", "max_tokens": 2, "mirostat": 2})
check("mirostat on: 400", st == 400 and "mirostat" in b["error"]["message"], b)
st, b = req("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "user": "u",
            "metadata": {"a": "b"}, "store": False, "service_tier": "auto", "parallel_tool_calls": True,
            "stream_options": None, "cache_prompt": True, "id_slot": -1, "mirostat": 0, "n_keep": 0})
check("harmless fields accepted", st == 200, b)

# --- llama.cpp's sampler fields
st, b = req("/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0.8, "seed": 3, "typical_p": 0.9,
            "min_keep": 2, "top_n_sigma": 2.0, "xtc_probability": 0.5, "xtc_threshold": 0.1, "dry_multiplier": 0.8,
            "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1, "dry_sequence_breakers": ["\n", ":"],
            "samplers": ["dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"], "repeat_last_n": 32})
check("sampler fields accepted", st == 200, b)
st, b = req("/v1/completions", {"prompt": "Hello", "max_tokens": 2, "samplers": ["top_k", "warp"]})
check("unknown sampler stage: 400", st == 400 and "samplers" in b["error"]["message"], b)
# XTC with threshold 0 and top_k 2 (no temperature stage): always the second most likely token
st, g = req("/completion", {"prompt": "Hello", "n_predict": 1, "temperature": 0, "n_probs": 2})
second = g["completion_probabilities"][0]["top_logprobs"][1]["token"] if st == 200 else None
st, b = req("/v1/completions", {"prompt": "Hello", "max_tokens": 1, "temperature": 1, "top_k": 2, "seed": 1,
            "xtc_probability": 1, "xtc_threshold": 0, "samplers": ["top_k", "xtc"]})
check("XTC keeps the least likely of the top 2", st == 200 and second is not None and b["choices"][0]["text"] == second,
      (second, b))
# samplers order: top_k 1 first makes any temperature greedy
greedy = comp("The sky is", 6)
st, b = req("/v1/completions", {"prompt": "The sky is", "max_tokens": 6, "temperature": 5, "top_k": 1, "seed": 9,
            "samplers": "kt"})
check("samplers 'kt' with top_k 1 = greedy", st == 200 and b["choices"][0]["text"] == greedy, (greedy, b))

# --- token-id prompts, lists of prompts
st, t = req("/tokenize", {"content": "Hello, world"})
ids = t["tokens"]
check("token-id prompt = its text", comp(ids, 4) == comp("Hello, world", 4) and comp(ids, 4) is not None)
st, b = req("/v1/completions", {"prompt": [ids[0], 99999999], "max_tokens": 2})
check("an id outside the vocabulary: 400 naming it", st == 400 and "99999999" in b["error"]["message"], b)
prompts = ["Hello", ids, "Once upon a time"]
st, b = req("/v1/completions", {"prompt": prompts, "max_tokens": 3, "temperature": 0, "n": 2})
want = [comp(q, 3) for q in prompts for _ in range(2)]
got = [c["text"] for c in sorted(b.get("choices", []), key=lambda c: c["index"])] if st == 200 else None
check("a list of prompts: one choice per prompt x n, in order", got == want, (got, want))
check("a list of prompts: usage sums the prompts", st == 200 and b["usage"]["prompt_tokens"] ==
      sum(req("/v1/completions", {"prompt": q, "max_tokens": 1})[1]["usage"]["prompt_tokens"] for q in prompts), b.get("usage"))

# --- native /completion
ref = comp("Hello", 4)
st, b = req("/completion", {"prompt": "Hello", "n_predict": 4, "temperature": 0})
check("/completion = /v1/completions", st == 200 and b.get("content") == ref and b.get("tokens_predicted") == 4 and
      b.get("stop") is True and b.get("stop_type") == "limit", (ref, b))
st, data = raw("/completion", {"prompt": "Hello", "n_predict": 4, "temperature": 0, "stream": True})
ev = events(data) if st == 200 else []
check("/completion streamed: content pieces, then stop", st == 200 and ev and ev[-1][1].get("stop") is True and
      all(e[1]["stop"] is False for e in ev[:-1]) and "".join(e[1]["content"] for e in ev) == ref, data[:400])
st, b = req("/completion", {"prompt": "Hello", "n_predict": 3, "temperature": 0, "n_probs": 3})
cp = b.get("completion_probabilities", [])
check("n_probs: completion_probabilities per token", st == 200 and len(cp) == 3 and
      all(len(e["top_logprobs"]) == 3 and e["token"] in [t["token"] for t in e["top_logprobs"]] for e in cp) and
      "".join(e["token"] for e in cp) == b["content"], b)
st, b = req("/completion", {"prompt": "x", "input_prefix": "a"})
check("/completion refuses /infill's fields", st == 400, b)
st, b = req("/infill", {"input_prefix": "def f(", "input_suffix": "    return x\n"})
check("/infill without FIM tokens: 400 saying so", st == 400 and "fim" in b["error"]["message"].lower(), b)

# --- prefill and /apply-template
msgs = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "My favourite colour is"}]
st, t = req("/apply-template", {"messages": msgs})
tmpl = t.get("prompt", "")
check("/apply-template leaves the final assistant message open", st == 200 and
      tmpl.endswith("My favourite colour is") and tmpl.startswith("<|im_start|>user"), t)
st, t2 = req("/apply-template", {"messages": msgs[:1]})
check("/apply-template adds the generation prompt", st == 200 and t2["prompt"].endswith("<|im_start|>assistant\n") or
      t2["prompt"].endswith("</think>\n\n"), t2)
st, b = req("/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0})
cont = comp(tmpl, 6)
check("prefill: the reply continues the assistant message", st == 200 and cont is not None and
      b["choices"][0]["message"]["content"] == cont.strip(), (b, cont))

# --- Anthropic /v1/messages
chat_msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
st, b = req("/v1/chat/completions", {"messages": chat_msgs, "max_tokens": 8, "temperature": 0})
chat_text = b["choices"][0]["message"]["content"] if st == 200 else None
XK = {"x-api-key": "sekret", "anthropic-version": "2023-06-01"}
am = {"model": "m", "max_tokens": 8, "temperature": 0, "system": "Be brief.",
      "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]}
st, b = req("/v1/messages", am, XK)
check("/v1/messages = chat (x-api-key)", st == 200 and b.get("type") == "message" and b["role"] == "assistant" and
      b["content"][0]["type"] == "text" and b["content"][0]["text"] == chat_text and b["stop_reason"] == "max_tokens"
      and b["usage"]["output_tokens"] == 8, (b, chat_text))
st, data = raw("/v1/messages", dict(am, stream=True), XK)
ev = events(data) if st == 200 else []
names = [e[0] for e in ev]
check("/v1/messages streamed: Anthropic's event order", names[:2] == ["message_start", "content_block_start"] and
      names[-3:] == ["content_block_stop", "message_delta", "message_stop"] and
      all(e[1]["type"] == e[0] for e in ev), names)
check("/v1/messages streamed: deltas = the text", "".join(e[1]["delta"]["text"] for e in ev
      if e[0] == "content_block_delta") == chat_text, data[:400])
st, b = req("/v1/messages", {"model": "m", "max_tokens": 40, "temperature": 0, "stop_sequences": ["l"],
            "messages": [{"role": "user", "content": "Say hello."}]}, XK)
check("/v1/messages stop_sequences", st == 200 and "l" not in b["content"][0]["text"], b)
st, b = req("/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, XK)
check("/v1/messages without max_tokens: 400 in Anthropic's shape", st == 400 and b.get("type") == "error" and
      "max_tokens" in b["error"]["message"], b)
st, b = req("/v1/messages", dict(am, top_q=1), XK)
check("/v1/messages unknown field: 400 naming it", st == 400 and "top_q" in b["error"]["message"], b)
st, b = req("/v1/messages", dict(am, max_tokens=1), XK)
n_in = b.get("usage", {}).get("input_tokens")
st, c = req("/v1/messages/count_tokens", {k: v for k, v in am.items() if k not in ("max_tokens", "temperature")}, XK)
check("/v1/messages/count_tokens = the message's input_tokens", st == 200 and c.get("input_tokens") == n_in and n_in, (c, n_in))
st, b = req("/v1/messages", am, {})
check("/v1/messages without a key: 401", st == 401, b)
tools = [{"name": "get_weather", "description": "Weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
st, b = req("/v1/messages", {"model": "m", "max_tokens": 60, "temperature": 0, "tools": tools,
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "messages": [{"role": "user", "content": "Weather in Paris?"}]}, XK)
tu = [c for c in b.get("content", []) if c.get("type") == "tool_use"]
check("/v1/messages tools: a tool_use block", st == 200 and tu and tu[0]["name"] == "get_weather" and
      isinstance(tu[0]["input"], dict) and b["stop_reason"] in ("tool_use", "max_tokens"), b)

# --- OpenAI /v1/responses
st, b = req("/v1/responses", {"model": "m", "instructions": "Be brief.", "input": "Say hello.", "max_output_tokens": 8,
            "temperature": 0})
out = [o for o in b.get("output", []) if o.get("type") == "message"]
check("/v1/responses = chat", st == 200 and b.get("object") == "response" and out and
      out[0]["content"][0]["text"] == chat_text and b["usage"]["output_tokens"] == 8, (b, chat_text))
st, data = raw("/v1/responses", {"model": "m", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0,
               "input": [{"role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}], "stream": True})
ev = events(data) if st == 200 else []
names = [e[0] for e in ev]
check("/v1/responses streamed: created ... deltas ... completed", names and names[0] == "response.created" and
      "response.output_text.delta" in names and names[-1] in ("response.completed", "response.incomplete") and
      [e[1]["sequence_number"] for e in ev] == list(range(len(ev))), names)
check("/v1/responses streamed: deltas = the text", "".join(e[1]["delta"] for e in ev
      if e[0] == "response.output_text.delta") == chat_text, data[:400])
st, b = req("/v1/responses", {"model": "m", "input": "x", "previous_response_id": "resp_1"})
check("/v1/responses unknown field: 400 naming it", st == 400 and "previous_response_id" in b["error"]["message"], b)

print("dropin e2e:", "all ok" if not fails else f"{fails} failed")
sys.exit(1 if fails else 0)
PY
rc=$?

# HTTPS (--ssl-key-file / --ssl-cert-file): a self-signed pair, the same replies over TLS
TLS_FAIL=0
if command -v openssl >/dev/null && openssl req -x509 -newkey rsa:2048 -nodes -keyout "$TMP/key.pem" \
     -out "$TMP/cert.pem" -days 2 -subj /CN=localhost >/dev/null 2>&1; then
  "$TERN" serve --port 0 --threads 2 --quiet --parallel 1 --ctx 512 --ssl-key-file "$TMP/key.pem" \
    --ssl-cert-file "$TMP/cert.pem" >"$TMP/tls.out" 2>"$TMP/tls.err" &
  TPID=$!
  for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/tls.out" 2>/dev/null && break; sleep 0.05; done
  if grep -q "listening on https://" "$TMP/tls.out"; then
    timeout 60 python3 - "$(grep -o 'https://[^ ]*' "$TMP/tls.out")" "$TMP/cert.pem" <<'PY' || TLS_FAIL=1
import http.client, json, ssl, sys
host, port = sys.argv[1].replace("https://", "").rsplit(":", 1)
ctx = ssl.create_default_context(cafile=sys.argv[2]); ctx.check_hostname = False
c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Hello", "max_tokens": 3, "temperature": 0}),
          headers={"Content-Type": "application/json"})
r = c.getresponse(); b = json.loads(r.read())
ok = r.status == 200 and b["usage"]["completion_tokens"] == 3
c.request("GET", "/health"); r = c.getresponse(); ok = ok and r.status == 200 and json.loads(r.read())["status"] == "ok"
p = http.client.HTTPConnection(host, int(port), timeout=10)
try:
    p.request("GET", "/health"); plain = p.getresponse().status
except Exception: plain = None
print(("ok   " if ok else "FAIL ") + "HTTPS: completion and keep-alive /health over TLS")
print(("ok   " if plain != 200 else "FAIL ") + "HTTPS: plain HTTP is not answered as HTTP")
sys.exit(0 if ok and plain != 200 else 1)
PY
  else
    echo "FAIL HTTPS server did not start"; cat "$TMP/tls.err"; TLS_FAIL=1
  fi
  kill "$TPID" 2>/dev/null; wait "$TPID" 2>/dev/null
  "$TERN" serve --port 0 --ssl-key-file "$TMP/key.pem" >/dev/null 2>"$TMP/tls2.err"
  if grep -q "go together" "$TMP/tls2.err"; then echo "ok   HTTPS: a key without a certificate is refused"
  else echo "FAIL HTTPS: a key alone"; TLS_FAIL=1; fi
else
  echo "*** HTTPS cases SKIPPED: openssl missing ***"
fi
exit $(( rc || CLI_FAIL || TLS_FAIL ))
