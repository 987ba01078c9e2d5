#!/usr/bin/env python3
"""serve_bench.py - a serving benchmark for any OpenAI-compatible server (tern serve, the
llama.cpp fork's llama-server, vLLM, SGLang): streaming requests at fixed concurrency levels or
at a Poisson request rate, prompt and output lengths fixed or drawn from a distribution.

Per level it reports request, output and total token throughput, TTFT, time per output token
(TPOT) and inter-token latency (ITL) at p50/p99, end-to-end latency and errors, as a readable
table and as JSON; --plot draws throughput against latency across the levels (matplotlib, PNG),
and --plot-from draws several earlier JSON results (e.g. tern and llama-server) on one figure.

Output lengths are forced with `ignore_eos` (llama.cpp's and vLLM's field; tern accepts it) so
random-weight models measure the same work as real ones. Prompts are random words, one fresh
set per request (no prefix-cache hits), sized to --input-len tokens with the server's own
/tokenize when it has one (llama.cpp's {"content"} and vLLM's {"prompt"} shapes), else with an
estimate; --token-ids sends token-id prompts instead (llama-server and vLLM accept them).
Standard library only, except matplotlib for --plot.

  scripts/serve_bench.py --base-url http://127.0.0.1:8080 --concurrency 1,8,32,64 \
      --input-len 512 --output-len 256 --num-requests 4x --json-out tern.json --plot tern.png
  scripts/serve_bench.py --base-url URL --request-rate 4 --num-requests 200 --input-len 512:0.5
  scripts/serve_bench.py --plot-from tern.json fork.json --plot compare.png

Exit status: 0 when every request of every level succeeded, 1 when any failed, a reply
differed from it sent alone (--check-alone) or slots stayed busy after cancelled streams
(--cancel-after; the report still prints), 2 on bad arguments or an unreachable server.
"""
import argparse
import http.client
import json
import math
import random
import sys
import threading
import time
import urllib.parse

WORDS = ("the of and to in is was for on that with as by at from his her an which were are "
         "this be had not but have it they one all their there been has who more when will can "
         "time would into some could two after first other new only also over people years most "
         "state such made city world many between during still under north where through group "
         "water house music river school system number south power family series later known "
         "government including around while place early small since became public part season "
         "album three against second general major several another before national work record "
         "team called film name history century form four large local about because").split()


def percentile(xs, p):
    """Linear-interpolated percentile (numpy's default) of a non-empty list; None if empty."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def parse_len(spec):
    """'512' -> fixed; '512:0.5' -> uniform in [512*(1-0.5), 512*(1+0.5)]."""
    mean, _, spread = spec.partition(":")
    mean = int(mean)
    spread = float(spread) if spread else 0.0
    if mean < 1 or not 0 <= spread < 1:
        raise argparse.ArgumentTypeError(f"length '{spec}': need N >= 1 and 0 <= spread < 1")
    return mean, spread


def draw(rng, spec):
    mean, spread = spec
    if spread == 0:
        return mean
    return max(1, rng.randint(int(mean * (1 - spread)), int(math.ceil(mean * (1 + spread)))))


class Server:
    def __init__(self, base, timeout, api_key=None):
        u = urllib.parse.urlparse(base)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--base-url '{base}': need http://host:port")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def conn(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def post_json(self, path, body):
        c = self.conn()
        try:
            c.request("POST", self.prefix + path, json.dumps(body), self.headers)
            r = c.getresponse()
            data = r.read()
            return r.status, (json.loads(data) if data else None)
        finally:
            c.close()

    def get_json(self, path):
        c = self.conn()
        try:
            c.request("GET", self.prefix + path, headers=self.headers)
            r = c.getresponse()
            data = r.read()
            return r.status, (json.loads(data) if data else None)
        finally:
            c.close()


class PromptMaker:
    """Random-word prompts of about n tokens: the server's /tokenize gives the tokens per
    word once (calibration), so each prompt is sized without a round trip."""

    def __init__(self, srv, rng, token_ids, vocab_hint):
        self.rng, self.token_ids, self.vocab = rng, token_ids, vocab_hint
        self.per_word, self.how = 1.3, "estimate (1.3 tokens per word)"
        if token_ids:
            self.how = "token ids"
            return
        text = " ".join(rng.choice(WORDS) for _ in range(400))
        for body, key in (({"content": text}, "tokens"), ({"prompt": text}, "tokens")):
            try:
                st, d = srv.post_json("/tokenize", body)
            except (OSError, ValueError):
                continue
            if st == 200 and isinstance(d, dict) and isinstance(d.get(key), list) and d[key]:
                self.per_word = len(d[key]) / 400.0
                self.how = f"/tokenize ({self.per_word:.3f} tokens per word)"
                return

    def make(self, n):
        if self.token_ids:
            return [self.rng.randrange(100, self.vocab) for _ in range(n)]
        words = max(1, int(round(n / self.per_word)))
        return " ".join(self.rng.choice(WORDS) for _ in range(words))


def one_request(srv, args, prompt, out_len, rec, may_cancel=True):
    """Streams one request; fills rec with timings, token counts and any error."""
    chat = args.endpoint == "chat"
    body = {"model": args.model, "max_tokens": out_len, "stream": True, "temperature": args.temperature,
            "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    rec.update(t0=time.perf_counter(), chunks=[], error=None, prompt_tokens=None, output_tokens=None, text=[])
    c = srv.conn()
    try:
        c.request("POST", srv.prefix + path, json.dumps(body), srv.headers)
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = f"HTTP {r.status}: {r.read()[:200].decode(errors='replace')}"
            return
        done = False
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            ev = json.loads(payload)
            if "error" in ev:
                rec["error"] = f"stream error: {json.dumps(ev['error'])[:200]}"
                return
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
                if piece:
                    rec["text"].append(piece)
                if piece or (chat and (ch.get("delta") or {}).get("reasoning_content")):
                    rec["chunks"].append(time.perf_counter())
            if may_cancel and args.cancel_after and len(rec["chunks"]) >= args.cancel_after:
                rec["cancelled"] = True     # the client walks away: the connection closes below
                return
            u = ev.get("usage")
            if u:
                rec["prompt_tokens"] = u.get("prompt_tokens")
                rec["output_tokens"] = u.get("completion_tokens")
        if not done:
            rec["error"] = "stream ended without [DONE]"
    except (OSError, ValueError, http.client.HTTPException) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        rec["t1"] = time.perf_counter()
        c.close()


def run_level(srv, args, pm, rng, concurrency, rate, n_req):
    """n_req requests, at most `concurrency` in flight (rate None) or arriving as a Poisson
    process of `rate` per second (each request its own thread, concurrency unbounded)."""
    work = [(pm.make(draw(rng, args.input_len)), draw(rng, args.output_len)) for _ in range(n_req)]
    recs = [dict() for _ in range(n_req)]
    mem0 = None
    if args.cancel_after:   # free device memory, the prefix cache's device snapshots counted as free
        m0 = metrics(srv) or {}
        if m0.get("tern_backend_memory_free_bytes") is not None:
            mem0 = m0["tern_backend_memory_free_bytes"] + m0.get("tern_prefix_cache_snapshot_device_bytes", 0)
    t_start = time.perf_counter()
    if rate is None:
        nxt = iter(range(n_req))
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                one_request(srv, args, work[i][0], work[i][1], recs[i])

        th = [threading.Thread(target=worker) for _ in range(min(concurrency, n_req))]
    else:
        th = []
        delays, t = [], 0.0
        for _ in range(n_req):
            t += rng.expovariate(rate)
            delays.append(t)

        def later(i, d):
            time.sleep(max(0.0, t_start + d - time.perf_counter()))
            one_request(srv, args, work[i][0], work[i][1], recs[i])

        th = [threading.Thread(target=later, args=(i, delays[i])) for i in range(n_req)]
    bg_stop, bg_recs, bg_th = threading.Event(), [], None
    if args.background_prompt:
        # one more client sending long prompts (one output token each) back to back while the
        # level runs: how much a long prefill disturbs the decoding streams
        bg_prompts = [pm.make(args.background_prompt) for _ in range(2)]

        def background():
            k = 0
            while not bg_stop.is_set():
                rec = {}
                one_request(srv, args, bg_prompts[k % 2], 1, rec, may_cancel=False)
                bg_recs.append(rec)
                k += 1

        bg_th = threading.Thread(target=background)
        bg_th.start()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t_start
    bg_stop.set()
    if bg_th:
        bg_th.join()
    L = summarise(recs, work, wall, concurrency, rate)
    if args.cancel_after:
        L["cancelled"] = sum(1 for r in recs if r.get("cancelled"))
        L["after_cancel"] = settle(srv, mem0)
    if args.check_alone:
        L["alone"] = check_alone(srv, args, work, recs)
    if args.background_prompt:
        done = [r for r in bg_recs if not r.get("error")]
        L["background"] = {"prompt_tokens": args.background_prompt, "requests": len(bg_recs),
                           "completed": len(done), "errors": len(bg_recs) - len(done),
                           "e2e_s": [round(r["t1"] - r["t0"], 3) for r in done]}
    return L


def metrics(srv):
    """tern's /metrics as {name: value} (None when the server has none)."""
    try:
        c = srv.conn()
        c.request("GET", srv.prefix + "/metrics", headers=srv.headers)
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        c.close()
    except OSError:
        return None
    if r.status != 200:
        return None
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def settle(srv, mem0, wait_s=30.0):
    """After cancelled streams: how long until the server reports no busy slot, and its free
    device memory then against before the level (tern's /metrics; None elsewhere)."""
    t0 = time.perf_counter()
    while True:
        m = metrics(srv)
        if m is None:
            return None
        busy = m.get("tern_slots_busy")
        if busy == 0 or time.perf_counter() - t0 > wait_s:
            break
        time.sleep(0.1)
    free = m.get("tern_backend_memory_free_bytes")
    if free is not None:    # the prefix cache's snapshots in device memory are kept on purpose
        free += m.get("tern_prefix_cache_snapshot_device_bytes", 0)
    return {"slots_busy": busy, "seconds_to_idle": round(time.perf_counter() - t0, 3),
            "memory_free_before": mem0, "memory_free_after": free}


def check_alone(srv, args, work, recs):
    """Sends each request that completed under load again, alone (one at a time), and compares
    the replies: at temperature 0 a server must give the same text whatever else it batches."""
    same, diff, samples = 0, 0, []
    for i, ((prompt, out_len), r) in enumerate(zip(work, recs)):
        if r.get("error"):
            continue
        a = {}
        one_request(srv, args, prompt, out_len, a)
        if a.get("error"):
            diff += 1
            samples.append({"request": i, "error": a["error"]})
            continue
        ta, tb = "".join(r["text"]), "".join(a["text"])
        if ta == tb:
            same += 1
        else:
            diff += 1
            k = next((j for j, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
            samples.append({"request": i, "first_difference_at_char": k,
                            "under_load": ta[max(0, k - 20):k + 20], "alone": tb[max(0, k - 20):k + 20]})
    return {"compared": same + diff, "equal": same, "different": diff, "samples": samples[:5]}


def summarise(recs, work, wall, concurrency, rate):
    ok = [r for r in recs if not r.get("error")]
    errs = [r["error"] for r in recs if r.get("error")]
    ttft, tpot, itl, e2e = [], [], [], []
    out_tok = in_tok = 0
    for r, (prompt, want) in zip(recs, work):
        if r.get("error"):
            continue
        n_out = r["output_tokens"] if r["output_tokens"] is not None else len(r["chunks"])
        n_in = r["prompt_tokens"] if r["prompt_tokens"] is not None else (
            len(prompt) if isinstance(prompt, list) else None)
        out_tok += n_out
        in_tok += n_in or 0
        e2e.append(r["t1"] - r["t0"])
        if r["chunks"]:
            ttft.append(r["chunks"][0] - r["t0"])
            itl.extend(b - a for a, b in zip(r["chunks"], r["chunks"][1:]))
            if n_out > 1:
                tpot.append((r["chunks"][-1] - r["chunks"][0]) / (n_out - 1))

    def stats(xs, scale=1000.0):
        return {"mean": sum(xs) / len(xs) * scale if xs else None,
                "p50": percentile(xs, 50) * scale if xs else None,
                "p99": percentile(xs, 99) * scale if xs else None}

    return {"concurrency": concurrency, "request_rate": rate, "requests": len(recs),
            "completed": len(ok), "errors": len(errs), "error_samples": errs[:5],
            "duration_s": wall, "input_tokens": in_tok, "output_tokens": out_tok,
            "request_throughput": len(ok) / wall, "output_tok_s": out_tok / wall,
            "total_tok_s": (in_tok + out_tok) / wall,
            "ttft_ms": stats(ttft), "tpot_ms": stats(tpot), "itl_ms": stats(itl), "e2e_s": stats(e2e, 1.0)}


def fmt(v, nd=1):
    return "-" if v is None else f"{v:,.{nd}f}"


def table(levels, label):
    head = (f"{'level':>10} {'done':>9} {'err':>4} {'req/s':>7} {'out tok/s':>10} {'total tok/s':>11} "
            f"{'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>7} {'ITL p99':>8} {'e2e p50 s':>9}")
    lines = [f"== {label}", head]
    for L in levels:
        lvl = f"c={L['concurrency']}" if L["request_rate"] is None else f"{L['request_rate']:g}/s"
        lines.append(f"{lvl:>10} {L['completed']:>4}/{L['requests']:<4} {L['errors']:>4} "
                     f"{fmt(L['request_throughput'], 2):>7} {fmt(L['output_tok_s']):>10} {fmt(L['total_tok_s']):>11} "
                     f"{fmt(L['ttft_ms']['p50'], 0):>9} {fmt(L['ttft_ms']['p99'], 0):>8} "
                     f"{fmt(L['tpot_ms']['p50']):>9} {fmt(L['tpot_ms']['p99']):>7} {fmt(L['itl_ms']['p99']):>8} "
                     f"{fmt(L['e2e_s']['p50'], 2):>9}")
    lines.append("(times in ms unless marked; TTFT: time to first token, TPOT: time per output token "
                 "after the first, ITL: gap between streamed tokens)")
    return "\n".join(lines)


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("serve_bench: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return False
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    for res in results:
        lv = [L for L in res["levels"] if L["completed"]]
        name = res.get("label") or res["base_url"]
        xs = [L["output_tok_s"] for L in lv]
        tags = [f"c{L['concurrency']}" if L["request_rate"] is None else f"{L['request_rate']:g}/s" for L in lv]
        ys = [L["tpot_ms"]["p50"] or 0 for L in lv]
        a1.plot(xs, ys, marker="o", label=name)
        for x, y, t in zip(xs, ys, tags):
            a1.annotate(t, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        a2.plot(xs, [(L["ttft_ms"]["p50"] or 0) / 1000 for L in lv], marker="s", label=name)
        for x, L, t in zip(xs, lv, tags):
            a2.annotate(t, (x, (L["ttft_ms"]["p50"] or 0) / 1000), textcoords="offset points", xytext=(4, 4), fontsize=8)
    a1.set_xlabel("output tokens/s (all requests)")
    a1.set_ylabel("time per output token p50 (ms)")
    a1.set_title("throughput vs per-token latency")
    a2.set_xlabel("output tokens/s (all requests)")
    a2.set_ylabel("time to first token p50 (s)")
    a2.set_title("throughput vs time to first token")
    for a in (a1, a2):
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8)
    w = results[0]["workload"]
    fig.suptitle(f"input {w['input_len']} tokens, output {w['output_len']} tokens, {w['endpoint']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", help="the server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--label", help="name of this server in the table, JSON and plot (default: the URL)")
    ap.add_argument("--model", default="default", help="the request's model field (default: %(default)s)")
    ap.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    ap.add_argument("--concurrency", default="1,8",
                    help="comma list of fixed concurrency levels (default: %(default)s)")
    ap.add_argument("--request-rate", type=float,
                    help="Poisson arrivals at this many requests per second instead of fixed concurrency")
    ap.add_argument("--num-requests", default="4x",
                    help="requests per level: N, or Kx = K times the concurrency, at least 8 (default: %(default)s)")
    ap.add_argument("--input-len", type=parse_len, default=parse_len("512"),
                    help="prompt tokens: N, or N:S for uniform in N*(1 +- S) (default: 512)")
    ap.add_argument("--output-len", type=parse_len, default=parse_len("256"),
                    help="output tokens, same forms (default: 256)")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="let requests stop at end of generation (output lengths then vary)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--token-ids", action="store_true", help="send token-id prompts (exact lengths)")
    ap.add_argument("--vocab", type=int, default=32000, help="token ids drawn below this (--token-ids)")
    ap.add_argument("--background-prompt", type=int, default=0, metavar="N",
                    help="one more client sends N-token prompts (1 output token) back to back during each "
                         "level, not counted in the level's figures: the decoding streams' ITL beside a long "
                         "prefill (default: 0, none)")
    ap.add_argument("--check-alone", action="store_true",
                    help="after each level, send every completed request again alone and compare the "
                         "replies (needs --temperature 0); any difference fails the run")
    ap.add_argument("--cancel-after", type=int, default=0, metavar="N",
                    help="each client closes its stream after N streamed tokens (a user walking away); "
                         "the report says how soon the server's slots were idle again and its free "
                         "device memory against before the level (tern's /metrics)")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent first and not counted (default: 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default: %(default)s)")
    ap.add_argument("--api-key")
    ap.add_argument("--json-out", help="write the results here (JSON)")
    ap.add_argument("--plot", help="write a PNG of throughput vs latency here")
    ap.add_argument("--plot-from", nargs="+", metavar="JSON", help="plot these earlier results (no requests sent)")
    args = ap.parse_args(argv)

    if args.plot_from:
        if not args.plot:
            ap.error("--plot-from needs --plot FILE.png")
        res = []
        for p in args.plot_from:
            with open(p) as f:
                res.append(json.load(f))
        return 0 if plot(res, args.plot) else 2
    if not args.base_url:
        ap.error("--base-url is required (or --plot-from)")
    try:
        levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--concurrency '{args.concurrency}': need a comma list of integers")
    if not levels or min(levels) < 1:
        ap.error("--concurrency: each level must be >= 1")
    if args.background_prompt < 0:
        ap.error("--background-prompt must be >= 0")
    if args.cancel_after < 0:
        ap.error("--cancel-after must be >= 0")
    if args.cancel_after and args.check_alone:
        ap.error("--cancel-after and --check-alone: a cancelled reply has nothing to compare")
    if args.check_alone and args.temperature != 0:
        ap.error("--check-alone compares greedy replies: needs --temperature 0")
    if args.request_rate is not None and args.request_rate <= 0:
        ap.error("--request-rate must be > 0")
    if args.request_rate is not None:
        levels = [None]
    nr = args.num_requests.strip()
    try:
        per = (lambda c: max(8, int(nr[:-1]) * (c or 1))) if nr.endswith("x") else (lambda c, n=int(nr): n)
    except ValueError:
        ap.error(f"--num-requests '{nr}': need N or Kx")
    if per(1) < 1:
        ap.error("--num-requests must be >= 1")

    srv = Server(args.base_url, args.timeout, args.api_key)
    try:
        srv.get_json("/health")
    except OSError as e:
        print(f"serve_bench: cannot reach {args.base_url}: {e}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    pm = PromptMaker(srv, rng, args.token_ids, args.vocab)
    for _ in range(args.warmup):
        rec = {}
        one_request(srv, args, pm.make(min(32, args.input_len[0])), min(8, args.output_len[0]), rec, may_cancel=False)
    out = {"label": args.label or args.base_url, "base_url": args.base_url,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "workload": {"input_len": args.input_len[0], "input_spread": args.input_len[1],
                        "output_len": args.output_len[0], "output_spread": args.output_len[1],
                        "endpoint": args.endpoint, "ignore_eos": args.ignore_eos,
                        "temperature": args.temperature, "prompt_sizing": pm.how, "seed": args.seed,
                        "background_prompt": args.background_prompt},
           "levels": []}
    for c in levels:
        n = per(c if c else 1) if args.request_rate is None else int(nr) if not nr.endswith("x") else per(1)
        L = run_level(srv, args, pm, rng, c or n, args.request_rate, n)
        if args.request_rate is not None:
            L["concurrency"] = None
        out["levels"].append(L)
        print(table([L], out["label"]).splitlines()[-2], file=sys.stderr, flush=True)
        if L.get("background"):
            b = L["background"]
            print(f"{'':>10} beside it: {b['completed']}/{b['requests']} prompts of {b['prompt_tokens']} tokens, "
                  f"e2e p50 {fmt(percentile(b['e2e_s'], 50), 2)} s", file=sys.stderr, flush=True)
        if "cancelled" in L:
            a = L["after_cancel"] or {}
            print(f"{'':>10} cancelled {L['cancelled']}/{L['requests']} after {args.cancel_after} tokens; slots busy "
                  f"{a.get('slots_busy')} {a.get('seconds_to_idle')} s later", file=sys.stderr, flush=True)
        if L.get("alone"):
            a = L["alone"]
            print(f"{'':>10} sent alone again: {a['equal']}/{a['compared']} replies equal"
                  + (f"; first: {json.dumps(a['samples'][0])}" if a["samples"] else ""), file=sys.stderr, flush=True)
    print(table(out["levels"], f"{out['label']}: input {args.input_len[0]}, output {args.output_len[0]}, "
                f"prompts sized by {pm.how}"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1)
    if args.plot and not plot([out], args.plot):
        return 2
    for L in out["levels"]:
        if L.get("alone"):
            a = L["alone"]
            print(f"c={L['concurrency']}: {a['equal']}/{a['compared']} replies equal to the same request sent alone")
    bad = any(L["errors"] or (L.get("alone") or {}).get("different") for L in out["levels"])
    for L in out["levels"]:
        a = L.get("after_cancel")
        if "cancelled" in L:
            ok = a is None or a["slots_busy"] == 0
            mem = ""
            if a and a["memory_free_before"] is not None and a["memory_free_after"] is not None:
                d = (a["memory_free_after"] - a["memory_free_before"]) / 2**20
                mem = f", free memory {d:+.1f} MiB against before the level (back within 64 MiB: {'yes' if d > -64 else 'NO'})"
            print(f"c={L['concurrency']}: {L['cancelled']} streams cancelled; "
                  + ("server has no /metrics" if a is None else
                     f"slots idle again: {'yes' if a['slots_busy'] == 0 else 'NO'} after {a['seconds_to_idle']} s{mem}"))
            bad = bad or not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
