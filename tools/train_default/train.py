#!/usr/bin/env python3
"""train.py - ternary quantization-aware training of tern's default model.

Runs on the device machine (torch 2.11 + transformers 5.17, one H200) or, with
--smoke, on a CPU for a few steps. Model: transformers Qwen3_5ForCausalLM
(qwen3_5_text, Gated DeltaNet + gated full attention) in which every ternary
matrix is replaced by a QAT module that trains a latent W' in the rotated
domain:

  folded linear  y = Q(W') (R x),  R x = FWHT_1024(S * x) / 32 per 1024-block
  embedding      e = R^T Q(Z)[id] = S * FWHT_1024(Q(Z)[id]) / 32
  Q              group-128 absmax ternary: d = max|w'|, t = round(w'/d), value t * fp16(d),
                 straight-through gradient (Q(w) = w + (deq - w).detach())

so the effective HF weight is W_q = dequant(Q(W R^T)) R exactly as Bonsai's
contract and `tern quantize --hadamard` expect. in_proj_a / in_proj_b stay float
(bf16-rounded at export), norms, conv1d, A_log, dt_bias float32.

Outputs (OUT, default $OUT): ternary-0000N.safetensors (compact codes + scales +
float tensors, see ternary.py), config.json, hadamard-signs.json, tokenizer
files, train-log.json (curve, timings), reference.json + refN.f32 (float32
logits of the exported ternary weights on a few prompts, greedy continuations),
report.json (held-out perplexity, samples).

--float trains the full-precision twin for comparison: the same architecture,
tokenizer, data order, optimizer, schedule and wall-clock budget, but plain
nn.Linear / nn.Embedding weights (no rotation, no quantization). Nothing is
exported; OUT gets float-report.json (curve, final validation loss, held-out
perplexity by the same chunked_ppl in float32 with TF32 off, greedy samples).

Usage (device): python3 train.py --data DIR --out $OUT --minutes 7 [--float]
       (CPU smoke): python3 train.py --data DIR --out /tmp/x --smoke [--float]
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ternary as T  # noqa: E402

PROMPTS = [
    "The Linux kernel provides",
    "To build the module, run",
    "In Python, a list is",
    "<|im_start|>user\nWhat is a file system?<|im_end|>\n<|im_start|>assistant\n",
]


def make_config(vocab, n_layers, smoke):
    from transformers import Qwen3_5TextConfig
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n_layers)]
    eot = vocab - 5
    return Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=1024, intermediate_size=2048, num_hidden_layers=n_layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=256,
        linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, layer_types=layer_types, hidden_act="silu", rms_norm_eps=1e-6,
        max_position_embeddings=4096, tie_word_embeddings=False, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        partial_rotary_factor=0.25, bos_token_id=eot, eos_token_id=eot + 2, pad_token_id=eot,
        initializer_range=0.02, use_cache=True)


# ------------------------------------------------------------------ QAT modules

def ste_ternary(w):
    """Group-128 absmax ternary along the last axis with fp16 scales, STE gradient."""
    shp = w.shape
    g = w.float().reshape(*shp[:-1], shp[-1] // T.GROUP, T.GROUP)
    d = g.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -14)
    t = torch.round(g / d).clamp_(-1, 1)
    q = (t * d.half().float()).reshape(shp)
    return w + (q - w).detach()


class Rot(nn.Module):
    """x -> R x = FWHT(S * x) / 32 per 1024-block (and the inverse for embeddings)."""

    def __init__(self, signs, H):
        super().__init__()
        self.register_buffer("s", torch.tensor(signs, dtype=torch.float32), persistent=False)
        self.H = H  # shared [1024, 1024] buffer holder (not a submodule)

    def fwd(self, x):
        shp = x.shape
        y = (x * self.s.to(x.dtype)).reshape(*shp[:-1], shp[-1] // T.BLOCK, T.BLOCK)
        y = torch.matmul(y, self.H.h.to(y.dtype)) / 32.0
        return y.reshape(shp)

    def inv(self, z):
        shp = z.shape
        y = torch.matmul(z.reshape(*shp[:-1], shp[-1] // T.BLOCK, T.BLOCK), self.H.h.to(z.dtype)) / 32.0
        return y.reshape(shp) * self.s.to(y.dtype)


class HHolder:
    def __init__(self, device):
        self.h = torch.tensor(T.sylvester(T.BLOCK), dtype=torch.float32, device=device)


class TernaryLinear(nn.Module):
    def __init__(self, in_f, out_f, rot, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_f, in_f) * std)  # latent W' (rotated domain)
        self.rot = rot

    def forward(self, x):
        return F.linear(self.rot.fwd(x), ste_ternary(self.weight).to(x.dtype))


class TernaryEmbedding(nn.Module):
    def __init__(self, n, dim, rot, std):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, dim) * std)  # latent Z (rotated table)
        self.rot = rot

    def forward(self, ids):
        z = ste_ternary(F.embedding(ids, self.weight))
        return self.rot.inv(z)


TERNARY_SUFFIXES = ["linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.out_proj",
                    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def ternarize_model(model, signs, device, std=0.02):
    H = HHolder(device)
    rots = {w: Rot(s, H).to(device) for w, s in signs.items()}
    names = []
    for name, mod in list(model.named_modules()):
        if any(name.endswith(suf) for suf in TERNARY_SUFFIXES) or name == "lm_head":
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            child = name.rsplit(".", 1)[-1]
            new = TernaryLinear(mod.in_features, mod.out_features, rots[mod.in_features], std).to(device)
            setattr(parent, child, new)
            names.append(name + ".weight")
    emb = model.model.embed_tokens
    model.model.embed_tokens = TernaryEmbedding(emb.num_embeddings, emb.embedding_dim,
                                                rots[emb.embedding_dim], std).to(device)
    names.append("model.embed_tokens.weight")
    return names


# ------------------------------------------------------------------ export

def compact_state(model, ternary_names):
    """Compact transport tensors (numpy): codes/scales for ternary, float32 otherwise."""
    out = {}
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    for k, v in sd.items():
        if k in ternary_names:
            codes, scales = T.ternarize(v.astype(np.float64))
            out[k + ".codes"] = T.pack_codes(codes)
            out[k + ".scales"] = scales
        elif k.endswith("in_proj_a.weight") or k.endswith("in_proj_b.weight"):
            out[k] = torch.tensor(v).to(torch.bfloat16).float().numpy()
        else:
            out[k] = v.astype(np.float32)
    return out


def hf_state(compact, signs):
    """HF float32 state dict (numpy) from the compact tensors."""
    sd = {}
    for k, v in compact.items():
        if k.endswith(".codes"):
            base = k[:-6]
            codes = T.unpack_codes(v)
            sd[base] = T.hf_weight(codes, compact[base + ".scales"], signs[codes.shape[1]])
        elif k.endswith(".scales"):
            continue
        else:
            sd[k] = v
    return sd


def save_sharded(tensors, out_dir, prefix, limit=15 * 1024 * 1024):
    from safetensors.numpy import save_file
    shards, cur, size = [], {}, 0
    for k in sorted(tensors):
        nb = tensors[k].nbytes
        if cur and size + nb > limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = np.ascontiguousarray(tensors[k])
        size += nb
    if cur:
        shards.append(cur)
    files = []
    for i, sh in enumerate(shards):
        fn = f"{prefix}-{i + 1:05d}.safetensors"
        save_file(sh, os.path.join(out_dir, fn))
        files.append(fn)
    return files


def build_reference(config, hf_sd, device):
    """Plain transformers model (nn.Linear / nn.Embedding) holding the exported
    ternary weights in float32: the training framework's model of the GGUF."""
    from transformers import Qwen3_5ForCausalLM
    config._attn_implementation = "eager"
    m = Qwen3_5ForCausalLM(config).float()
    missing, unexpected = m.load_state_dict({k: torch.from_numpy(v) for k, v in hf_sd.items()}, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"state mismatch: missing {missing} unexpected {unexpected}")
    return m.to(device).eval()


@torch.no_grad()
def chunked_ppl(model, ids, ctx, device, batch=16):
    """Perplexity as `tern perplexity --ctx ctx` computes it: consecutive chunks of
    ctx tokens, each from an empty state, every position after the first scored."""
    n = (len(ids) // ctx) * ctx
    chunks = torch.tensor(ids[:n], dtype=torch.long).view(-1, ctx)
    nll, cnt = 0.0, 0
    for i in range(0, chunks.shape[0], batch):
        x = chunks[i:i + batch].to(device)
        logits = model(input_ids=x).logits.float()
        lp = F.log_softmax(logits[:, :-1], dim=-1)
        nll -= lp.gather(-1, x[:, 1:, None]).sum().item()
        cnt += x[:, 1:].numel()
    return math.exp(nll / cnt), cnt


# ------------------------------------------------------------------ training

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--minutes", type=float, default=7.0)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--ppl-ctx", type=int, default=512)
    ap.add_argument("--float", action="store_true", help="train the float twin (no QAT, no export)")
    a = ap.parse_args()
    float_mode = a.float
    del a.float  # keeps the QAT run's train-log.json config as it was
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() and not a.smoke else "cpu"
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    if a.smoke:
        a.seq, a.batch, a.warmup = 64, 2, 2

    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(a.data, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    config = make_config(vocab, a.layers, a.smoke)
    config._attn_implementation = "sdpa"
    from transformers import Qwen3_5ForCausalLM
    model = Qwen3_5ForCausalLM(config)
    widths = sorted({1024, config.intermediate_size,
                     config.linear_num_value_heads * config.linear_value_head_dim,
                     config.num_attention_heads * config.head_dim})
    signs = T.make_signs(widths)
    model.to(device)
    if float_mode:
        tern_names = []
        n_params = sum(p.numel() for p in model.parameters())
        n_tern = 0
        print(f"params {n_params/1e6:.2f}M, all float (no quantization)", flush=True)
    else:
        tern_names = ternarize_model(model, signs, device)
        n_params = sum(p.numel() for p in model.parameters())
        n_tern = sum(model.get_parameter(n).numel() for n in tern_names)
        print(f"params {n_params/1e6:.2f}M, ternary {n_tern/1e6:.2f}M -> PQ2_0 {n_tern*34/128/1e6:.2f} MB",
              flush=True)

    train = np.fromfile(os.path.join(a.data, "train.bin"), dtype=np.uint16)
    val = np.fromfile(os.path.join(a.data, "val.bin"), dtype=np.uint16)
    train_t = torch.from_numpy(train.astype(np.int64)).to(device)
    val_t = torch.from_numpy(val.astype(np.int64)).to(device)

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and "conv1d" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=(device == "cuda"))
    amp = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast(
        device_type="cpu", dtype=torch.bfloat16, enabled=False)

    def loss_on(x, y):
        with amp:
            h = model.model(input_ids=x).last_hidden_state
            logits = model.lm_head(h)
        return F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))

    @torch.no_grad()
    def val_loss(max_batches=8):
        model.eval()
        n = (val_t.numel() - 1) // a.seq
        tot, cnt = 0.0, 0
        for i in range(0, min(n, max_batches * a.batch), a.batch):
            idx = torch.arange(i, min(i + a.batch, n), device=device) * a.seq
            x = val_t[idx[:, None] + torch.arange(a.seq, device=device)]
            y = val_t[idx[:, None] + torch.arange(1, a.seq + 1, device=device)]
            tot += loss_on(x, y).item() * x.shape[0]
            cnt += x.shape[0]
        model.train()
        return tot / max(cnt, 1)

    budget = 60.0 * a.minutes
    log = {"curve": [], "config": vars(a), "params": n_params, "ternary_params": n_tern}
    step, tokens, t0 = 0, 0, time.time()
    last_eval = t0
    g = torch.Generator(device=device)
    g.manual_seed(42)
    max_steps = 3 if a.smoke else 10 ** 9
    model.train()
    while step < max_steps:
        el = time.time() - t0
        frac = el / budget
        if frac >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        off = torch.randint(0, train_t.numel() - a.seq - 1, (a.batch,), device=device, generator=g)
        ar = torch.arange(a.seq, device=device)
        x = train_t[off[:, None] + ar]
        y = train_t[off[:, None] + ar + 1]
        loss = loss_on(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        if step % 25 == 0 or step <= 3:
            lv = loss.item()
            rec = {"step": step, "t": round(time.time() - t0, 1), "tokens": tokens, "lr": lr, "loss": round(lv, 4),
                   "gnorm": round(float(gn), 3)}
            if time.time() - last_eval > 60 or a.smoke:
                rec["val_loss"] = round(val_loss(2), 4)
                last_eval = time.time()
            log["curve"].append(rec)
            print(json.dumps(rec), flush=True)
    train_s = time.time() - t0
    log["train_seconds"] = round(train_s, 1)
    log["steps"] = step
    log["tokens"] = tokens
    log["tokens_per_s"] = round(tokens / train_s)
    if float_mode:
        log["float"] = True
        log["final_val_loss"] = round(val_loss(1 if a.smoke else 10 ** 6), 4)
        print("final val loss (float model, bf16 autocast):", log["final_val_loss"], flush=True)
        del opt
        float_report(a, config, model, tok, val_t, device, log, t_start)
        return
    log["final_val_loss_qat"] = round(val_loss(1 if a.smoke else 10 ** 6), 4)
    print("final val loss (QAT model, bf16 autocast):", log["final_val_loss_qat"], flush=True)

    # ---------------- export: compact tensors + config + signs + tokenizer
    model.eval()
    compact = compact_state(model, set(tern_names))
    files = save_sharded(compact, a.out, "ternary")
    log["compact_files"] = files
    cfg = config.to_dict()
    cfg["architectures"] = ["Qwen3_5ForCausalLM"]
    for k in ("_attn_implementation_autoset", "_attn_implementation", "id2label", "label2id"):
        cfg.pop(k, None)
    cfg["model_type"] = "qwen3_5_text"
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1, default=str)
    with open(os.path.join(a.out, "hadamard-signs.json"), "w") as f:
        json.dump(T.signs_json(signs), f)
    with open(os.path.join(a.out, "ternary-names.json"), "w") as f:
        json.dump(sorted(tern_names), f, indent=0)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.data, fn), os.path.join(a.out, fn))
    with open(os.path.join(a.out, "train-log.json"), "w") as f:
        json.dump(log, f, indent=1)

    # ---------------- reference: the exported ternary weights in plain transformers, float32
    del opt
    rep = {}
    try:
        reference(a, config, compact, signs, model, tok, val_t, device, rep)
    except Exception:  # keep what was trained; the traceback goes into report.json
        import traceback
        rep["error"] = traceback.format_exc()
        print(rep["error"], flush=True)
    rep["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    import tarfile
    small = [fn for fn in sorted(os.listdir(a.out)) if not fn.startswith("ternary-0") and fn != "log.txt"
             and fn != "meta.tar"]
    with tarfile.open(os.path.join(a.out, "meta.tar"), "w") as tf:
        for fn in small:
            tf.add(os.path.join(a.out, fn), arcname=fn)
    for fn in small:
        os.remove(os.path.join(a.out, fn))
    print("done in", rep["total_seconds"], "s; files:", sorted(os.listdir(a.out)), flush=True)


def float_report(a, config, model, tok, val_t, device, log, t_start):
    """--float: held-out perplexity and validation loss of the trained float
    weights in plain transformers (eager attention), float32, TF32 off."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model.eval()
    rep = dict(log)
    try:
        ref = build_reference(config, {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()},
                              device)
        with torch.no_grad():
            xs = val_t[: min(256, a.seq)][None]
            d = (ref(input_ids=xs).logits.float() - model(input_ids=xs).logits.float()).abs().max().item()
        rep["train_vs_reference_max_abs_logit_diff_fp32"] = d
        del model
        # the same validation windows as final_val_loss, scored in float32
        n = (val_t.numel() - 1) // a.seq
        if a.smoke:
            n = min(n, a.batch)
        nll, cnt = 0.0, 0
        with torch.no_grad():
            for i in range(0, n, a.batch):
                idx = torch.arange(i, min(i + a.batch, n), device=device) * a.seq
                x = val_t[idx[:, None] + torch.arange(a.seq, device=device)]
                y = val_t[idx[:, None] + torch.arange(1, a.seq + 1, device=device)]
                lg = ref(input_ids=x).logits.float()
                nll += F.cross_entropy(lg.view(-1, lg.shape[-1]), y.reshape(-1), reduction="sum").item()
                cnt += y.numel()
        rep["final_val_loss_fp32"] = round(nll / cnt, 4)
        print("final val loss (float model, fp32):", rep["final_val_loss_fp32"], flush=True)
        held = open(os.path.join(a.data, "heldout.txt"), encoding="utf-8").read()
        held_ids = tok.encode(held).ids
        if a.smoke:
            held_ids = held_ids[: 4 * 64]
        ctx = 64 if a.smoke else a.ppl_ctx
        ppl, cnt = chunked_ppl(ref, held_ids, ctx, device)
        rep["heldout"] = {"file": "heldout.txt", "tokens": len(held_ids), "ctx": ctx, "scored": cnt, "ppl_fp32": ppl,
                          "nll": math.log(ppl)}
        print(f"held-out perplexity (float model, fp32, ctx {ctx}): {ppl:.4f} over {cnt} tokens", flush=True)
        greedy = []
        with torch.no_grad():
            for p in PROMPTS:
                cur = tok.encode(p).ids
                n0 = len(cur)
                for _ in range(3 if a.smoke else 32):
                    cur.append(int(ref(input_ids=torch.tensor([cur], device=device)).logits[0, -1].argmax()))
                greedy.append({"prompt": p, "greedy_text": tok.decode(cur[n0:], skip_special_tokens=False)})
                print(json.dumps(greedy[-1]), flush=True)
        rep["greedy"] = greedy
    except Exception:  # keep the training log; the traceback goes into the report
        import traceback
        rep["error"] = traceback.format_exc()
        print(rep["error"], flush=True)
    rep["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    rep["versions"] = {"torch": torch.__version__, "transformers": __import__("transformers").__version__}
    rep["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(a.out, "float-report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    print("done in", rep["total_seconds"], "s; files:", sorted(os.listdir(a.out)), flush=True)


def reference(a, config, compact, signs, model, tok, val_t, device, rep):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf_sd = hf_state(compact, signs)
    rep["weights_sha"] = {k: T.sha(v) for k, v in sorted(hf_sd.items())}
    ref = build_reference(config, hf_sd, device)
    # the QAT forward and the reference must agree (same ternary weights)
    with torch.no_grad():
        xs = val_t[: min(256, a.seq)][None]
        d = (ref(input_ids=xs).logits.float() - model(input_ids=xs).logits.float()).abs().max().item()
    rep["qat_vs_reference_max_abs_logit_diff_fp32"] = d
    print("QAT vs reference max |dlogit|:", d, flush=True)
    held = open(os.path.join(a.data, "heldout.txt"), encoding="utf-8").read()
    held_ids = tok.encode(held).ids
    if a.smoke:
        held_ids = held_ids[: 4 * 64]
    ctx = 64 if a.smoke else a.ppl_ctx
    ppl, cnt = chunked_ppl(ref, held_ids, ctx, device)
    rep["heldout"] = {"file": "heldout.txt", "tokens": len(held_ids), "ctx": ctx, "scored": cnt, "ppl_fp32": ppl}
    print(f"held-out perplexity (fp32 reference, ctx {ctx}): {ppl:.3f} over {cnt} tokens", flush=True)
    refs = []
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            ids = tok.encode(p).ids
            x = torch.tensor([ids], device=device)
            logits = ref(input_ids=x).logits[0].float().cpu().numpy()
            logits.astype("<f4").tofile(os.path.join(a.out, f"ref{i}.f32"))
            cur = list(ids)
            margins = []
            for _ in range(3 if a.smoke else 32):  # greedy, uncached full forwards
                lg = ref(input_ids=torch.tensor([cur], device=device)).logits[0, -1].double()
                top = torch.topk(lg, 2)
                margins.append(float(top.values[0] - top.values[1]))
                cur.append(int(top.indices[0]))
            top2 = np.sort(logits, axis=1)[:, -2:]
            refs.append({"prompt": p, "ids": ids, "logits_file": f"ref{i}.f32", "shape": list(logits.shape),
                         "argmax": logits.argmax(1).tolist(), "min_top2_margin": float((top2[:, 1] - top2[:, 0]).min()),
                         "greedy": cur[len(ids):], "greedy_min_margin": min(margins),
                         "greedy_text": tok.decode(cur[len(ids):], skip_special_tokens=False)})
            print(json.dumps({"prompt": p, "greedy_text": refs[-1]["greedy_text"]}), flush=True)
        samples = []
        gen = torch.Generator(device=device)
        gen.manual_seed(7)
        for p in PROMPTS[:3]:
            cur = tok.encode(p).ids
            for _ in range(3 if a.smoke else 48):
                lg = ref(input_ids=torch.tensor([cur], device=device)).logits[0, -1].float() / 0.8
                cur.append(int(torch.multinomial(F.softmax(lg, -1), 1, generator=gen)))
            samples.append(tok.decode(cur))
    rep["references"] = refs
    rep["samples_t0.8"] = samples


if __name__ == "__main__":
    main()
