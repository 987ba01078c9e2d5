#!/usr/bin/env python3
"""bench-prefix-cache.py - what the prefix cache of `tern serve` saves, measured.

Starts two servers on the same model, one with the prefix cache (default) and one
with --no-prefix-cache, and runs on each, one request at a time:
  (a) a multi-turn chat: a system prompt, then TURNS user turns, each sent with the
      whole history (as chat clients do);
  (b) a shared long system prompt with QUESTIONS different user questions.
Each request is greedy with max_tokens MAX; the script prints per request the prompt
tokens, the cached ones, the server's prompt time (timings.prompt_ms) and the wall
time, checks that both servers gave the same replies, and prints the medians over
REPEAT rounds (rounds alternate between the servers). No third-party packages.

usage: scripts/bench-prefix-cache.py [--tern build/tern] [-m MODEL] [--threads 2]
       [--turns 4] [--questions 5] [--system-words 300] [--chat-system-words 40]
       [--max 32] [--repeat 3]
"""
import argparse, http.client, json, os, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--tern", default="build/tern")
ap.add_argument("-m", "--model", default=None)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--turns", type=int, default=4)
ap.add_argument("--questions", type=int, default=5)
ap.add_argument("--system-words", type=int, default=300, help="words of the shared system prompt of (b)")
ap.add_argument("--chat-system-words", type=int, default=40, help="words of the system prompt of (a)")
ap.add_argument("--max", type=int, default=32)
ap.add_argument("--repeat", type=int, default=3)
a = ap.parse_args()

tmp = tempfile.mkdtemp()
procs = []


def start(name, extra):
    out = open(f"{tmp}/{name}.out", "w")
    cmd = [a.tern, "serve", "--port", "0", "--threads", str(a.threads), "--quiet", "--ctx", "4096"] + extra
    if a.model:
        cmd += ["-m", a.model]
    p = subprocess.Popen(cmd, stdout=out, stderr=open(f"{tmp}/{name}.err", "w"))
    procs.append(p)
    for _ in range(600):
        t = open(f"{tmp}/{name}.out").read()
        if "listening on" in t:
            host, port = t.split("http://")[1].split()[0].rsplit(":", 1)
            return (host, int(port))
        time.sleep(0.05)
    sys.exit(f"{name} did not start: {open(f'{tmp}/{name}.err').read()}")


def post(hp, body):
    c = http.client.HTTPConnection(*hp, timeout=3600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    d = json.loads(r.read())
    if r.status != 200:
        sys.exit(f"HTTP {r.status}: {d}")
    return d, time.time() - t0


topics = ["the page cache", "interrupt handlers", "the module loader", "kernel threads", "the VFS layer",
          "spinlocks", "RCU", "the slab allocator", "cgroups", "the block layer"]
words = ("The kernel documentation describes subsystems, drivers, interfaces and the rules for "
         "contributing patches. ").split()
words_a = ("You are a concise assistant for kernel and Python developers. Answer with short, correct "
           "statements and examples where useful. ").split()
system_a = {"role": "system", "content": " ".join(words_a[i % len(words_a)] for i in range(a.chat_system_words))}
system_b = {"role": "system", "content": " ".join(words[i % len(words)] for i in range(a.system_words))}
questions = [f"Explain {t} in two sentences." for t in topics]


def scenario_a(hp):
    msgs, rows = [system_a], []
    for t in range(a.turns):
        msgs.append({"role": "user", "content": f"Tell me about {topics[t % len(topics)]}."})
        d, wall = post(hp, {"messages": msgs, "max_tokens": a.max, "temperature": 0})
        rows.append((d["usage"]["prompt_tokens"], d["usage"]["prompt_tokens_details"]["cached_tokens"],
                     d["timings"]["prompt_ms"], wall, d["choices"][0]["message"]["content"]))
        msgs.append({"role": "assistant", "content": d["choices"][0]["message"]["content"] or ""})
    return rows


def scenario_b(hp):
    rows = []
    for q in questions[:a.questions]:
        d, wall = post(hp, {"messages": [system_b, {"role": "user", "content": q}], "max_tokens": a.max, "temperature": 0})
        rows.append((d["usage"]["prompt_tokens"], d["usage"]["prompt_tokens_details"]["cached_tokens"],
                     d["timings"]["prompt_ms"], wall, d["choices"][0]["message"]["content"]))
    return rows


try:
    warm = start("warm", [])
    cold = start("cold", ["--no-prefix-cache"])
    res = {("a", "warm"): [], ("a", "cold"): [], ("b", "warm"): [], ("b", "cold"): []}
    for r in range(a.repeat):
        for name, hp in (("warm", warm), ("cold", cold)) if r % 2 == 0 else (("cold", cold), ("warm", warm)):
            # a fresh conversation / system prompt per round: the warm server keeps its slots,
            # so the first request of a round must not find the previous round's cache
            system_a["content"] = f"[round {r}] " + system_a["content"].split("] ", 1)[-1]
            system_b["content"] = f"[round {r}] " + system_b["content"].split("] ", 1)[-1]
            res[("a", name)].append(scenario_a(hp))
            res[("b", name)].append(scenario_b(hp))
    same = all(res[(s, "warm")][r][i][4] == res[(s, "cold")][r][i][4]
               for s in "ab" for r in range(a.repeat) for i in range(len(res[(s, "warm")][r])))
    for s, title in (("a", f"(a) multi-turn chat, {a.turns} turns"),
                     ("b", f"(b) shared system prompt, {a.questions} questions")):
        print(title)
        print("  req  prompt  cached(warm)  prompt_ms warm / cold   wall_s warm / cold   (medians of %d)" % a.repeat)
        tw = tc = ww = wc = 0.0
        for i in range(len(res[(s, "warm")][0])):
            pw = statistics.median(x[i][2] for x in res[(s, "warm")])
            pc = statistics.median(x[i][2] for x in res[(s, "cold")])
            w1 = statistics.median(x[i][3] for x in res[(s, "warm")])
            w2 = statistics.median(x[i][3] for x in res[(s, "cold")])
            tw, tc, ww, wc = tw + pw, tc + pc, ww + w1, wc + w2
            row = res[(s, "warm")][0][i]
            print(f"  {i + 1:3d}  {row[0]:6d}  {row[1]:12d}  {pw:9.1f} / {pc:8.1f}   {w1:6.3f} / {w2:6.3f}")
        print(f"  all: prompt time {tw:.0f} / {tc:.0f} ms ({tc / max(tw, 1e-9):.1f}x), wall {ww:.2f} / {wc:.2f} s "
              f"({wc / max(ww, 1e-9):.2f}x)")
    print("replies identical with and without the cache:", same)
    sys.exit(0 if same else 1)
finally:
    for p in procs:
        p.terminate()
        p.wait()
