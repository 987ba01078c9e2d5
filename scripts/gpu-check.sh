#!/usr/bin/env bash
# gpu-check.sh - one whole device call for the CUDA back-end.
#
#   (the no-Hadamard, PTQ1_0 and MLX qwen35 fixtures do not fit the 64 MiB carry beside the
#   tracked tree: their device parity tests fail to open them; CI runs them on the CPU)
#   scripts/gpu-check.sh pack     (here, no GPU needed) build with CUDA into build-gpu/, gather the
#                                 binaries, the shared libraries the device image lacks (cJSON,
#                                 utf8proc, PCRE2, libmicrohttpd, libedit and their deps) and the
#                                 fixtures (xz -9) into .gpu/ (ignored; carry it: <= 64 MiB)
#   scripts/gpu-check.sh run [STEPS]   (on the device, from the repo root; $OUT collects logs)
#       STEPS: comma list of  tests,sanitize,kbench,ops,bench,benchab,wgab,ncugdn,persist,bench8b,benchq2,tcab,gdnab,ncu,ncusrc,serve,depth
#              (default tests,bench)
#              kbench: the decode GEMV, default vs each KB_ENVS setting (";"-separated) -> kbench.txt
#              benchab: 27B bench model per BENCH_ENVS (";"-separated env settings) -> benchab.txt
#              depth: 27B bench at DEPTHS (0 4096 32768) x f32/f16/q8_0, --depth-fill random -> depth.txt
#              serve: tern serve --device cuda vs --device cpu, 8 concurrent greedy requests (serve-cuda.log)
#              ncu: Nsight Compute sections of the decode GEMV (FFN gate/up, batch 1) per NCU_ENVS -> ncu.txt
#              tcab: prefill A/B, GEMV (TERN_CUDA_GEMV=tiled) / GEMM exact / GEMM int8 (TERN_CUDA_TC,
#                    mapped by the CLI onto cuda_prefill): bonsai2-27b pp512 -> tcab.txt
#              ops: the decode-step ops (norm sites, GDN step, SwiGLU, Hadamard, attention), current
#                   vs fallback kernels, plain / graph / graph without PDL -> bench-ops.txt
#              ncusrc: ncu per-SASS-instruction stall samples of k_gemv_tiled (gate/up, batch 1) -> ncu-src.csv
#              gdnab: GDN prefill, the walk vs the scan: the tc_gdn rows of bench kernels, and
#                     bonsai2-27b pp512 (the scan) at chunk 64 and 512 with --profile -> gdnab.txt
#              (sanitize: SAN_TOOLS picks the compute-sanitizer tools, default all; SAN_UNIT="test:tool ..."
#               runs device unit tests under a tool too)
#              base: after each bench step, the same bench with bin/tern-base (packed when
#                    TERN_BASE_BIN names a tern binary built from an earlier commit): an A/B in one call
#              batchprof: 27B (BP_PRESET, default ternary-bonsai-27b) bench model --batch BP_BATCHES
#                    (1,8,16,32,64) --profile (per-B batch roofline share and kernel families), and
#                    pp BP_PP (8192) with --profile -> batchprof.json, pplong.json
#              servebench: tern serve --device cuda --parallel 64 on the 27B synth under load
#                    (scripts/serve_bench.py, SB_LEVELS concurrency, 512 in / SB_OUT out) -> servebench.txt;
#                    SB_BG=N: then SB_BG_LEVEL (8) streams with and without an N-token prompt beside them
#              verify: bench model --verify-k 8 on VERIFY_PRESETS (ternary-bonsai-27b) -> in gpu-check.log
#                    (with base: tern and tern-base alternately, twice)
#              (servebench: SB_IN / SB_OUT the prompt and output tokens (512 / 128), SB_CTX the slots' context
#               (1024); SB_TEMP sets the requests' temperature, default 0; SB_SERVE_ARGS more tern serve flags;
#               SB_BATCHES=none skips the levels, SB_BG_BASE= (empty) skips the run without the long prompt)
#              wgab: the wgmma GEMM, its default (one CTA per cluster) against wgmma2 (2-CTA clusters,
#                    the activation multicast; lab.h TC_WG_PAIRS): test_cuda_gemm's wg_* tests, wg_load_modes
#                    under memcheck and synccheck, bench kernels --gemm (wgmma and wgmma2 rows: the ratio per
#                    site and M), and the 27B (ternary-bonsai-27b) bench model -p 512,8192 --batch 16,64
#                    with TERN_CUDA_GEMM=wgmma then wgmma2, alternated WG_ROUNDS (2) times -> wgab.txt
#              ncugdn: Nsight Compute on the GDN decode update (k_gdn_step*) inside the 27B's batch step at
#                    NG_BATCH (64) sequences: the first NG_COUNT (400) launches profiled (SpeedOfLight, Occupancy,
#                    LaunchStats, MemoryWorkloadAnalysis, WarpStateStats), the ones whose grid has NG_BATCH
#                    sessions summarised (duration, DRAM / memory throughput, occupancy) -> ncu-gdn.txt
#              persist: test_cuda_persist (the qwen35 stages included), it under memcheck/racecheck/synccheck
#                    (--quick; PS_TOOLS), and PS_PRESET's (ternary-bonsai-27b) bench model per-op vs
#                    --persistent-qwen35 --profile -> persist.txt
#              loadparity: tern serve --device cuda --parallel LP_LEVEL (64) on LP_MODEL (qwen35-tiny
#                    fixture), LP_REQS (256) greedy requests at concurrency LP_LEVEL, each sent again
#                    alone (serve_bench.py --check-alone): every reply must be equal -> loadparity.json;
#                    LP_ARGS: more tern serve flags (e.g. --batch-invariant)
#       (the CLI maps TERN_CUDA_GRAPH/PDL/PROFILE/TC/GEMV onto the model parameters: tern --help)
#       GPU_TAG=x suffixes the bench files (an A/B in one call: run twice with an env switch)
#
# A short table is printed last; full logs go to $OUT (8 files at most come back).
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
P=.gpu
if [ "$mode" = pack ]; then
  set -e
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> "$(git rev-parse --git-common-dir)/info/exclude"
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTERN_CUDA=ON >/dev/null
  # the device tests: every tests/unit/test_cuda*.c, plus GPU_TESTS (the model-level tests that
  # take TERN_TEST_DEVICE=cuda)
  GT="$(cd tests/unit && ls test_cuda*.c | sed 's/\.c$//' | tr '\n' ' ') ${GPU_TESTS:-test_batch test_model}"
  cmake --build build-gpu -j"$(nproc)" --target tern $GT >/dev/null
  rm -rf $P; mkdir -p $P/bin $P/lib
  cp build-gpu/tern $P/bin/
  for t in $GT; do cp build-gpu/$t $P/bin/; done
  echo "$GT" > $P/tests
  if [ -n "${TERN_BASE_BIN:-}" ]; then cp "$TERN_BASE_BIN" $P/bin/tern-base; echo "${TERN_BASE_REV:-base}" > $P/base; fi
  ldd build-gpu/tern | awk '/=> \// {print $3}' | grep -vE 'libc\.so|libm\.so|libpthread|libdl|ld-linux|libstdc\+\+|libgcc_s|librt' |
    while read -r l; do cp -L "$l" $P/lib/; done
  F=${TERN_FIXTURES:-../shared/fixtures}
  tar -C "$F" -cf - qwen35-tiny/model-pq2_0.gguf \
      qwen35-tiny/reference.json qwen35-tiny/logits-A-0.f32 qwen35-tiny/logits-A-1.f32 qwen35-tiny/logits-A-2.f32 \
      qwen3-tiny/model-q2_0.gguf qwen3-tiny/model-q2_0_g64.gguf qwen3-tiny/reference.json \
      qwen3-tiny/logits-0.f32 qwen3-tiny/logits-1.f32 qwen3-tiny/logits-2.f32 \
      qwen3-q1-tiny/model-q1_0.gguf qwen3-q1-tiny/reference.json \
      qwen3-q1-tiny/logits-0.f32 qwen3-q1-tiny/logits-1.f32 qwen3-q1-tiny/logits-2.f32 | xz -9 -T0 > $P/fixtures.tar.xz
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty)" > $P/commit
  strip $P/bin/*; tar -C $P -cf - bin lib | xz -9 -T0 > $P/bin.tar.xz; rm -rf $P/bin $P/lib
  du -sh $P; du -sh $P/*
  exit 0
fi

# ------------------------------------------------------------------ on the device
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
steps=${2:-tests,bench}
has() { [[ ",$steps," == *",$1,"* ]]; }
export LD_LIBRARY_PATH=$PWD/$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/$P/bin
W=/tmp/tern-gpu; mkdir -p $W/fx
table=()
row() { table+=("$(printf '%-34s %s' "$1" "$2")"); }
log=$OUT/gpu-check.log; : > "$log"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >> "$log" 2>&1
[ -d $P/bin ] || tar -C $P -xJf $P/bin.tar.xz
[ -d $W/fx/qwen35-tiny ] || xz -dc $P/fixtures.tar.xz | tar -C $W/fx -xf -
export TERN_FIXTURES=$W/fx
if has tests; then
  for t in $(cat $P/tests); do
    s=$(date +%s.%N)
    TERN_TEST_DEVICE=cuda timeout 200 $B/$t > $W/$t.log 2>&1; rc=$?
    { echo "===== $t (rc=$rc)"; cat $W/$t.log; } >> $OUT/tests.log
    e=$(python3 -c "print(f'{$(date +%s.%N)-$s:.1f}')")
    row "$t (device cuda)" "rc=$rc $(grep -cE '^(FAIL|not ok)' $W/$t.log) fails, ${e}s; $(tail -n 1 $W/$t.log | cut -c1-60)"
  done
fi
if has sanitize; then
  for tool in ${SAN_TOOLS:-memcheck racecheck}; do
    TERN_TEST_DEVICE=cuda timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/tern eval -m $W/fx/qwen35-tiny/model-pq2_0.gguf --device cuda --ids $(seq -s, 1 70) --chunk 33 \
      --logits-out - --continue 4 > $OUT/san-$tool.log 2>&1
    row "compute-sanitizer $tool" "rc=$? $(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' $OUT/san-$tool.log)"
  done
  # two models driven from two threads on one GPU (a context each), under the sanitizers
  for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
    TERN_TEST_ONLY=two_models TERN_TEST_DEVICE=cuda timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/test_cuda > $W/san2-$tool.log 2>&1; rc=$?
    cat $W/san2-$tool.log >> $OUT/san-$tool.log
    row "sanitizer $tool two_models" "rc=$rc $(grep -m1 -E '(ERROR|RACECHECK|SYNCCHECK) SUMMARY' $W/san2-$tool.log) $(tail -n 1 $W/san2-$tool.log | cut -c1-40)"
  done
  # SAN_UNIT="test_cuda_attn:racecheck test_cuda_gemm:memcheck ...": device unit tests under a tool
  for tt in ${SAN_UNIT:-}; do
    t=${tt%%:*}; tool=${tt#*:}
    TERN_TEST_DEVICE=cuda timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/$t > $W/san-$t-$tool.log 2>&1; rc=$?
    cat $W/san-$t-$tool.log >> $OUT/san-$tool.log
    row "sanitizer $tool $t" "rc=$rc $(grep -m1 -E '(ERROR|RACECHECK|SYNCCHECK) SUMMARY' $W/san-$t-$tool.log) $(tail -n 1 $W/san-$t-$tool.log | cut -c1-40)"
  done
fi
bench() { # preset [n reps]
  local m=$W/$1.gguf
  [ -s $m ] || $B/tern synth --preset $1 --seed 1 --quiet $m >> "$log" 2>&1
  ${TB:-$B/tern} bench model -m $m --device cuda -p 512 -n ${2:-128} --reps ${3:-3} --batch 8 --profile --json > $OUT/bench-$1${GPU_TAG:-}.json 2>> "$log"
  row "bench $1${GPU_TAG:-}" "$(python3 - $OUT/bench-$1${GPU_TAG:-}.json <<'PY'
import json,sys
try:
    d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    r=d['tg_tok_s']*d['bytes_per_token']/1e9/d['ceiling_gbps']
    print(f"tg {d['tg_tok_s']:.1f} tok/s ({r:.0%} of {d['ceiling_gbps']:.0f} GB/s) pp {d['pp_tok_s']:.0f} tok/s"
          + (f" b8 {d.get('batch_tok_s',0):.0f}" if 'batch_tok_s' in d else "") + (f" launches/tok {d['launches_per_token']}" if 'launches_per_token' in d else "")
          + (f" gap {d['gap_us_per_launch']:.2f} us/launch" if 'gap_us_per_launch' in d else ""))
except Exception as e: print('no result:', e)
PY
)"
}
kb_row() { # label file: the batch-1 and batch-8 share of the ceiling over the shapes
  row "$1" "$(python3 - "$2" <<'PY'
import sys
r = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) >= 9 and f[0] in ('tiled', 'tiled+q') and f[-2].endswith('%'):
        r.setdefault((f[0], int(f[-5])), []).append(float(f[-2][:-1]))
print(' '.join(f"{k[0]} b{k[1]} {min(v):.0f}-{max(v):.0f}%" for k, v in sorted(r.items()) if k[1] in (1, 8)) or 'no rows')
PY
)"
}
if has kbench; then # the decode GEMV: default vs forced matmul families (TERN_CUDA_GEMV, mapped by the CLI)
  kb=$OUT/kbench.txt; : > $kb
  { echo "===== default"; $B/tern bench kernels --device cuda --quick --layout tiled --no-gemm ${KB_ARGS:-}; } >> $kb 2>&1
  kb_row "kbench default" <(sed -n '/===== default/,$p' $kb)
  IFS=';' read -ra kenvs <<< "${KB_ENVS:-TERN_CUDA_GEMV=tiled}"
  for ev in "${kenvs[@]}"; do
    { echo "===== $ev"; env $ev $B/tern bench kernels --device cuda --quick --layout tiled --no-gemm ${KB_ARGS:-}; } > $W/kb-c.txt 2>&1
    cat $W/kb-c.txt >> $kb; kb_row "kbench $ev" $W/kb-c.txt
  done
fi
if has wgab; then # the wgmma GEMM in 2-CTA clusters (wgmma2) against its default, in one call
  TERN_TEST_ONLY=wg_ TERN_TEST_DEVICE=cuda timeout 200 $B/test_cuda_gemm > $W/wgab-t.log 2>&1; rc=$?
  cat $W/wgab-t.log >> $OUT/wgab.txt
  row "test_cuda_gemm wg_*" "rc=$rc $(grep -cE '^(FAIL|not ok)' $W/wgab-t.log) fails; $(tail -n 1 $W/wgab-t.log | cut -c1-50)"
  for tool in memcheck synccheck; do
    TERN_TEST_ONLY=wg_load_modes TERN_TEST_DEVICE=cuda timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/test_cuda_gemm > $W/wgab-$tool.log 2>&1; rc=$?
    tail -n 20 $W/wgab-$tool.log >> $OUT/wgab.txt
    row "sanitizer $tool wg_load_modes" "rc=$rc $(grep -m1 -E '(ERROR|SYNCCHECK) SUMMARY' $W/wgab-$tool.log)"
  done
  timeout 300 $B/tern bench kernels --device cuda --gemm --reps 5 > $W/wgab-k.txt 2>&1
  cat $W/wgab-k.txt >> $OUT/wgab.txt
  row "kernels wgmma2 / wgmma (us)" "$(python3 - $W/wgab-k.txt <<'PY'
import sys
t = {}
for l in open(sys.argv[1]):
    f = l.split()
    if len(f) > 9 and f[0] in ('wgmma', 'wgmma2'):
        try:
            i = next(j for j in range(2, len(f)) if f[j].isdigit())  # k (the site may be two words)
            t[(f[0], ' '.join(f[1:i]), int(f[i + 2]))] = float(f[i + 5])
        except (StopIteration, ValueError, IndexError):
            pass
r = [f"{s.split()[-1]} M{m} {t[('wgmma2', s, m)] / u:.2f}" for (v, s, m), u in sorted(t.items())
     if v == 'wgmma' and ('wgmma2', s, m) in t]
print(' '.join(r) or 'no rows')
PY
)"
  m=$W/ternary-bonsai-27b.gguf
  [ -s $m ] || $B/tern synth --preset ternary-bonsai-27b --seed 1 --quiet $m >> "$log" 2>&1
  for round in $(seq ${WG_ROUNDS:-2}); do
    for v in wgmma wgmma2; do
      TERN_CUDA_GEMM=$v timeout 200 $B/tern bench model -m $m --device cuda -p 512,8192 -n 16 --reps 2 --batch 16,64 --json \
        > $W/wgab.json 2>> "$log"
      { echo "===== TERN_CUDA_GEMM=$v round $round"; cat $W/wgab.json; } >> $OUT/wgab.txt
      row "bench 27B $v ($round)" "$(python3 - $W/wgab.json <<'PY'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    print(' '.join(f"pp{p['tokens']} {p['tok_s']:.0f}" for p in d['prompts']),
          ' '.join(f"b{b['batch']} {b['tok_s']:.0f} ({b['roofline_ratio']:.0%})" for b in d['batches']))
except Exception as e:
    print('no result', e)
PY
)"
    done
  done
fi
if has benchab; then # 27B model A/B over env switches (BENCH_ENVS, ';'-separated)
  m=$W/bonsai2-27b.gguf
  [ -s $m ] || $B/tern synth --preset bonsai2-27b --seed 1 --quiet $m >> "$log" 2>&1
  IFS=';' read -ra envs <<< "${BENCH_ENVS:-TERN_CUDA_GEMV=tiled;TERN_CUDA_PDL=0}"
  for ev in "${envs[@]}"; do
    env $ev $B/tern bench model -m $m --device cuda -p 512 -n 64 --reps 1 --batch 8 --json > $W/ab.json 2>> "$log"
    { echo "===== $ev"; cat $W/ab.json; } >> $OUT/benchab.txt
    row "bench 27B $ev" "$(python3 -c "
import json,sys
try:
    d=json.loads(open('$W/ab.json').read().strip().splitlines()[-1]); print(f\"tg {d['tg_tok_s']:.1f} pp {d['pp_tok_s']:.0f} b8 {d.get('batch_tok_s',0):.0f} launches {d['launches_per_token']:.0f}\")
except Exception as e: print('no result', e)")"
  done
fi
if has ops; then
  $B/tern bench kernels --device cuda --ops > $OUT/bench-ops.txt 2>&1
  row "bench kernels --ops" "rc=$? (see bench-ops.txt)"
fi
if has tcab; then # prefill A/B: the GEMV in chunks of 8, the GEMM exact, the GEMM int8 (pp512, one log)
  m=$W/bonsai2-27b.gguf
  [ -s $m ] || $B/tern synth --preset bonsai2-27b --seed 1 --quiet $m >> "$log" 2>&1
  for v in TERN_CUDA_GEMV=tiled TERN_CUDA_TC=exact TERN_CUDA_TC=int8; do
    { for c in 64 512; do
        echo "===== $v bench model bonsai2-27b pp512 chunk $c"
        env $v $B/tern bench model -m $m --device cuda -p 512 -n 8 --reps 2 --chunk $c --profile 2>&1 |
          tee $W/tcab-$v-$c.txt
        row "tcab $v chunk $c" "pp $(awk '/^pp /{print $2}' $W/tcab-$v-$c.txt) tok/s"
      done; } >> $OUT/tcab.txt
  done
fi
if has ncu; then # Nsight Compute on the decode GEMV, FFN gate/up shape, batch 1, per NCU_ENVS setting
  IFS=';' read -ra nenvs <<< "${NCU_ENVS:-TERN_CUDA_GEMV=tiled;TERN_X=1}"
  for ev in "${nenvs[@]}"; do
    { echo "===== ncu $ev"; env $ev timeout 240 ncu --clock-control none -k regex:'k_gemv_tiled' --launch-skip 20 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
        --section MemoryWorkloadAnalysis $B/tern bench kernels --device cuda --quick --layout tiled --batch 1 --no-gemm 2>&1 |
        grep -vE '^(tiled|layout|tern bench|==PROF==)' ; } >> $OUT/ncu.txt
    row "ncu $ev" "$(grep -m1 -E 'DRAM Throughput' $OUT/ncu.txt | tail -n 1 | awk '{print $NF"%"}') dram (see ncu.txt)"
  done
fi
if has ncugdn; then # the GDN decode update of the 27B's batch step under Nsight Compute
  m=$W/ternary-bonsai-27b.gguf
  [ -s $m ] || $B/tern synth --preset ternary-bonsai-27b --seed 1 --quiet $m >> "$log" 2>&1
  timeout 480 ncu --clock-control none -k regex:'k_gdn_step' --launch-count ${NG_COUNT:-400} --csv --page details \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    --section WarpStateStats $B/tern bench model -m $m --device cuda -p 16 -n 2 --reps 1 --batch ${NG_BATCH:-64} \
    > $W/ncugdn.csv 2> $W/ncugdn.log
  row "ncu GDN step b${NG_BATCH:-64}" "$(python3 - $W/ncugdn.csv ${NG_BATCH:-64} $OUT/ncu-gdn.txt <<'PY'
import csv, sys, statistics
src, nb, out = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l for l in open(src, errors='replace') if l.startswith('"')]
rows = [r for r in csv.DictReader(lines) if r.get('Grid Size', '').replace(' ', '').endswith(',%s,1)' % nb)]
if not rows:
    print('no launches with %s sessions (see the log)' % nb); sys.exit()
ids = sorted({r['ID'] for r in rows}, key=int)
def metric(name):
    v = []
    scale = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3, 'second': 1e6}  # durations in us
    for i in ids:
        for r in rows:
            if r['ID'] == i and r['Metric Name'] == name:
                try: v.append(float(r['Metric Value'].replace(',', '')) * scale.get(r['Metric Unit'], 1.0))
                except ValueError: pass
                break
    return statistics.median(v) if v else float('nan')
with open(out, 'w') as f:
    f.write('%d launches with %s sessions; the first, whole:\n' % (len(ids), nb))
    for r in rows:
        if r['ID'] == ids[0]:
            f.write('%-12s %-26s %-52s %-10s %s\n' % (r['Kernel Name'][:12], r['Section Name'][:26], r['Metric Name'][:52],
                                                    r['Metric Unit'], r['Metric Value']))
print('%d launches: %.1f us, DRAM %.0f%%, memory %.0f%%, occupancy %.0f%% (medians; ncu-gdn.txt)' % (
    len(ids), metric('Duration'), metric('DRAM Throughput'),
    metric('Memory Throughput'), metric('Achieved Occupancy')))
PY
)"
  tail -n 20 $W/ncugdn.log >> $OUT/ncu-gdn.txt
fi
if has persist; then # the persistent step: its device test (qwen35 stages included), sanitizers, the 27B
  TERN_TEST_DEVICE=cuda timeout 240 $B/test_cuda_persist > $W/persist-t.log 2>&1; rc=$?
  { echo "===== test_cuda_persist (rc=$rc)"; cat $W/persist-t.log; } >> $OUT/persist.txt
  row "test_cuda_persist" "rc=$rc $(grep -cE '^(FAIL|not ok)' $W/persist-t.log) fails; $(tail -n 1 $W/persist-t.log | cut -c1-50)"
  for tool in ${PS_TOOLS:-memcheck racecheck synccheck}; do
    TERN_PERSIST_QUICK=1 TERN_TEST_DEVICE=cuda timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/test_cuda_persist > $W/persist-$tool.log 2>&1; rc=$?
    { echo "===== $tool"; tail -n 30 $W/persist-$tool.log; } >> $OUT/persist.txt
    row "sanitizer $tool test_cuda_persist" "rc=$rc $(grep -m1 -E '(ERROR|RACECHECK|SYNCCHECK) SUMMARY' $W/persist-$tool.log)"
  done
  m=$W/${PS_PRESET:-ternary-bonsai-27b}.gguf
  [ -s $m ] || $B/tern synth --preset ${PS_PRESET:-ternary-bonsai-27b} --seed 1 --quiet $m >> "$log" 2>&1
  for v in "" "--persistent-qwen35 --profile"; do
    timeout 200 $B/tern bench model -m $m --device cuda -p 64 -n 64 --reps 3 $v > $W/persist-b.txt 2>&1
    { echo "===== bench model $v"; cat $W/persist-b.txt; } >> $OUT/persist.txt
    row "27B bench ${v:-per-op}" "$(grep -m1 -E 'tg|decode' $W/persist-b.txt | cut -c1-70)"
  done
fi
if has ncusrc; then # the decode GEMV (gate/up, batch 1) sampled per SASS instruction: stall reasons -> ncu-src.csv
  timeout 240 ncu --clock-control none -k regex:'k_gemv_tiled' --launch-skip 20 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --import-source no -f -o $W/gemv-src \
    $B/tern bench kernels --device cuda --quick --layout tiled --batch 1 --no-gemm > $W/ncusrc.log 2>&1
  ncu -i $W/gemv-src.ncu-rep --page source --print-source sass --csv > $OUT/ncu-src.csv 2>> $W/ncusrc.log
  ncu -i $W/gemv-src.ncu-rep --page details >> $W/ncusrc.log 2>&1
  cp $W/ncusrc.log $OUT/ncu-src.log
  row "ncu source (k_gemv_tiled)" "$(wc -l < $OUT/ncu-src.csv) csv lines (see ncu-src.csv)"
fi
if has serve; then # tern serve --device cuda vs --device cpu: the same greedy replies, batched on the GPU
  fx=$W/fx/qwen3-tiny/model-q2_0.gguf
  $B/tern serve -m $fx --device cuda --port 18080 --parallel 4 --quiet > $OUT/serve-cuda.log 2>&1 & sa=$!
  $B/tern serve -m $fx --device cpu --port 18081 --parallel 4 --quiet > $W/serve-cpu.log 2>&1 & sb=$!
  for i in $(seq 60); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18080/health'); u.urlopen('http://127.0.0.1:18081/health')" 2>/dev/null && break; sleep 0.5; done
  python3 scripts/serve-compare.py --a http://127.0.0.1:18080 --b http://127.0.0.1:18081 -n 8 --max-tokens 32 > $W/sc.txt 2>&1; rc=$?
  cat $W/sc.txt >> $OUT/serve-cuda.log
  kill $sa $sb 2>/dev/null; wait $sa $sb 2>/dev/null
  row "serve --device cuda vs cpu" "rc=$rc $(grep identical $W/sc.txt) $(grep '^a:' $W/sc.txt | grep -oE '[0-9.]+ tok/s aggregate')"
fi
if has gdnab; then # GDN prefill: the older walk vs the scan (tc_gdn_chunk.cu), one log
  m=$W/bonsai2-27b.gguf
  [ -s $m ] || $B/tern synth --preset bonsai2-27b --seed 1 --quiet $m >> "$log" 2>&1
  $B/tern bench kernels --device cuda --quick --gdn > $W/gdn-k.txt 2>&1
  { echo "===== bench kernels --device cuda (the GDN rows)"; sed -n '/^GDN prefill/,$p' $W/gdn-k.txt; } >> $OUT/gdnab.txt
  row "gdn tc_gdn us/call" "$(awk '$1=="walk" || ($1=="scan" && NF==5) {printf "%s %s rows %s; ", $1, $2, $3}' $W/gdn-k.txt)"
  for c in ${GDNAB_CHUNKS:-64 512}; do
    v=scan
    $B/tern bench model -m $m --device cuda -p 512 -n 8 --reps 2 --chunk $c --profile > $W/gdn-$v-$c.txt 2>&1
    { echo "===== bench model bonsai2-27b pp512 chunk $c (the scan)"; cat $W/gdn-$v-$c.txt; } >> $OUT/gdnab.txt
    row "gdnab $v chunk $c" "pp $(awk '/^pp /{print $2}' $W/gdn-$v-$c.txt) tok/s; $(sed -n '/^profile (prefill/,$p' $W/gdn-$v-$c.txt | grep -m1 -i gdn | tr -s ' ')"
  done
fi
if has batchprof; then # issue 25: batched decode against the batch roofline, long prefill, profiled
  bp=${BP_PRESET:-ternary-bonsai-27b}; m=$W/$bp.gguf
  [ -s $m ] || $B/tern synth --preset $bp --seed 1 --quiet $m >> "$log" 2>&1
  ${TB:-$B/tern} bench model -m $m --device cuda -p 512 -n 16 --reps 2 --batch ${BP_BATCHES:-1,8,16,32,64} \
      --profile --json > $OUT/batchprof${GPU_TAG:-}.json 2>> "$log"
  row "batchprof $bp${GPU_TAG:-}" "$(python3 -c "
import json
try:
    d=json.loads(open('$OUT/batchprof${GPU_TAG:-}.json').read().strip().splitlines()[-1])
    print(f\"tg {d['tg_tok_s']:.0f} pp {d['pp_tok_s']:.0f} \"+' '.join(f\"b{b['batch']} {b['tok_s']:.0f} ({b['roofline_ratio']:.0%})\" for b in d['batches']))
except Exception as e: print('no result', e)")"
  if [ "${BP_PP:-8192}" != 0 ]; then
    ${TB:-$B/tern} bench model -m $m --device cuda -p ${BP_PP:-8192} -n 4 --reps 1 --profile --json > $OUT/pplong${GPU_TAG:-}.json 2>> "$log"
    row "pp${BP_PP:-8192} $bp${GPU_TAG:-}" "$(python3 -c "
import json
try:
    d=json.loads(open('$OUT/pplong${GPU_TAG:-}.json').read().strip().splitlines()[-1]); print(f\"pp {d['pp_tok_s']:.0f} tok/s\")
except Exception as e: print('no result', e)")"
  fi
fi
if has depth; then # issue 15: the 27B at depth 0 / 4k / 32k x f32 / f16 / q8_0 (the depth filled at random)
  m=$W/bonsai2-27b.gguf
  [ -s $m ] || $B/tern synth --preset bonsai2-27b --seed 1 --quiet $m >> "$log" 2>&1
  for d in ${DEPTHS:-0 4096 32768}; do
    for ct in f32 f16 q8_0; do
      $B/tern bench model -m $m --device cuda --depth $d --depth-fill random -p 64 -n 32 --reps 2 \
        --cache-type $ct --json > $W/dp.json 2>> "$log"
      { echo "===== depth $d cache $ct"; cat $W/dp.json; } >> $OUT/depth.txt
      row "depth $d $ct" "$(python3 -c "
import json
try:
    d=json.loads(open('$W/dp.json').read().strip().splitlines()[-1])
    print(f\"tg {d['tg_tok_s']:.1f} tok/s ({d['roofline_ratio']:.0%} of roofline, {d['bytes_per_token']/1e9:.2f} GB/tok, kv {d['kv_bytes_per_token']/1e6:.0f} MB) pp {d['pp_tok_s']:.0f}\")
except Exception as e: print('no result', e)")"
    done
  done
fi
if has servebench; then # issue 26: tern serve --device cuda on the 27B synth under load (scripts/serve_bench.py)
  m=$W/${SB_PRESET:-ternary-bonsai-27b}.gguf
  [ -s $m ] || $B/tern synth --preset ${SB_PRESET:-ternary-bonsai-27b} --seed 1 --quiet $m >> "$log" 2>&1
  for db in ${SB_BATCHES:-0 64}; do
    [ "$db" = none ] && continue  # SB_BATCHES=none: only the background-prompt runs
    $B/tern serve -m $m --device cuda --port 18090 --parallel 64 --ctx ${SB_CTX:-1024} --decode-batch $db ${SB_SERVE_ARGS:-} --quiet > $W/sb-serve-$db.log 2>&1 & sp=$!
    for i in $(seq 240); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18090/health')" 2>/dev/null && break; sleep 0.5; done
    timeout ${SB_TIMEOUT:-240} python3 scripts/serve_bench.py --base-url http://127.0.0.1:18090 --label "tern cuda decode-batch $db" \
      --concurrency ${SB_LEVELS:-1,8,64} --num-requests ${SB_REQS:-2x} --input-len ${SB_IN:-512} --output-len ${SB_OUT:-128} --temperature ${SB_TEMP:-0} \
      --json-out $OUT/servebench-$db.json > $W/sb-$db.txt 2>&1; rc=$?
    python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:18090/metrics').read().decode())" 2>/dev/null | grep -E '^tern_(sched|decode_batch_size_(sum|count)|prefix_cache_snap|prompt_tokens|backend_memory)' >> $W/sb-$db.txt
    kill $sp 2>/dev/null; wait $sp 2>/dev/null
    cat $W/sb-$db.txt >> $OUT/servebench.txt
    row "servebench decode-batch $db" "rc=$rc $(grep -E '^ +c=' $W/sb-$db.txt | awk '{printf "%s %s tok/s itl99 %s; ", $1, $5, $11}')"
  done
  if [ -n "${SB_BG:-}" ]; then # the decoding streams' ITL with and without a concurrent SB_BG-token prompt
    $B/tern serve -m $m --device cuda --port 18091 --parallel 64 --ctx $((SB_BG + 1024)) ${SB_SERVE_ARGS:-} --quiet > $W/sb-bg-serve.log 2>&1 & sp=$!
    for i in $(seq 240); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18091/health')" 2>/dev/null && break; sleep 0.5; done
    for bg in ${SB_BG_BASE-0} $SB_BG; do
      timeout ${SB_TIMEOUT:-240} python3 scripts/serve_bench.py --base-url http://127.0.0.1:18091 --label "tern cuda, background prompt $bg" \
        --concurrency ${SB_BG_LEVEL:-8} --num-requests 1x --input-len 512 --output-len ${SB_OUT:-128} --background-prompt $bg \
        --json-out $OUT/servebench-bg$bg.json > $W/sb-bg$bg.txt 2>&1; rc=$?
      cat $W/sb-bg$bg.txt >> $OUT/servebench.txt
      row "servebench bg prompt $bg" "rc=$rc $(grep -E '^ +c=' $W/sb-bg$bg.txt | awk '{printf "%s %s tok/s itl99 %s", $1, $5, $11}') $(grep -o 'beside it.*' $W/sb-bg$bg.txt | head -1)"
    done
    kill $sp 2>/dev/null; wait $sp 2>/dev/null
  fi
fi
if has verify; then # issue 24: the verify pass over k+1 positions against one decode step, k = 1..8
  for vp in ${VERIFY_PRESETS:-ternary-bonsai-27b}; do
    m=$W/$vp.gguf
    [ -s $m ] || $B/tern synth --preset $vp --seed 1 --quiet $m >> "$log" 2>&1
    # with base: tern and tern-base alternately, twice (an A/B on one card)
    bins=tern; if has base && [ -x $B/tern-base ]; then bins="tern tern-base tern tern-base"; fi
    for bin in $bins; do
      timeout ${VERIFY_TIMEOUT:-150} $B/$bin bench model -m $m --device cuda -p 512 -n 16 --reps 3 --verify-k 8 > $W/verify-$vp.txt 2>&1
      row "verify-k $vp $bin" "rc=$? $(grep -o 'decode step: [0-9.]* ms' $W/verify-$vp.txt); $(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+' $W/verify-$vp.txt | awk '{printf "k%s %sx; ", $1, $3}')"
      { echo "== $bin"; cat $W/verify-$vp.txt; } >> "$log"
    done
  done
fi
if has loadparity; then # issue 26: greedy replies under load equal the same requests sent alone
  m=${LP_MODEL:-$W/fx/qwen35-tiny/model-pq2_0.gguf}
  $B/tern serve -m $m --device cuda --port 18092 --parallel ${LP_LEVEL:-64} --ctx 1024 --quiet ${LP_ARGS:-} > $W/lp-serve.log 2>&1 & sp=$!
  for i in $(seq 1 240); do curl -sf http://127.0.0.1:18092/health >/dev/null 2>&1 && break; sleep 0.5; done
  timeout ${LP_TIMEOUT:-240} python3 scripts/serve_bench.py --base-url http://127.0.0.1:18092 --label "tern cuda load parity" \
    --concurrency ${LP_LEVEL:-64} --num-requests ${LP_REQS:-256} --input-len 96:0.5 --output-len ${LP_OUT:-32} --temperature 0 \
    --check-alone --json-out $OUT/loadparity.json > $W/lp.txt 2>&1; rc=$?
  cat $W/lp.txt >> "$log"
  row "load parity c=${LP_LEVEL:-64} ${LP_ARGS:-}" "rc=$rc $(grep -o '[0-9]*/[0-9]* replies equal.*' $W/lp.txt | head -1)"
  # cancelled streams free their slots and device memory
  timeout 120 python3 scripts/serve_bench.py --base-url http://127.0.0.1:18092 --label "tern cuda cancel" \
    --concurrency ${LP_LEVEL:-64} --num-requests ${LP_LEVEL:-64} --input-len 96 --output-len 400 --cancel-after 5 \
    --json-out $OUT/cancel.json > $W/cancel.txt 2>&1; rc=$?
  cat $W/cancel.txt >> "$log"
  row "cancel c=${LP_LEVEL:-64}" "rc=$rc $(grep -o 'streams cancelled.*' $W/cancel.txt | head -1)"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
fi
# base: each bench again with the packed earlier build, right after (an A/B in one call)
bench_ab() { bench "$@"; if has base && [ -x $B/tern-base ]; then TB=$B/tern-base GPU_TAG=-base bench "$@"; fi; }
has bench && bench_ab bonsai2-27b
has benchq2 && bench_ab ternary-bonsai-27b 64 2
has bench8b && bench_ab ternary-bonsai-8b 64 2
echo; echo "== gpu-check $(date -u +%FT%TZ) commit $(cat $P/commit 2>/dev/null || echo unknown) (packed)$([ -s $P/base ] && echo ", base $(cat $P/base)")"
for r in "${table[@]}"; do echo "$r"; done | tee -a "$log"
