"""python -m tern.bench: self-checking benchmark of TernaryLinear (mlx_ternary's shapes
and Bonsai's), batch 1 and 128, interleaved medians against a float32 numpy matmul of the
dequantized matrix, the same run's memory read ceiling, and the error of every shape
against a float64 numpy reference. Exits 1 when any relative error reaches 1e-3.

  python -m tern.bench [--threads N] [--reps R] [--quick] [--json]
"""
import argparse
import json
import sys
import time

import numpy as np

import tern

# (name, out, in): mlx_ternary's timed shapes, then Bonsai 2 27B / Ternary-Bonsai 8B shapes
SHAPES = [
    ("gate 640x2560", 640, 2560),
    ("down 2560x640", 2560, 640),
    ("in_proj_a 16x2048", 16, 2048),
    ("mlp.gate 6144x2048", 6144, 2048),
    ("bonsai-27b ffn_gate 17408x5120", 17408, 5120),
    ("bonsai-27b ffn_down 5120x17408", 5120, 17408),
    ("bonsai-8b attn_q 4096x4096", 4096, 4096),
]
QUICK = SHAPES[:4]
BOUND = 1e-3


def median_interleaved(fns, reps):
    times = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [float(np.median(t)) * 1e3 for t in times]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tern.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="kernel threads (0 = all cores, the default)")
    ap.add_argument("--reps", type=int, default=15, help="timed repetitions per shape (interleaved)")
    ap.add_argument("--quick", action="store_true", help="mlx_ternary's four shapes only")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    tern.set_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    ceiling = tern.read_ceiling_gbps("cpu", 1 << 30, 2)
    rows, worst = [], 0.0
    for name, n, k in (QUICK if a.quick else SHAPES):
        g = 128 if k % 128 == 0 else 64
        trits = rng.integers(-1, 2, size=(n, k), dtype=np.int8)
        scales = rng.uniform(0.01, 0.1, size=(n, k // g)).astype(np.float32)
        layer = tern.TernaryLinear.from_trits(trits, scales, group_size=g)
        w64 = trits.astype(np.float64) * np.repeat(scales.astype(np.float16).astype(np.float64), g, axis=1)
        w32 = w64.astype(np.float32)
        for batch in (1, 128):
            x = rng.standard_normal((batch, k)).astype(np.float32)
            y = layer(x)
            ref = x.astype(np.float64) @ w64.T
            err = float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))
            worst = max(worst, err)
            t_tern, t_np = median_interleaved([lambda: layer(x), lambda: x @ w32.T], a.reps)
            wbytes = n * k / 4 + n * (k // g) * 2
            rows.append({"shape": name, "batch": batch, "group": g, "tern_ms": t_tern, "numpy_f32_ms": t_np,
                         "ratio": t_tern / t_np, "weight_GBps": wbytes / (t_tern * 1e-3) / 1e9,
                         "rel_err": err, "ok": err < BOUND})
    ok = worst < BOUND
    if a.json:
        print(json.dumps({"version": tern.__version__, "isa": tern.kernel_isa(), "threads": tern.get_threads(),
                          "read_ceiling_GBps": ceiling, "rows": rows, "worst_rel_err": worst, "ok": ok}))
    else:
        print("tern %s, isa %s, %d threads, same-run read ceiling %.1f GB/s; interleaved medians of %d"
              % (tern.__version__, tern.kernel_isa(), tern.get_threads(), ceiling, a.reps))
        print("| Matrix | Batch | tern (ms) | numpy f32 (ms) | tern / numpy | weights GB/s | of ceiling | rel err |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            frac = r["weight_GBps"] / ceiling if ceiling > 0 else float("nan")
            print("| %s | %d | %.3f | %.3f | %.3f | %.1f | %.0f%% | %.1e%s |" % (
                r["shape"], r["batch"], r["tern_ms"], r["numpy_f32_ms"], r["ratio"], r["weight_GBps"],
                100 * frac, r["rel_err"], "" if r["ok"] else " FAIL"))
        print("worst relative error %.2e (bound %.0e): %s" % (worst, BOUND, "ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
