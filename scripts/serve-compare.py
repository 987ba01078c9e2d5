#!/usr/bin/env python3
"""serve-compare.py - the same greedy requests, sent concurrently, to two running tern
servers (e.g. --device cuda and --device cpu on one model): prints each pair of replies'
agreement and the aggregate decode rate each server reports, and exits 1 when fewer than
--min-equal replies are byte-identical. Standard library only (runs on the device image).

  scripts/serve-compare.py --a http://127.0.0.1:18080 --b http://127.0.0.1:18081 [-n 8] [--max-tokens 32]
"""
import argparse, json, sys, threading, time, urllib.request

PROMPTS = ["The history of", "In a small village", "def fibonacci(n):", "Water boils at",
           "The capital of France", "Once upon a time", "import numpy as np", "The best way to learn"]


def post(base, body, timeout=300):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def run(base, n, max_tokens):
    out, errs = [None] * n, []

    def one(i):
        try:
            out[i] = post(base, {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
                                 "temperature": 0, "ignore_eos": True})
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(f"{i}: {e}")

    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    toks = sum(r["usage"]["completion_tokens"] for r in out if r)
    return out, errs, wall, toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--min-equal", type=int, default=-1, help="default: all")
    a = ap.parse_args()
    ra, ea, wa, ta = run(a.a, a.n, a.max_tokens)
    rb, eb, wb, tb = run(a.b, a.n, a.max_tokens)
    eq = sum(1 for x, y in zip(ra, rb) if x and y and x["choices"][0]["text"] == y["choices"][0]["text"])
    for e in ea + eb:
        print("error:", e)
    print(f"a: {a.n} concurrent requests, {ta} tokens in {wa:.2f} s ({ta / wa:.1f} tok/s aggregate, errors {len(ea)})")
    print(f"b: {a.n} concurrent requests, {tb} tokens in {wb:.2f} s ({tb / wb:.1f} tok/s aggregate, errors {len(eb)})")
    print(f"identical replies: {eq}/{a.n}")
    need = a.n if a.min_equal < 0 else a.min_equal
    sys.exit(0 if eq >= need and not ea and not eb else 1)


if __name__ == "__main__":
    main()
