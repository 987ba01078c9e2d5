#!/usr/bin/env bash
# test_server_prefix_cache.sh - the prefix cache of `tern serve`: a follow-up
# request continues the slot whose session holds the start of its prompt
# (usage.prompt_tokens_details.cached_tokens > 0, fewer prompt tokens evaluated
# in /metrics) and answers exactly what a server with --no-prefix-cache answers
# at temperature 0; an unrelated prompt and cache_prompt: false reuse nothing.
#   - the embedded model (qwen35, recurrent GDN state): a completion whose prompt
#     extends the previous prompt + reply (the whole cached sequence); the same
#     prompt again (the snapshot at its end); a 3-turn chat and a shared system
#     prompt with different questions (snapshots at message ends: the next turn goes on
#     from the end of the previous turn's last message, another conversation from the
#     system prompt's end; none at 64-token boundaries inside a chat prompt); the
#     snapshot budget (LRU, --prefix-cache-mib) and --prefix-cache-mib 0;
#   - n > 1: the choices share one evaluated prompt (tern_prompt_tokens_evaluated_total
#     grows by the prompt once) and equal single requests with seeds s, s+1;
#   - the qwen3 fixture (attention only, rewound KV cache): the next chat turn,
#     which shares the history up to the previous turn's generation prompt.
# TERN_TEST_DEVICE=cuda runs every server on the GPU (snapshots in device memory; the
# small-budget part, which needs 64-token chunks, is skipped there).
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
DEV=${TERN_TEST_DEVICE:-cpu}
start() {
  local name=$1; shift
  "$TERN" serve --port 0 --threads 2 --quiet --device "$DEV" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break; sleep 0.05; done
  grep -o 'http://[^ ]*' "$TMP/$name.out" >"$TMP/$name.url" || { echo "FAIL $name did not start"; cat "$TMP/$name.err"; exit 1; }
}
start warm --parallel 2 --ctx 1024
start cold --parallel 2 --ctx 1024 --no-prefix-cache
start nosnap --parallel 2 --ctx 1024 --prefix-cache-mib 0
start tiny --parallel 2 --ctx 1024 --prefix-cache-mib 5
HAVE_Q3=0
if [ -f "$Q3" ]; then
  start q3warm -m "$Q3" --parallel 2 --ctx 1024
  start q3cold -m "$Q3" --parallel 2 --ctx 1024 --no-prefix-cache
  HAVE_Q3=1
else
  echo "note: $Q3 missing: the qwen3 (rewind) part is skipped"
fi

# a sanitized build on a loaded 2-core machine runs 10-30x slower (a CI run on
# 2026-12-02 took 258-297 s for what takes 10 s on a quiet one): more time there
LIMIT=300; [ "${TERN_SANITIZED:-0}" = 1 ] && LIMIT=900
timeout $LIMIT python3 - "$TMP" "$HAVE_Q3" "$DEV" <<'PY'
import http.client, json, re, sys
tmp, have_q3, dev = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
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
# the same follow-up again: its slot holds p2 + reply (not a prefix of p2), but also the
# snapshot taken at p2's end, whose logits are restored: nothing is evaluated
ev_before = metric("warm", "tern_prompt_tokens_evaluated_total")
r3 = post("warm", "/v1/completions", dict(base, prompt=p2))
check("qwen35: the same prompt again restores the snapshot at its end",
      cached(r3) == r3["usage"]["prompt_tokens"] and metric("warm", "tern_prompt_tokens_evaluated_total") == ev_before,
      (cached(r3), r3["usage"]))
check("qwen35: ... and gives the same reply", r3["choices"][0]["text"] == c2["choices"][0]["text"])
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
check("/slots n_cached_tokens, n_snapshots", all("n_cached_tokens" in s and "n_snapshots" in s for s in json.loads(data))
      and sum(s["n_snapshots"] for s in json.loads(data)) > 0, data)

# ---- qwen35 chat: a 3-turn conversation and a shared system prompt reuse snapshots at
# message ends (the template drops the empty think block from the history, so a turn is
# not an extension of the previous prompt + reply: it goes on from the end of the previous
# turn's last message); replies equal a cold server's. The positions are found here from
# the ChatML text: a message is "<|im_start|>role\ncontent<|im_end|>\n".
def ntok(name, text):
    return len(post(name, "/tokenize", {"content": text, "add_special": True})["tokens"])
GEN = "<|im_start|>assistant\n<think>\n\n</think>\n\n"   # thinking off: the empty think block
n_gen = ntok("warm", GEN)
cb = {"temperature": 0, "max_tokens": 16}
system = {"role": "system", "content": "You answer questions about the Linux kernel and Python. " * 12}
n_sys = ntok("warm", "<|im_start|>system\n" + system["content"].strip() + "<|im_end|>\n")  # the template trims
msgs = [system]
for turn, q in enumerate(["How do I build a module?", "How do I load it?", "And how is it removed?"]):
    msgs.append({"role": "user", "content": q})
    ev0, tk0 = metric("warm", "tern_prompt_tokens_evaluated_total"), metric("warm", "tern_prefix_cache_snapshots_taken_total")
    w = post("warm", "/v1/chat/completions", dict(cb, messages=msgs))
    ev1, tk1 = metric("warm", "tern_prompt_tokens_evaluated_total"), metric("warm", "tern_prefix_cache_snapshots_taken_total")
    c = post("cold", "/v1/chat/completions", dict(cb, messages=msgs))
    if turn:
        check(f"qwen35 chat turn {turn + 1}: goes on from the end of the previous turn's last message",
              cached(w) == prev - n_gen, (cached(w), prev, n_gen))
        check(f"qwen35 chat turn {turn + 1}: /metrics counts only the rest as evaluated",
              ev1 - ev0 == w["usage"]["prompt_tokens"] - cached(w), (ev0, ev1, w["usage"]))
        n = post("nosnap", "/v1/chat/completions", dict(cb, messages=msgs))
        check(f"qwen35 chat turn {turn + 1}: --prefix-cache-mib 0 reuses nothing", cached(n) == 0, cached(n))
    else:
        # system, user (both message ends), the prompt's end, the reply's end; the prompt
        # spans {w["usage"]["prompt_tokens"] // 64} 64-token boundaries: none is taken
        check("qwen35 chat turn 1: snapshots at the message ends and the prompt's and reply's ends only",
              tk1 - tk0 == 4 and w["usage"]["prompt_tokens"] >= 128, (tk0, tk1, w["usage"]))
    check(f"qwen35 chat turn {turn + 1}: reply == --no-prefix-cache reply", w["choices"][0]["message"] == c["choices"][0]["message"],
          (w["choices"][0]["message"], c["choices"][0]["message"]))
    prev = w["usage"]["prompt_tokens"]
    msgs.append({"role": "assistant", "content": w["choices"][0]["message"]["content"] or ""})
restored0 = metric("warm", "tern_prefix_cache_snapshots_restored_total")
for q in ["What is a spinlock?", "What does os.path.join do?"]:
    m2 = [system, {"role": "user", "content": q}]
    ev0 = metric("warm", "tern_prompt_tokens_evaluated_total")
    w = post("warm", "/v1/chat/completions", dict(cb, messages=m2))
    ev1 = metric("warm", "tern_prompt_tokens_evaluated_total")
    c = post("cold", "/v1/chat/completions", dict(cb, messages=m2))
    check(f"qwen35 shared system prompt ({q}): goes on from the system prompt's end", cached(w) == n_sys, (cached(w), n_sys))
    check(f"qwen35 shared system prompt ({q}): only the rest evaluated", ev1 - ev0 == w["usage"]["prompt_tokens"] - n_sys,
          (ev0, ev1, w["usage"]))
    check(f"qwen35 shared system prompt ({q}): reply == cold", w["choices"][0]["message"] == c["choices"][0]["message"])
# a client that renders the template itself and sends raw completions (ChatML text: its
# <|im_end|> tokens mark the message ends as in a chat request)
rs = {"role": "system", "content": "You write short shell commands for a Linux administrator, one per answer."}
rm = [rs, {"role": "user", "content": "List the loaded modules."}]
p1 = post("warm", "/apply-template", {"messages": rm})["prompt"]
r1 = post("warm", "/v1/completions", dict(cb, prompt=p1))
rm += [{"role": "assistant", "content": r1["choices"][0]["text"].strip()}, {"role": "user", "content": "Now remove one."}]
p2 = post("warm", "/apply-template", {"messages": rm})["prompt"]
ev0 = metric("warm", "tern_prompt_tokens_evaluated_total")
r2 = post("warm", "/v1/completions", dict(cb, prompt=p2))
ev1 = metric("warm", "tern_prompt_tokens_evaluated_total")
c2 = post("cold", "/v1/completions", dict(cb, prompt=p2))
check("raw ChatML completions: the next turn goes on from the end of the previous turn's last message",
      cached(r2) == r1["usage"]["prompt_tokens"] - n_gen and ev1 - ev0 == r2["usage"]["prompt_tokens"] - cached(r2),
      (cached(r2), r1["usage"]["prompt_tokens"], n_gen, ev0, ev1))
check("raw ChatML completions: reply == cold", r2["choices"][0]["text"] == c2["choices"][0]["text"],
      (r2["choices"][0]["text"], c2["choices"][0]["text"]))
check("/metrics: snapshots in device memory on a GPU, none on the CPU",
      (metric("warm", "tern_prefix_cache_snapshot_device_bytes") > 0) == (dev != "cpu")
      and metric("warm", "tern_prefix_cache_snapshot_device_bytes") <= metric("warm", "tern_prefix_cache_snapshot_bytes"),
      (metric("warm", "tern_prefix_cache_snapshot_device_bytes"), metric("warm", "tern_prefix_cache_snapshot_bytes")))
check("/metrics snapshots restored", metric("warm", "tern_prefix_cache_snapshots_restored_total") >= restored0 + 2)
check("/metrics snapshot bytes within the budget",
      0 < metric("warm", "tern_prefix_cache_snapshot_bytes") <= metric("warm", "tern_prefix_cache_snapshot_budget_bytes") == 1024 << 20)
st, data = req("warm", "GET", "/props")
ps = json.loads(data).get("prefix_cache_snapshots", {})
check("/props prefix_cache_snapshots", ps.get("used") is True and ps.get("budget_bytes") == 1024 << 20 and ps.get("count", 0) > 0
      and ps.get("snapshot_bytes", 0) > 0, ps)
if dev == "cpu":  # 64-token chunks: a raw prompt of 4 chunks fits the context here
    # a budget of 5 MiB holds two snapshots of the embedded model: the least recently used go
    # a raw prompt of 4 chunks or more keeps snapshots at boundaries 0, 1, 2, 4.. chunks before
    # its last one; with two fitting, only the last boundary and the end are taken (the others
    # would be pushed out by them), then the reply's end pushes the older out
    long = "The scheduler picks the next task to run on each CPU. " * 30
    t = post("tiny", "/v1/completions", dict(base, prompt=long))
    check("small budget: only the last boundary, the end and the reply's end of a long prompt are taken",
          metric("tiny", "tern_prefix_cache_snapshots") == 2 and metric("tiny", "tern_prefix_cache_snapshots_taken_total") == 3
          and metric("tiny", "tern_prefix_cache_snapshots_evicted_total") == 1
          and 0 < metric("tiny", "tern_prefix_cache_snapshot_bytes") <= 5 << 20)
    t2 = post("tiny", "/v1/completions", dict(base, prompt=long))
    check("small budget: the prompt's end snapshot is kept", cached(t2) == t2["usage"]["prompt_tokens"], cached(t2))
    tk0, ej0 = metric("tiny", "tern_prefix_cache_snapshots_taken_total"), metric("tiny", "tern_prefix_cache_snapshots_evicted_total")
    post("tiny", "/v1/completions", dict(base, prompt="import os\n" * 150))   # takes the empty slot
    tk1, ej1 = metric("tiny", "tern_prefix_cache_snapshots_taken_total"), metric("tiny", "tern_prefix_cache_snapshots_evicted_total")
    check("small budget: another slot's snapshots push the older ones out",
          metric("tiny", "tern_prefix_cache_snapshots") == 2 and ej1 - ej0 == tk1 - tk0 >= 2
          and metric("tiny", "tern_prefix_cache_snapshot_bytes") <= 5 << 20,
          (metric("tiny", "tern_prefix_cache_snapshots"), metric("tiny", "tern_prefix_cache_snapshots_evicted_total")))

# ---- n > 1 shares the evaluated prompt (also without the prefix cache)
pn = "The kernel's memory manager keeps free pages in lists. When a page is needed"
nb = {"temperature": 0.9, "max_tokens": 12, "seed": 40}
ev0 = metric("cold", "tern_prompt_tokens_evaluated_total")
rn = post("cold", "/v1/completions", dict(nb, prompt=pn, n=2))
ev1 = metric("cold", "tern_prompt_tokens_evaluated_total")
check("n=2: the prompt is evaluated once", ev1 - ev0 == rn["usage"]["prompt_tokens"], (ev0, ev1, rn["usage"]))
singles = [post("cold", "/v1/completions", dict(nb, prompt=pn, seed=40 + k))["choices"][0]["text"] for k in range(2)]
check("n=2: choices == single requests with seeds 40, 41", [c["text"] for c in rn["choices"]] == singles,
      ([c["text"] for c in rn["choices"]], singles))
c = http.client.HTTPConnection(*hp("cold"), timeout=120)
c.request("POST", "/v1/completions", body=json.dumps(dict(nb, prompt=pn, n=2, stream=True, stream_options={"include_usage": True})),
          headers={"Content-Type": "application/json"})
ev = [json.loads(l[6:]) for l in c.getresponse().read().decode().split("\n") if l.startswith("data: {")]
texts = ["".join(e["choices"][0]["text"] for e in ev if e.get("choices") and e["choices"][0]["index"] == k) for k in range(2)]
us = [e["usage"] for e in ev if e.get("usage")]
check("n=2 streamed: the same texts, usage as the non-streamed reply (choice 0's prompt figures)",
      texts == singles and us and us[-1] == rn["usage"], (texts, us, rn["usage"]))
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
