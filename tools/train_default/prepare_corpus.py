#!/usr/bin/env python3
"""prepare_corpus.py - corpus, tokenizer and token files for tern's default model.

Reads the reST documentation sources unpacked by fetch_corpus.sh (Debian
packages linux-doc-6.1 and python3.11-doc), lightly strips reST markup, splits
the documents into train / held-out by a hash of their path (2 % held out),
trains a byte-level BPE tokenizer (tokenizers library; NFC, the Qwen3.5 split
regex, ByteLevel without prefix space, the ChatML special tokens after the BPE
ids) and writes:

  OUT/tokenizer.json, OUT/tokenizer_config.json   (transformers-style, as the fixtures)
  OUT/train.bin, OUT/val.bin                       uint16 little-endian token ids, documents
                                                   separated by <|endoftext|>
  OUT/heldout.txt                                  the held-out text (for `tern perplexity`)
  OUT/corpus.json                                  counts, files, bytes

Usage: python3 prepare_corpus.py DEBS_ROOT OUT [--vocab 8192]
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import unicodedata

import numpy as np

SPECIALS = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
            ("<think>", False), ("</think>", False)]
# Qwen3.5 pre-tokenizer split regex (llama.cpp pre-tokenizer "qwen35"): Qwen2's with \p{M}.
SPLIT_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
            r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHAT_TEMPLATE = ("{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}"
                 "{{- '<|im_start|>assistant\\n' -}}{%- if enable_thinking is defined and enable_thinking is false -%}"
                 "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- else -%}{{- '<think>\\n' -}}{%- endif -%}{%- endif -%}")

UNDERLINE = re.compile(r"^\s*([=\-~^*#+`'\".:_])\1{2,}\s*$")
DIRECTIVE = re.compile(r"^\s*\.\.(\s|$)")
OPTION = re.compile(r"^\s+:[A-Za-z][\w -]*:(\s.*)?$")
ROLE = re.compile(r":[A-Za-z][\w:+.-]*:`~?([^`<]*?)(\s*<[^>]*>)?`")
SPDX = re.compile(r"SPDX-License-Identifier")


def clean_rst(text):
    """Drop section underlines, directive/comment lines and their option lines;
    replace :role:`target` with its text; collapse runs of blank lines."""
    out = []
    for line in text.splitlines():
        if SPDX.search(line) or UNDERLINE.match(line) or DIRECTIVE.match(line) or OPTION.match(line):
            continue
        line = ROLE.sub(lambda m: m.group(1), line).rstrip()
        out.append(line.expandtabs(8))
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return unicodedata.normalize("NFC", text)


def collect(root):
    """(relpath, text) of every English reST/text document of the two packages."""
    docs = []
    kdir = os.path.join(root, "usr/share/doc/linux-doc-6.1/Documentation")
    for dp, dn, fn in os.walk(kdir):
        dn[:] = sorted(d for d in dn if d != "translations")
        for f in sorted(fn):
            if f.endswith(".rst.gz") or f.endswith(".txt.gz"):
                p = os.path.join(dp, f)
                with gzip.open(p, "rb") as fh:
                    docs.append(("linux-doc/" + os.path.relpath(p, kdir), fh.read().decode("utf-8", "replace")))
    pdir = os.path.join(root, "usr/share/doc/python3.11/html/_sources")
    for dp, dn, fn in os.walk(pdir):
        dn.sort()
        for f in sorted(fn):
            if f.endswith(".rst.txt"):
                p = os.path.join(dp, f)
                with open(p, "rb") as fh:
                    docs.append(("python-doc/" + os.path.relpath(p, pdir), fh.read().decode("utf-8", "replace")))
    if not docs:
        sys.exit(f"no documents under {root}: run fetch_corpus.sh first")
    return docs


def is_heldout(relpath):
    return int(hashlib.sha256(relpath.encode()).hexdigest(), 16) % 50 == 0


def train_tokenizer(texts, vocab):
    from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers, processors
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_bpe = vocab - len(SPECIALS)
    trainer = trainers.BpeTrainer(vocab_size=n_bpe, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != n_bpe:
        sys.exit(f"BPE vocab {tok.get_vocab_size()} != {n_bpe} (corpus too small?)")
    from tokenizers import AddedToken
    for content, special in SPECIALS:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    assert tok.get_vocab_size() == vocab
    return tok


def tokenizer_config(vocab):
    n0 = vocab - len(SPECIALS)
    dec = {str(n0 + i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": s} for i, (c, s) in enumerate(SPECIALS)}
    return {"tokenizer_class": "PreTrainedTokenizerFast", "added_tokens_decoder": dec,
            "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
            "add_bos_token": False, "add_eos_token": False, "add_prefix_space": False,
            "clean_up_tokenization_spaces": False, "errors": "replace", "model_max_length": 4096,
            "split_special_tokens": False, "chat_template": CHAT_TEMPLATE}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("debs_root")
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=8192)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    docs = [(p, clean_rst(t)) for p, t in collect(a.debs_root)]
    docs = [(p, t) for p, t in docs if len(t) >= 200]
    train = [t for p, t in docs if not is_heldout(p)]
    held = [(p, t) for p, t in docs if is_heldout(p)]
    tok = train_tokenizer(train, a.vocab)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(a.vocab), f, indent=2)
    eot = tok.token_to_id("<|endoftext|>")

    def encode(texts):
        ids = []
        for enc in tok.encode_batch(texts):
            ids.extend(enc.ids)
            ids.append(eot)
        return np.asarray(ids, dtype=np.uint16)

    tr = encode(train)
    va = encode([t for _, t in held])
    tr.tofile(os.path.join(a.out, "train.bin"))
    va.tofile(os.path.join(a.out, "val.bin"))
    with open(os.path.join(a.out, "heldout.txt"), "w") as f:
        f.write("\n\n".join(t for _, t in held) + "\n")
    info = {"documents": len(docs), "train_documents": len(train), "heldout_documents": len(held),
            "train_bytes": sum(len(t.encode()) for t in train),
            "heldout_bytes": sum(len(t.encode()) for _, t in held),
            "train_tokens": int(tr.size), "val_tokens": int(va.size), "vocab": a.vocab,
            "heldout_files": [p for p, _ in held]}
    with open(os.path.join(a.out, "corpus.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k != "heldout_files"}))


if __name__ == "__main__":
    main()
