#!/usr/bin/env python3
"""hf_from_gguf.py - rebuild a Hugging Face checkpoint from a ternary GGUF (test oracle
for `tern quantize`, see tests/e2e/test_quantize.sh).

  python3 tools/hf_from_gguf.py IN.gguf OUT_DIR --tokenizer-dir DIR [--unfold]

Undoes every GGUF convention independently of tern's C code: dequantizes the
ternary tensors (W = (code-1)*d), maps llama.cpp names to transformers names,
V-head tiled -> grouped order for attn_qkv V rows, attn_gate, ssm_alpha/beta,
ssm_a, ssm_dt.bias, ssm_conv1d V channels (and ssm_out columns unless
prism.hadamard.gdn_v_grouped), qwen35 norms - 1 (not ssm_norm), A_log =
log(-ssm_a), conv1d [C,4] -> [C,1,4]. --unfold also undoes the Hadamard fold:
W = S * FWHT_1024(W') / 32 per row for every folded and inverse tensor (the
model's float weights). Writes config.json, model.safetensors (F32) and copies
tokenizer.json / tokenizer_config.json.
"""
import argparse, json, os, shutil, struct, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_lite


def fwht_rows(x, n):
    """Sylvester-order Walsh-Hadamard transform over blocks of n along the last axis (float64)."""
    shp = x.shape
    y = x.reshape(-1, n).astype(np.float64).copy()
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :].copy(), y[:, :, 1, :].copy()
        y[:, :, 0, :], y[:, :, 1, :] = a + b, a - b
        y = y.reshape(-1, n)
        h *= 2
    return y.reshape(shp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf"); ap.add_argument("out")
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--unfold", action="store_true")
    ap.add_argument("--shards", type=int, default=1, help="write N shards + model.safetensors.index.json")
    ap.add_argument("--vl-layout", action="store_true",
                    help="Qwen3.5 VL layout: model.language_model.* names, config with text_config, "
                         "plus vision and mtp tensors a converter must skip")
    ap.add_argument("--f16-matrices", action="store_true", help="store 2-D weights as F16 (exact for t*d)")
    a = ap.parse_args()
    r = gguf_lite.Reader(a.gguf)
    kv = {k: v[1] for k, v in r.kv.items()}
    arch = kv["general.architecture"]
    q35 = arch == "qwen35"
    A = lambda k: kv[arch + "." + k]
    cfg = {"architectures": ["Qwen3_5ForCausalLM" if q35 else "Qwen3ForCausalLM"],
           "attention_bias": False, "attention_dropout": 0.0,
           "bos_token_id": int(kv["tokenizer.ggml.bos_token_id"]), "eos_token_id": int(kv["tokenizer.ggml.eos_token_id"]),
           "head_dim": int(A("attention.key_length")), "hidden_act": "silu",
           "hidden_size": int(A("embedding_length")), "intermediate_size": int(A("feed_forward_length")),
           "max_position_embeddings": int(A("context_length")), "model_type": "qwen3_5_text" if q35 else "qwen3",
           "num_attention_heads": int(A("attention.head_count")), "num_hidden_layers": int(A("block_count")),
           "num_key_value_heads": int(A("attention.head_count_kv")),
           "pad_token_id": int(kv["tokenizer.ggml.padding_token_id"]),
           "rms_norm_eps": 1e-06, "tie_word_embeddings": "output.weight" not in r.by_name,
           "vocab_size": int(r.by_name["token_embd.weight"]["ne"][1])}
    nl = cfg["num_hidden_layers"]
    if q35:
        fai = int(A("full_attention_interval"))
        nk, nv, dk = int(A("ssm.group_count")), int(A("ssm.time_step_rank")), int(A("ssm.state_size"))
        dv = int(A("ssm.inner_size")) // nv
        prf = int(A("rope.dimension_count")) / cfg["head_dim"]
        cfg.update({"layer_types": ["full_attention" if (i + 1) % fai == 0 else "linear_attention" for i in range(nl)],
                    "linear_conv_kernel_dim": int(A("ssm.conv_kernel")), "linear_key_head_dim": dk,
                    "linear_num_key_heads": nk, "linear_num_value_heads": nv, "linear_value_head_dim": dv,
                    "partial_rotary_factor": prf,
                    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [int(x) for x in A("rope.dimension_sections")[:3]],
                                        "partial_rotary_factor": prf, "rope_theta": float(A("rope.freq_base")), "rope_type": "default"}})
    else:
        cfg["rope_parameters"] = {"rope_theta": float(A("rope.freq_base")), "rope_type": "default"}
    grouped_cols = bool(kv.get("prism.hadamard.gdn_v_grouped", False))
    signs = {}
    if "prism.hadamard.sign_widths" in kv:
        vals = np.array(kv["prism.hadamard.sign_values"], dtype=np.float64)
        off = 0
        for w in kv["prism.hadamard.sign_widths"]:
            signs[int(w)] = vals[off:off + int(w)]; off += int(w)
    folded = set(kv.get("prism.hadamard.weight_names", [])) | set(kv.get("prism.hadamard.inverse_weight_names", []))
    block = int(kv.get("prism.hadamard.block_size", 1024))

    def to_grouped(x, unit, axis=0):
        # tiled slot p = j*nk + k holds grouped head g = k*r + j
        rr = nv // nk
        x = np.moveaxis(x, axis, 0)
        heads = x.reshape(nv, unit, *x.shape[1:])
        out = np.empty_like(heads)
        for k in range(nk):
            for j in range(rr):
                out[k * rr + j] = heads[j * nk + k]
        return np.moveaxis(out.reshape(x.shape), 0, axis)

    top = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
           "output_norm.weight": "model.norm.weight"}
    lay = {"attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight": "post_attention_layernorm.weight",
           "ffn_norm.weight": "post_attention_layernorm.weight", "ssm_a": "linear_attn.A_log",
           "ssm_conv1d.weight": "linear_attn.conv1d.weight", "ssm_dt.bias": "linear_attn.dt_bias",
           "ssm_alpha.weight": "linear_attn.in_proj_a.weight", "ssm_beta.weight": "linear_attn.in_proj_b.weight",
           "attn_qkv.weight": "linear_attn.in_proj_qkv.weight", "attn_gate.weight": "linear_attn.in_proj_z.weight",
           "ssm_norm.weight": "linear_attn.norm.weight", "ssm_out.weight": "linear_attn.out_proj.weight",
           "ffn_down.weight": "mlp.down_proj.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
           "ffn_up.weight": "mlp.up_proj.weight", "attn_q.weight": "self_attn.q_proj.weight",
           "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
           "attn_output.weight": "self_attn.o_proj.weight", "attn_q_norm.weight": "self_attn.q_norm.weight",
           "attn_k_norm.weight": "self_attn.k_norm.weight"}
    plus1 = {"attn_norm.weight", "post_attention_norm.weight", "attn_q_norm.weight", "attn_k_norm.weight", "output_norm.weight"}
    out = {}
    for t in r.tensors:
        name = t["name"]
        w = gguf_lite.dequant(t).astype(np.float64)
        if a.unfold and name in folded:
            K = w.shape[1]
            w = signs[K] * fwht_rows(w, block) / 32.0
        if name.startswith("blk."):
            _, L, rest = name.split(".", 2)
            hf = "model.layers.%s.%s" % (L, lay[rest])
        else:
            rest = name
            hf = top[name]
        if q35:
            if rest in plus1:
                w = w - 1.0
            if rest == "attn_qkv.weight" or rest == "ssm_conv1d.weight":
                base = 2 * nk * dk
                w = np.concatenate([w[:base], to_grouped(w[base:], dv)], axis=0)
            elif rest == "attn_gate.weight":
                w = to_grouped(w, dv)
            elif rest in ("ssm_alpha.weight", "ssm_beta.weight"):
                w = to_grouped(w, 1)
            elif rest in ("ssm_a", "ssm_dt.bias"):
                w = to_grouped(w.reshape(-1), 1)
            elif rest == "ssm_out.weight" and not grouped_cols:
                w = to_grouped(w, dv, axis=1)
            if rest == "ssm_a":
                w = np.log(-w.astype(np.float64))
            if rest == "ssm_conv1d.weight":
                w = w.reshape(w.shape[0], 1, w.shape[1])
        elif rest in plus1:
            pass
        if len(t["ne"]) == 1:
            w = w.reshape(-1)
        out[hf] = np.ascontiguousarray(w.astype(np.float32))
    os.makedirs(a.out, exist_ok=True)
    if a.vl_layout:
        out = {("model.language_model." + k[6:] if k.startswith("model.") else k): v for k, v in out.items()}
        out["model.visual.patch_embed.proj.weight"] = np.zeros((4, 8), np.float32)
        out["mtp.fc.weight"] = np.zeros((8, 8), np.float32)
        text = dict(cfg)
        cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "tie_word_embeddings": text.pop("tie_word_embeddings"), "text_config": text,
               "vision_config": {"depth": 1}}
    if a.f16_matrices:
        for k in out:
            if out[k].ndim == 2:
                h = out[k].astype(np.float16)
                assert np.array_equal(h.astype(np.float32), out[k]), k + " is not F16-exact"
                out[k] = h
    names = sorted(out)
    parts = [names[i::a.shards] for i in range(a.shards)]
    weight_map = {}
    for si, part in enumerate(parts):
        fn = "model.safetensors" if a.shards == 1 else "model-%05d-of-%05d.safetensors" % (si + 1, a.shards)
        header, blobs, off = {}, [], 0
        for k in part:
            b = out[k].tobytes()
            header[k] = {"dtype": "F16" if out[k].dtype == np.float16 else "F32", "shape": list(out[k].shape),
                         "data_offsets": [off, off + len(b)]}
            blobs.append(b); off += len(b)
            weight_map[k] = fn
        header["__metadata__"] = {"format": "pt"}
        hb = json.dumps(header, separators=(",", ":")).encode()
        hb += b" " * ((8 - len(hb) % 8) % 8)
        with open(os.path.join(a.out, fn), "wb") as f:
            f.write(struct.pack("<Q", len(hb))); f.write(hb)
            for b in blobs: f.write(b)
    if a.shards > 1:
        json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(a.out, "model.safetensors.index.json"), "w"))
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=1)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer_dir, fn), os.path.join(a.out, fn))


if __name__ == "__main__":
    main()
