#!/usr/bin/env bash
# test_tokenizer_oracle.sh - `tern tokenize` vs Hugging Face `tokenizers` on the
# fixtures' tokenizer.json (qwen2 and qwen35 pre-tokenizers) over the 380-string
# parity corpus (tools/tok_corpus.py), with tern reading the GGUF keys, the
# tokenizer.json and the MLX pack. Usage: bash test_tokenizer_oracle.sh /path/to/tern
set -uo pipefail
TERN=${1:?usage: test_tokenizer_oracle.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FIX=${TERN_FIXTURES:-${TERN_FIXTURES_DEFAULT:-$SRC/../shared/fixtures}}
if [ ! -d "$FIX/qwen3-tiny" ]; then echo "*** SKIPPED: fixtures missing ($FIX) ***"; exit 77; fi
if ! python3 -c "import tokenizers" 2>/dev/null; then
  echo "*** SKIPPED: python3 'tokenizers' missing (pip install -r tools/requirements.txt) ***"; exit 77
fi
fail=0; pass=0
run() { if python3 "$SRC/tools/tok_oracle.py" "$TERN" "$@" | tail -4; then pass=$((pass+1)); else fail=$((fail+1)); fi; }
run "$FIX/qwen3-tiny/model-q2_0.gguf" --hf "$FIX/qwen3-tiny/tokenizer.json"
run "$FIX/qwen3-tiny/tokenizer.json" --hf "$FIX/qwen3-tiny/tokenizer.json"
run "$FIX/qwen35-tiny/model-pq2_0.gguf" --hf "$FIX/qwen35-tiny/tokenizer.json"
run "$FIX/qwen35-tiny/mlx-pack" --hf "$FIX/qwen35-tiny/tokenizer.json"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
