#!/usr/bin/env python3
"""check_gguf.py - does the GGUF that `tern quantize` made hold exactly the
ternary codes and fp16 scales that training produced?

Reads the device run's compact tensors (ternary-*.safetensors: 2-bit codes and
fp16 scales in HF names, HF grouped V-head order) and the PQ2_0 GGUF (with
tools/gguf_lite.py), maps names HF -> GGUF, undoes the GGUF's tiled V-head row
order (attn_qkv V rows, attn_gate rows; ssm_out keeps grouped columns with
Hadamard) and compares codes and scales bit for bit. Also checks the sign
vectors in the GGUF equal hadamard-signs.json and the float tensors' values.

Usage: python3 check_gguf.py RUN_DIR MODEL.gguf     (exit 0 = identical)
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import ternary as T  # noqa: E402
import gguf_lite  # noqa: E402

LIN = {"linear_attn.in_proj_qkv": "attn_qkv", "linear_attn.in_proj_z": "attn_gate",
       "linear_attn.out_proj": "ssm_out", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
       "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
       "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    i = int(parts[2])
    return f"blk.{i}.{LIN['.'.join(parts[3:5])]}.weight"


def grouped_to_tiled(rows, n_k, n_v, hd):
    """rows [n_v*hd, ...] in grouped V order -> tiled order (slot p = j*n_k + k for g = k*r + j)."""
    r = n_v // n_k
    out = np.empty_like(rows)
    for k in range(n_k):
        for j in range(r):
            g, p = k * r + j, j * n_k + k
            out[p * hd:(p + 1) * hd] = rows[g * hd:(g + 1) * hd]
    return out


def main():
    run, path = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(run, "config.json")))
    n_k, n_v = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    hd = cfg["linear_value_head_dim"]
    key_dim = n_k * cfg["linear_key_head_dim"]
    from safetensors.numpy import load_file
    compact = {}
    for fn in sorted(os.listdir(run)):
        if fn.startswith("ternary-") and fn.endswith(".safetensors"):
            compact.update(load_file(os.path.join(run, fn)))
    g = gguf_lite.Reader(path)
    bad, n = [], 0
    for k in sorted(compact):
        if not k.endswith(".codes"):
            continue
        base = k[:-6]
        codes = T.unpack_codes(compact[k]) + 1
        scales = compact[base + ".scales"]
        gn = gguf_name(base)
        t = g.by_name.get(gn)
        if t is None or t["type"] != 142:
            bad.append(f"{gn}: missing or not PQ2_0")
            continue
        gc, gs = gguf_lite.decode_ternary(t)
        if gn.endswith("attn_qkv.weight"):
            codes = np.concatenate([codes[:2 * key_dim], grouped_to_tiled(codes[2 * key_dim:], n_k, n_v, hd)])
            scales = np.concatenate([scales[:2 * key_dim], grouped_to_tiled(scales[2 * key_dim:], n_k, n_v, hd)])
        elif gn.endswith("attn_gate.weight"):
            codes = grouped_to_tiled(codes, n_k, n_v, hd)
            scales = grouped_to_tiled(scales, n_k, n_v, hd)
        if gc.shape != codes.shape or not np.array_equal(gc, codes):
            bad.append(f"{gn}: codes differ ({(gc != codes).sum() if gc.shape == codes.shape else 'shape'})")
        if gs.shape != scales.shape or not np.array_equal(gs.view(np.uint16), scales.view(np.uint16)):
            bad.append(f"{gn}: scales differ")
        n += 1
    sj = json.load(open(os.path.join(run, "hadamard-signs.json")))
    kv = g.kv
    if [int(x) for x in kv["prism.hadamard.sign_widths"][1]] != sj["sign_widths"] or \
            [int(x) for x in kv["prism.hadamard.sign_values"][1]] != sj["sign_values"]:
        bad.append("prism.hadamard signs differ from hadamard-signs.json")
    if bad:
        print("\n".join(bad))
        sys.exit(1)
    print(f"{n} ternary tensors: codes and fp16 scales identical to training; signs identical")


if __name__ == "__main__":
    main()
