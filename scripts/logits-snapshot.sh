#!/usr/bin/env bash
# logits-snapshot.sh TERN_BIN OUTDIR - write the CPU logits of every fixture model and
# sequence (all positions), for each ISA level, chunk sizes 1/7/64, with and without
# --repack (the file layout: TERN_REPACK=0, which older binaries ignore - they kept
# the file layout by default), plus greedy continuations and the embedded default model. Two snapshots
# taken before and after a refactor must be byte-identical (`diff -r A B`): that is
# how "bit-identical CPU logits" is checked. Fixtures: $TERN_FIXTURES or ../shared/fixtures.
set -euo pipefail
T=$1; O=$2; F=${TERN_FIXTURES:-$(dirname "$0")/../../shared/fixtures}
[ -d "$F" ] || { echo "logits-snapshot: FIXTURES MISSING at $F" >&2; exit 1; }
mkdir -p "$O"
ids() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(','.join(map(str,d['sequences'][int(sys.argv[2])]['ids'])))" "$1" "$2"; }
models=( "qwen35-tiny/model-pq2_0.gguf" "qwen35-tiny/model-ptq1_0.gguf" "qwen35-tiny/model-q2_0-nohadamard.gguf"
         "qwen35-tiny/mlx-pack" "qwen3-tiny/model-q2_0.gguf" "qwen3-tiny/model-q2_0_g64.gguf"
         "qwen3-q1-tiny/model-q1_0.gguf" "qwen3-q1-tiny/model-q1_0_q2out.gguf" )
for isa in ${TERN_SNAPSHOT_ISAS:-scalar avx2 avx512}; do
  for m in "${models[@]}"; do
    ref=$F/$(dirname "$m")/reference.json; tag=$(echo "$m" | tr '/.' '__')
    for s in 0 1 2; do
      I=$(ids "$ref" $s)
      for c in 1 7 64; do
        for rp in "" "--repack"; do
          TERN_REPACK=$([ -n "$rp" ] && echo 1 || echo 0) TERN_ISA=$isa "$T" eval -m "$F/$m" --ids "$I" --chunk $c $rp --quiet \
            --logits-out "$O/$isa.$tag.s$s.c$c${rp:+.rp}.f32" --continue 8 > "$O/$isa.$tag.s$s.c$c${rp:+.rp}.cont"
        done
      done
    done
  done
  TERN_ISA=$isa "$T" eval --ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 --quiet \
     --logits-out "$O/$isa.default.f32" --continue 16 > "$O/$isa.default.cont"
done
echo "logits-snapshot: $(ls "$O" | wc -l) files in $O"
