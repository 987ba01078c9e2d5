"""tern: libtern from Python.

Kernels: ``TernaryLinear`` (y = x W^T + b with ternary W, one fp16 scale per group
of 64 or 128 inputs), built from trits, MLX affine 2-bit words, packed codes or a
GGUF tensor. Models: ``Model`` (Bonsai-family qwen35 / qwen3 GGUF files and MLX
packs) with tokenize, detokenize, eval, generate and chat. See docs/python.md.
"""
import os
import threading

import numpy as np

from . import _tern
from ._tern import ContextFullError, Error

try:
    from ._build_info import SOURCE_DIR as _SOURCE_DIR
except ImportError:  # pragma: no cover - an in-place build without build_py
    _SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

__version__ = _tern.version()
__all__ = ["TernaryLinear", "Model", "Error", "ContextFullError", "set_threads", "get_threads",
           "kernel_isa", "read_ceiling_gbps", "default_model_path", "__version__"]


def set_threads(n):
    """Kernel threads for TernaryLinear calls (0 = all online cores; default 1)."""
    _tern.set_threads(int(n))


def get_threads():
    return _tern.get_threads()


def kernel_isa():
    """The instruction set the kernels use ("scalar", "avx2", "avx512", "neon")."""
    return _tern.kernel_isa()


def read_ceiling_gbps(device="cpu", nbytes=1 << 30, passes=3):
    """Memory read bandwidth in GB/s measured now (cpu: with the set_threads threads)."""
    return _tern.read_ceiling_gbps(device, int(nbytes), int(passes))


def _f32(a, name, shape=None):
    a = np.asarray(a)
    if a.dtype.kind not in "fiu":
        raise ValueError("tern: %s must be a real numeric array, got dtype %s" % (name, a.dtype))
    a = np.ascontiguousarray(a, dtype=np.float32)
    if shape is not None and a.shape != tuple(shape):
        raise ValueError("tern: %s has shape %s, expected %s" % (name, a.shape, tuple(shape)))
    return a


def _bias(bias, n):
    return None if bias is None else _f32(bias, "bias", (n,))


class TernaryLinear:
    """A ternary linear layer, y = x W^T + b (W [out_features, in_features])."""

    __slots__ = ("_h", "out_features", "in_features", "group_size", "bias")

    def __init__(self):
        raise TypeError("use TernaryLinear.from_trits, from_mlx_2bit, from_packed or from_gguf")

    @classmethod
    def _wrap(cls, h, group, bias):
        self = object.__new__(cls)
        self._h = h
        self.out_features, self.in_features = _tern.linear_shape(h)
        self.group_size = group
        self.bias = bias
        return self

    @staticmethod
    def _check_group(g):
        if g not in (64, 128):
            raise ValueError("tern: group_size %r (must be 64 or 128)" % (g,))

    @classmethod
    def from_trits(cls, trits, scales, group_size=64, bias=None):
        """trits int [N, K] in {-1, 0, 1}; scales float [N, K/group_size]; bias [N] or None."""
        cls._check_group(group_size)
        t = np.asarray(trits)
        if t.ndim != 2:
            raise ValueError("tern: trits must be 2-D [out, in], got shape %s" % (t.shape,))
        if t.dtype.kind not in "iub":
            raise ValueError("tern: trits must be integers in {-1, 0, 1}, got dtype %s" % t.dtype)
        n, k = t.shape
        if k % group_size:
            raise ValueError("tern: in_features %d is not a multiple of group_size %d" % (k, group_size))
        if t.size and (t.min() < -1 or t.max() > 1):
            bad = np.argwhere((t < -1) | (t > 1))[0]
            raise ValueError("tern: trit [%d, %d] = %d (must be -1, 0 or 1)" % (bad[0], bad[1], t[tuple(bad)]))
        t8 = np.ascontiguousarray(t, dtype=np.int8)
        s = _f32(scales, "scales", (n, k // group_size))
        b = _bias(bias, n)
        return cls._wrap(_tern.linear_from_trits(t8, s, b, n, k, group_size), group_size, b)

    @classmethod
    def from_mlx_2bit(cls, weight, scales, biases, group_size=64, bias=None):
        """MLX affine 2-bit (mx.quantize bits=2): weight uint32 [N, K/16]; scales and biases
        [N, K/group_size] (float16, or float32 exactly representable in float16). Refused
        unless biases == -scales exactly and every code is 0, 1 or 2."""
        cls._check_group(group_size)
        w = np.asarray(weight)
        if w.ndim != 2 or w.dtype != np.uint32:
            raise ValueError("tern: weight must be a 2-D uint32 array [out, in/16], got %s %s" % (w.dtype, w.shape))
        n, k = w.shape[0], w.shape[1] * 16
        if k % group_size:
            raise ValueError("tern: in_features %d is not a multiple of group_size %d" % (k, group_size))

        def h16(a, name):
            a = np.asarray(a)
            if a.shape != (n, k // group_size):
                raise ValueError("tern: %s has shape %s, expected %s" % (name, a.shape, (n, k // group_size)))
            if a.dtype == np.float16:
                return np.ascontiguousarray(a)
            if a.dtype.kind != "f":
                raise ValueError("tern: %s must be float16 (or float32), got %s" % (name, a.dtype))
            h = a.astype(np.float16)
            if not np.array_equal(h.astype(a.dtype), a, equal_nan=True):
                raise ValueError("tern: %s is not exactly representable in float16" % name)
            return np.ascontiguousarray(h)

        s, bi = h16(scales, "scales"), h16(biases, "biases")
        b = _bias(bias, n)
        h = _tern.linear_from_mlx_2bit(np.ascontiguousarray(w), s.view(np.uint16), bi.view(np.uint16), b, n, k,
                                       group_size)
        return cls._wrap(h, group_size, b)

    @classmethod
    def from_packed(cls, weight, scales, bias=None):
        """weight uint8 [N, K/4] (four codes per byte, low bits first, code = trit + 1;
        code 3 refused); scales float [N, K/64] or [N, K/128] (the group follows)."""
        w = np.asarray(weight)
        if w.ndim != 2 or w.dtype != np.uint8:
            raise ValueError("tern: weight must be a 2-D uint8 array [out, in/4], got %s %s" % (w.dtype, w.shape))
        s = np.asarray(scales)
        n, k = w.shape[0], w.shape[1] * 4
        if s.ndim != 2 or s.shape[0] != n or s.shape[1] == 0 or k % s.shape[1] or k // s.shape[1] not in (64, 128):
            raise ValueError("tern: scales has shape %s; for weight %s it must be [%d, %d] (group 64) or "
                             "[%d, %d] (group 128)" % (s.shape, w.shape, n, k // 64, n, k // 128))
        g = k // s.shape[1]
        s16 = _f32(s, "scales").astype(np.float16)
        if not np.isfinite(s16).all():
            raise ValueError("tern: a scale is not finite in float16")
        # the byte layout is the little-endian byte sequence of MLX's uint32 words
        words = np.ascontiguousarray(w).view("<u4")
        h = _tern.linear_from_mlx_2bit(words, s16.view(np.uint16), (-s16).view(np.uint16), _bias(bias, n), n, k, g)
        return cls._wrap(h, g, _bias(bias, n))

    @classmethod
    def from_gguf(cls, path, tensor_name, bias=None):
        """A ternary tensor of a GGUF file (PQ2_0, PTQ1_0, Q2_0, Q2_0 g64, Q1_0), as stored."""
        h0 = _tern.linear_from_gguf(os.fspath(path), tensor_name, None)
        n, k = _tern.linear_shape(h0)
        b = _bias(bias, n)
        h = h0 if b is None else _tern.linear_from_gguf(os.fspath(path), tensor_name, b)
        return cls._wrap(h, None, b)

    @property
    def shape(self):
        return (self.out_features, self.in_features)

    def __repr__(self):
        return "TernaryLinear(out_features=%d, in_features=%d, group_size=%s, bias=%s)" % (
            self.out_features, self.in_features, self.group_size, self.bias is not None)

    def dequantize(self):
        """W as float32 [out, in]."""
        out = np.empty((self.out_features, self.in_features), np.float32)
        _tern.linear_dequantize(self._h, out)
        return out

    def __call__(self, x):
        x = np.asarray(x)
        if x.ndim < 1:
            raise ValueError("tern: input must have at least one dimension")
        if x.shape[-1] != self.in_features:
            raise ValueError("tern: input has %d features, the layer takes %d" % (x.shape[-1], self.in_features))
        if x.dtype == np.float16:
            out_dtype = np.float16
        elif x.dtype == np.float32:
            out_dtype = np.float32
        else:
            raise ValueError("tern: input dtype %s (float32 or float16)" % x.dtype)
        lead = x.shape[:-1]
        xf = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, self.in_features)
        y = np.empty((xf.shape[0], self.out_features), np.float32)
        if xf.shape[0]:
            _tern.linear_forward(self._h, xf, y, xf.shape[0])
        y = y.reshape(lead + (self.out_features,))
        return y.astype(np.float16) if out_dtype is np.float16 else y


def default_model_path():
    """The model used when Model() gets no path, found as the CLI finds it: $TERN_MODEL,
    then models/tern-default.gguf of the source tree this package was built from, then
    the qwen35 fixture beside it. None when none exists."""
    env = os.environ.get("TERN_MODEL")
    if env:
        return env
    for rel in ("models/tern-default.gguf", "../shared/fixtures/qwen35-tiny/model-pq2_0.gguf"):
        p = os.path.join(_SOURCE_DIR, rel)
        if os.path.isfile(p):
            return p
    return None


from ._model import Model  # noqa: E402
