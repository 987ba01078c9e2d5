"""ternary.py - the ternary / Hadamard contract in numpy, shared by the device
training script (train.py) and the local HF exporter (export_hf.py).

Contract (seed 000 section 4, fixtures/qwen35-tiny/README.md):
  R = blockdiag(H_n) S / sqrt(n), n = 1024, H Sylvester (natural order), S the
  +-1 signs of the K width. A folded linear stores W' = W R^T and computes
  y = W' (R x). Ternary g128: d = max|w'| over 128 consecutive elements of a row,
  code t = round(w'/d) in {-1,0,1}, d stored as fp16. The HF checkpoint holds
  W_q = (t * fp16(d)) R (exact in float32: every entry is an integer multiple of
  fp16(d)/32 with |integer| <= 1024); `tern quantize --hadamard SIGNS` folds it
  back (W_q R^T = t * fp16(d)) and re-derives the same codes and scales.
  Embedding tables store z = R e; the HF table is e = R^T z (per row:
  S * FWHT(z) / sqrt(n)).

Compact transport format (what the device returns; safetensors):
  NAME.codes  uint8 [N, K/4]   element j of a row at byte j/4, bits 2*(j%4), value t+1
  NAME.scales float16 [N, K/128]
  other tensors stored as they are (float32; in_proj_a/b already bf16-rounded).
"""
import hashlib

import numpy as np

BLOCK = 1024
GROUP = 128
SIGN_SEED = 20261130


def sylvester(n):
    h = np.ones((1, 1), dtype=np.float64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def make_signs(widths, seed=SIGN_SEED):
    """Deterministic +-1 sign vector per K width (numpy PCG64 seeded by seed+width)."""
    out = {}
    for w in widths:
        rng = np.random.default_rng(seed + int(w))
        out[int(w)] = np.where(rng.integers(0, 2, size=int(w)) == 1, 1.0, -1.0)
    return out


def signs_json(signs):
    widths = sorted(signs)
    vals = np.concatenate([signs[w] for w in widths]).astype(np.int64).tolist()
    return {"version": 1, "block_size": BLOCK, "transform": "normalized-sylvester-walsh-hadamard",
            "axis": "input-last-dimension", "sign_mode": "explicit",
            "sign_widths": widths, "sign_values": vals}


def fwht_rows(x):
    """Unnormalized Sylvester FWHT over each BLOCK of the last axis (float64)."""
    n_rows, K = x.shape
    assert K % BLOCK == 0
    y = x.reshape(n_rows * (K // BLOCK), BLOCK).astype(np.float64)
    h = 1
    while h < BLOCK:
        y = y.reshape(-1, BLOCK // (2 * h), 2, h)
        a = y[:, :, 0, :].copy()
        b = y[:, :, 1, :].copy()
        y[:, :, 0, :] = a + b
        y[:, :, 1, :] = a - b
        h *= 2
    return y.reshape(n_rows, K)


def unfold_weight(wprime, s):
    """W = W' R: per row W = S * FWHT(W') / 32 (H symmetric)."""
    return fwht_rows(wprime) / np.sqrt(BLOCK) * s[None, :]


def fold_weight(w, s):
    """W' = W R^T: per row FWHT(S * w) / 32."""
    return fwht_rows(w * s[None, :]) / np.sqrt(BLOCK)


def ternarize(wprime):
    """codes int8 [N,K] in {-1,0,1} and fp16 scales [N,K/128] (d = max|w'|, t = round(w'/d))."""
    N, K = wprime.shape
    g = wprime.reshape(N, K // GROUP, GROUP).astype(np.float64)
    d = np.abs(g).max(axis=2)
    d = np.maximum(d, 2.0 ** -14)
    t = np.clip(np.round(g / d[:, :, None]), -1, 1).astype(np.int8)
    return t.reshape(N, K), d.astype(np.float16)


def dequant(codes, scales):
    N, K = codes.shape
    d = scales.astype(np.float64).reshape(N, K // GROUP, 1)
    return (codes.reshape(N, K // GROUP, GROUP).astype(np.float64) * d).reshape(N, K)


def pack_codes(codes):
    q = (codes.astype(np.int16) + 1).astype(np.uint8).reshape(codes.shape[0], -1, 4)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).astype(np.uint8)


def unpack_codes(packed):
    N, B = packed.shape
    out = np.empty((N, B, 4), dtype=np.int8)
    for j in range(4):
        out[:, :, j] = ((packed >> (2 * j)) & 3).astype(np.int8) - 1
    if (out > 1).any():
        raise ValueError("code 3 in a ternary tensor")
    return out.reshape(N, B * 4)


def hf_weight(codes, scales, s):
    """The HF float32 tensor of a ternary weight: W_q = dequant R (folded linear,
    row n: W'[n] blockdiag(H) S / 32 = S * FWHT(W'[n]) / 32 as H is symmetric) or
    e = R^T z = S * FWHT(z) / 32 (embedding): the same per-row formula."""
    w = fwht_rows(dequant(codes, scales)) / np.sqrt(BLOCK) * s[None, :]
    out = w.astype(np.float32)
    if not np.array_equal(out.astype(np.float64), w):
        raise ValueError("W_q not exact in float32")
    return out


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
