#!/usr/bin/env python3
"""export_hf.py - turn the device run's compact output into a Hugging Face
checkpoint (config.json, float32 model-0000N-of-0000M.safetensors +
model.safetensors.index.json, tokenizer.json, tokenizer_config.json) that
`tern quantize HF_DIR out.gguf --hadamard hadamard-signs.json` converts.

Why here and not on the device: the float32 checkpoint is ~4 bytes a weight
(hundreds of MB), over what the device returns; the compact form (2-bit codes,
fp16 scales, float tensors) reconstructs it exactly (see ternary.py), and the
reconstruction is checked against the SHA-256 prefixes the device computed on
its own reconstruction (report.json weights_sha).

Usage: python3 export_hf.py RUN_DIR HF_DIR
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ternary as T  # noqa: E402


def load_compact(run):
    from safetensors.numpy import load_file
    out = {}
    for fn in sorted(os.listdir(run)):
        if fn.startswith("ternary-") and fn.endswith(".safetensors"):
            out.update(load_file(os.path.join(run, fn)))
    if not out:
        sys.exit(f"{run}: no ternary-*.safetensors")
    return out


def signs_from_json(path):
    j = json.load(open(path))
    signs, o = {}, 0
    for w in j["sign_widths"]:
        signs[int(w)] = np.asarray(j["sign_values"][o:o + w], dtype=np.float64)
        o += w
    return signs


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    run, hf = sys.argv[1], sys.argv[2]
    os.makedirs(hf, exist_ok=True)
    compact = load_compact(run)
    signs = signs_from_json(os.path.join(run, "hadamard-signs.json"))
    sd = {}
    for k, v in compact.items():
        if k.endswith(".codes"):
            base = k[:-6]
            codes = T.unpack_codes(v)
            sd[base] = T.hf_weight(codes, compact[base + ".scales"], signs[codes.shape[1]])
        elif not k.endswith(".scales"):
            sd[k] = v.astype(np.float32)
    rep = os.path.join(run, "report.json")
    if os.path.exists(rep):
        want = json.load(open(rep))["weights_sha"]
        bad = [k for k in want if k not in sd or T.sha(sd[k]) != want[k]]
        if bad or len(want) != len(sd):
            sys.exit(f"reconstruction differs from the device's for {bad[:5]} (or tensor sets differ)")
        print(f"all {len(sd)} tensors match the device's reconstruction")
    from safetensors.numpy import save_file
    shards, cur, size = [], {}, 0
    for k in sorted(sd):
        if cur and size + sd[k].nbytes > 200 * 1024 * 1024:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = np.ascontiguousarray(sd[k])
        size += sd[k].nbytes
    shards.append(cur)
    index = {"metadata": {"total_size": int(sum(v.nbytes for v in sd.values()))}, "weight_map": {}}
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(sh, os.path.join(hf, fn), metadata={"format": "pt"})
        for k in sh:
            index["weight_map"][k] = fn
    with open(os.path.join(hf, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=1)
    cfg = json.load(open(os.path.join(run, "config.json")))
    cfg["torch_dtype"] = "float32"
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    for fn in ("tokenizer.json", "tokenizer_config.json", "hadamard-signs.json"):
        shutil.copy(os.path.join(run, fn), os.path.join(hf, fn))
    print(f"wrote {hf}: {len(sd)} tensors in {len(shards)} shards")


if __name__ == "__main__":
    main()
