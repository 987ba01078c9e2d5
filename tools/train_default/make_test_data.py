#!/usr/bin/env python3
"""make_test_data.py - write tests/data/default-model/ from a device run.

Inputs: RUN_DIR (the device run: report.json with the prompts' ids, greedy
continuations and logits files ref*.f32 computed on the device by the plain
transformers Qwen3_5ForCausalLM in float32 from the exported ternary weights)
and HF_DIR (export_hf.py's checkpoint of the same weights), used here only to
recompute the per-step top-2 margins of the greedy path on the CPU (float32),
so the test knows where a near tie would make a tiny float difference flip
the argmax.

Output (OUT, default tests/data/default-model):
  refN.f32        float32 LE logits [T, vocab] of case N (copied from the device run)
  reference.txt   one block per case, plain text for the C test:
                    case N
                    prompt <JSON string>
                    ids K a,b,c
                    logits refN.f32 T V
                    greedy 32 a,b,...
                    margins 32 m0,m1,...   (top-2 logit margin before each greedy step)
"""
import json
import os
import shutil
import sys

import numpy as np
import torch


def main():
    run, hf = sys.argv[1], sys.argv[2]
    out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "../../tests/data/default-model")
    os.makedirs(out, exist_ok=True)
    from transformers import Qwen3_5ForCausalLM
    m = Qwen3_5ForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
    rep = json.load(open(os.path.join(run, "report.json")))
    lines = ["# tern default model: reference logits and greedy paths of the training framework",
             "# (transformers Qwen3_5ForCausalLM, float32, the exported ternary weights); see README.md"]
    for i, r in enumerate(rep["references"]):
        shutil.copy(os.path.join(run, r["logits_file"]), os.path.join(out, f"ref{i}.f32"))
        T, V = r["shape"]
        cur = list(r["ids"])
        margins = []
        with torch.no_grad():
            for want in r["greedy"]:
                lg = m(input_ids=torch.tensor([cur])).logits[0, -1].double()
                top = torch.topk(lg, 2)
                margins.append(float(top.values[0] - top.values[1]))
                if int(top.indices[0]) != want:
                    print(f"case {i}: CPU greedy step {len(margins)} differs from the device "
                          f"(margin {margins[-1]:.4g}); keeping the device path")
                cur.append(want)
        lines += [f"case {i}", "prompt " + json.dumps(r["prompt"]),
                  f"ids {len(r['ids'])} " + ",".join(map(str, r["ids"])),
                  f"logits ref{i}.f32 {T} {V}",
                  f"greedy {len(r['greedy'])} " + ",".join(map(str, r["greedy"])),
                  f"margins {len(margins)} " + ",".join(f"{x:.6f}" for x in margins)]
        print(i, "min margin", min(margins))
    with open(os.path.join(out, "reference.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
