#!/usr/bin/env bash
# test_bench_kernels.sh TERN - `tern bench kernels` (and `bench gdn`): usage errors exit 2, and a
# quick transform-only run prints one JSON object per measurement with the
# fields the issue asks for (op, K, N, batch, threads, ms, gbps, gflops,
# ceiling_gbps, max_rel_err) and exits 0. (The full benchmark takes minutes
# and 1.8 GB; run it by hand, see docs/performance.md.)
set -u
tern=${1:?usage: test_bench_kernels.sh /path/to/tern}
fail=0
check() { if "$@"; then echo "ok: $*"; else echo "FAIL: $*"; fail=1; fi; }

"$tern" bench >/dev/null 2>&1; check [ $? -eq 2 ]
"$tern" bench nosuch >/dev/null 2>&1; check [ $? -eq 2 ]
"$tern" bench kernels --threads 0 >/dev/null 2>&1; check [ $? -eq 2 ]
"$tern" bench kernels --only nothing >/dev/null 2>&1; check [ $? -eq 2 ]
"$tern" bench kernels --help | grep -q -- "--json"; check [ $? -eq 0 ]

out=$(mktemp)
"$tern" bench kernels --only transform --quick --threads 1 --json >"$out"; rc=$?
check [ $rc -eq 0 ]
python3 - "$out" <<'PY'
import json, sys
need = {"op", "K", "N", "batch", "threads", "ms", "gbps", "gflops", "ceiling_gbps", "max_rel_err"}
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ops = {r["op"] for r in rows}
assert {"read_bw", "hadamard", "add_rmsnorm_had", "swiglu_had"} <= ops, ops
for r in rows:
    assert need <= set(r), (r, need - set(r))
    assert r["ms"] > 0 and r["gbps"] > 0, r
print("json ok:", len(rows), "rows")
PY
check [ $? -eq 0 ]
# bench gdn: usage error exits 2; a quick run gives both ops with positive times
"$tern" bench gdn --reps 0 >/dev/null 2>&1; check [ $? -eq 2 ]
"$tern" bench gdn --quick --reps 1 --json >"$out"; rc=$?
check [ $rc -eq 0 ]
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert {r["op"] for r in rows} == {"gdn_call", "gdn_heads"}, rows
for r in rows:
    assert r["walk_us_per_token_head"] > 0 and r["blocks_us_per_token_head"] > 0, r
    assert r["op"] != "gdn_call" or r["max_rel_diff"] <= 1e-3, r
print("gdn json ok:", len(rows), "rows")
PY
check [ $? -eq 0 ]
# bench sampler: one row per setting after the memcpy row, times > 0; bad flags are usage errors
"$tern" bench sampler --vocab 0 >/dev/null 2>&1; check [ $? -eq 2 ]
"$tern" bench sampler --vocab 5003 --reps 3 --json >"$out"; rc=$?
check [ $rc -eq 0 ]
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 5 and rows[0]["setting"].startswith("one read") and rows[1]["setting"] == "greedy", rows
for r in rows:
    assert r["op"] == "sampler" and r["vocab"] == 5003 and r["ms"] > 0 and r["read_ms"] > 0 and r["reps"] == 3, r
print("sampler json ok:", len(rows), "rows")
PY
check [ $? -eq 0 ]
rm -f "$out"
exit $fail
