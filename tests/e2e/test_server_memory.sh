#!/usr/bin/env bash
# test_server_memory.sh - `tern serve` admission by memory, on the CPU (the host's
# MemAvailable is the back-end's free memory there):
#   - the start-up fit check: --parallel x the session size + the snapshot budget over the
#     free memory is refused at start with a message naming the three sizes and a fix;
#   - --admit-free-mib: a request arriving while less than that is free gets 503 with
#     Retry-After (streamed or not), the server stays up, /metrics counts the refusals and
#     shows the free memory and the floor.
# TERN_TEST_DEVICE=cuda: the same on the GPU (device memory; the default floor is 256 MiB
# there; the host-only comparisons are skipped).
# Usage: bash test_server_memory.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_server_memory.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/tern-default.gguf"
if [ ! -f "$MODEL" ]; then echo "*** SKIPPED: $MODEL missing ***"; exit 77; fi
if ! command -v python3 >/dev/null; then echo "*** SKIPPED: python3 missing ***"; exit 77; fi
unset TERN_MODEL
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT
fails=0
DEV=${TERN_TEST_DEVICE:-cpu}
KIND=host; [ "$DEV" = cpu ] || KIND=device
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }

# ---- the start-up fit check
avail_mib=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
# a snapshot budget of 1 PiB never fits: the sessions would, so the fix is a smaller budget
"$TERN" serve --port 0 --threads 2 --quiet --device "$DEV" --parallel 2 --ctx 1024 --prefix-cache-mib 1073741824 \
  >"$TMP/big.out" 2>"$TMP/big.err" </dev/null
rc=$?
msg=$(cat "$TMP/big.err")
echo "  $msg"
check "a snapshot budget over the free memory: refused at start" "[ $rc -ne 0 ] && ! grep -q listening $TMP/big.out"
check "... naming the slots, the session size, the budget and the free $KIND memory" \
  "echo \"\$msg\" | grep -Eq -- '--parallel 2 slots do not fit: 2 sessions of [0-9.]+ MiB \\(context 1024.*\\+ 1073741824 MiB of prefix-cache snapshots.* MiB of $KIND memory are free; use --prefix-cache-mib [0-9]+ or less'"
if [ "$DEV" = cpu ]; then
  free_mib=$(echo "$msg" | sed -n 's/.* \([0-9][0-9]*\) MiB of host memory are free.*/\1/p')
  check "... the free figure is the host's MemAvailable ($free_mib of $avail_mib MiB, less the mapped weights)" \
    "[ -n \"$free_mib\" ] && [ $free_mib -le $((avail_mib + 512)) ] && [ $free_mib -ge $((avail_mib / 2)) ]"
fi
# 256 slots of a 262144-token context: about 131 GiB of sessions
if [ "$DEV" = cpu ] && [ "$avail_mib" -lt 120000 ]; then
  "$TERN" serve --port 0 --threads 2 --quiet --device "$DEV" --parallel 256 --ctx 262144 --prefix-cache-mib 0 \
    >"$TMP/ctx.out" 2>"$TMP/ctx.err" </dev/null
  rc=$?
  msg=$(cat "$TMP/ctx.err")
  echo "  $msg"
  check "--parallel x --ctx over the free memory: refused at start, naming the slots that fit" \
    "[ $rc -ne 0 ] && echo \"\$msg\" | grep -Eq -- '--parallel 256 slots do not fit: 256 sessions of [0-9.]+ MiB \\(context 262144.* MiB of host memory are free; use --parallel [0-9]+, or a smaller --ctx'"
else
  echo "note: $avail_mib MiB available: the --parallel x --ctx case would fit here; skipped"
fi

# ---- --admit-free-mib over the free memory: the server starts (the floor is a run-time
# policy, not an allocation: the start line warns), every request is refused, it stays up
"$TERN" serve --port 0 --threads 2 --device "$DEV" --parallel 1 --ctx 512 --admit-free-mib 1073741824 \
  >"$TMP/adm.out" 2>"$TMP/adm.err" &
PIDS+=($!)
for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/adm.out" 2>/dev/null && break; sleep 0.05; done
check "a floor over the free memory: the start line warns" "grep -q 'under the admission floor' $TMP/adm.err"
start_ok() {
  local name=$1; shift
  "$TERN" serve --port 0 --threads 2 --quiet --device "$DEV" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 1200); do grep -q "listening on" "$TMP/$name.out" 2>/dev/null && break; sleep 0.05; done
}
start_ok plain --parallel 1 --ctx 512
timeout 120 python3 - "$TMP" "$DEV" <<'PY'
import http.client, json, re, sys
tmp, dev = sys.argv[1], sys.argv[2]
fails = 0
def check(name, cond, info=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{info}]"), flush=True)
    if not cond: fails += 1
def hp(name):
    m = re.search(r"http://([^ :]+):(\d+)", open(f"{tmp}/{name}.out").read())
    return m.group(1), int(m.group(2))
def req(name, method, path, body=None):
    c = http.client.HTTPConnection(*hp(name), timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.getheader("Retry-After"), r.read()
def metric(name, key):
    m = re.search(rf"^{re.escape(key)} (\S+)$", req(name, "GET", "/metrics")[2].decode(), re.M)
    return float(m.group(1)) if m else None
body = {"temperature": 0, "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
st, ra, data = req("adm", "POST", "/v1/chat/completions", body)
check("below the floor: 503 with Retry-After", st == 503 and ra is not None, (st, ra, data[:200]))
check("... saying why", b"free memory" in data and b"--admit-free-mib" in data, data[:300])
st, ra, data = req("adm", "POST", "/v1/chat/completions", dict(body, stream=True))
check("a streamed request too: 503 before any event", st == 503 and ra is not None, (st, ra, data[:200]))
st, ra, data = req("adm", "GET", "/health")
check("the server stays up", st == 200, st)
check("/metrics counts the refusals", metric("adm", 'tern_sched_refused_total{reason="memory"}') == 2)
check("/metrics: the floor and the free memory", metric("adm", "tern_sched_admit_free_bytes") == 1073741824 * 1048576
      and 0 < metric("adm", "tern_backend_memory_free_bytes") < 1073741824 * 1048576)
# the default: no floor on the CPU, 256 MiB on a GPU; requests go through
st, ra, data = req("plain", "POST", "/v1/chat/completions", body)
check("the default floor (none on the CPU, 256 MiB on a GPU): answered",
      st == 200 and metric("plain", "tern_sched_admit_free_bytes") == (0 if dev == "cpu" else 256 << 20), (st, data[:200]))
check("... and nothing refused", metric("plain", 'tern_sched_refused_total{reason="memory"}') == 0)
sys.exit(1 if fails else 0)
PY
[ $? -eq 0 ] || fails=$((fails + 1))
[ $fails -eq 0 ] && echo "PASS test_server_memory" || echo "FAIL test_server_memory ($fails)"
[ $fails -eq 0 ]
