"""TernaryLinear against float64 numpy on fresh random data of awkward sizes."""
import os
import sys

import numpy as np
import pytest

import tern
from conftest import REPO, need_fixture

RNG = np.random.default_rng()  # fresh data every run; the seed is printed on failure
BOUND = 1e-3


def ref_w(trits, scales, g):
    s = np.asarray(scales, np.float32).astype(np.float16).astype(np.float64)  # tern stores fp16 scales
    return trits.astype(np.float64) * np.repeat(s, g, axis=1)


def rel_err(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def rand_layer(n, k, g, bias=True):
    t = RNG.integers(-1, 2, size=(n, k), dtype=np.int8)
    s = RNG.uniform(0.001, 0.2, size=(n, k // g)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32) if bias else None
    return t, s, b


@pytest.mark.parametrize("n,k,g", [(1, 64, 64), (7, 192, 64), (33, 640, 64), (17, 384, 128), (130, 1280, 128),
                                   (257, 2560, 64)])
@pytest.mark.parametrize("batch", [1, 3, 31, 33, 130])
def test_from_trits_matches_float64(n, k, g, batch):
    t, s, b = rand_layer(n, k, g)
    layer = tern.TernaryLinear.from_trits(t, s, group_size=g, bias=b)
    assert layer.shape == (n, k)
    x = RNG.standard_normal((batch, k)).astype(np.float32)
    ref = x.astype(np.float64) @ ref_w(t, s, g).T + b
    y = layer(x)
    assert y.dtype == np.float32 and y.shape == (batch, n)
    assert rel_err(y, ref) < BOUND
    np.testing.assert_array_equal(layer.dequantize(), ref_w(t, s, g).astype(np.float32))


def test_leading_dims_fp16_noncontiguous_empty():
    n, k, g = 45, 256, 64
    t, s, b = rand_layer(n, k, g)
    layer = tern.TernaryLinear.from_trits(t, s, g, b)
    w = ref_w(t, s, g)
    x = RNG.standard_normal((2, 5, 3, k)).astype(np.float32)
    y = layer(x)
    assert y.shape == (2, 5, 3, n)
    assert rel_err(y, x.astype(np.float64) @ w.T + b) < BOUND
    # non-contiguous: a transposed view and a strided slice
    xt = RNG.standard_normal((k, 6)).astype(np.float32).T
    assert not xt.flags.c_contiguous
    assert rel_err(layer(xt), xt.astype(np.float64) @ w.T + b) < BOUND
    xs = RNG.standard_normal((8, 2 * k)).astype(np.float32)[::2, ::2]
    assert rel_err(layer(xs), xs.astype(np.float64) @ w.T + b) < BOUND
    # float16 in, float16 out
    xh = x.astype(np.float16)
    yh = layer(xh)
    assert yh.dtype == np.float16 and yh.shape == (2, 5, 3, n)
    ref = xh.astype(np.float64) @ w.T + b
    assert rel_err(yh, ref) < 2e-3  # the float16 rounding of the output (2^-11 relative)
    # 1-D input and empty batches
    assert layer(x[0, 0, 0]).shape == (n,)
    for shape in [(0, k), (3, 0, k)]:
        e = layer(np.zeros(shape, np.float32))
        assert e.shape == shape[:-1] + (n,) and e.dtype == np.float32


def test_forward_errors_are_valueerror():
    t, s, _ = rand_layer(8, 64, 64)
    layer = tern.TernaryLinear.from_trits(t, s)
    with pytest.raises(ValueError, match="features"):
        layer(np.zeros((2, 63), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        layer(np.zeros((2, 64), np.float64))
    with pytest.raises(ValueError):
        layer(np.float32(1.0))


def test_from_trits_refusals():
    t, s, _ = rand_layer(4, 128, 64)
    with pytest.raises(ValueError, match="group_size"):
        tern.TernaryLinear.from_trits(t, s, group_size=32)
    with pytest.raises(ValueError, match="multiple"):
        tern.TernaryLinear.from_trits(t[:, :96], s, group_size=64)
    with pytest.raises(ValueError, match="shape"):
        tern.TernaryLinear.from_trits(t, s[:, :1])
    bad = t.copy()
    bad[2, 5] = 2
    with pytest.raises(ValueError, match=r"\[2, 5\]"):
        tern.TernaryLinear.from_trits(bad, s)
    with pytest.raises(ValueError):
        tern.TernaryLinear.from_trits(t.astype(np.float32), s)
    with pytest.raises(ValueError):
        tern.TernaryLinear.from_trits(t[0], s)
    with pytest.raises(ValueError, match="bias"):
        tern.TernaryLinear.from_trits(t, s, bias=np.zeros(5, np.float32))
    s2 = s.copy()
    s2[1, 1] = np.nan
    with pytest.raises(ValueError, match="not finite"):  # tern's own message
        tern.TernaryLinear.from_trits(t, s2)
    with pytest.raises(ValueError):
        tern.TernaryLinear.from_trits(np.zeros((0, 64), np.int8), np.zeros((0, 1), np.float32))


def mlx_words(codes):
    """codes uint8 [n, k] in 0..3 -> MLX uint32 words [n, k/16] (element j at bits 2j)."""
    n, k = codes.shape
    c = codes.reshape(n, k // 16, 16).astype(np.uint64)
    return (c << (2 * np.arange(16, dtype=np.uint64))).sum(axis=2).astype(np.uint32)


@pytest.mark.parametrize("n,k,g", [(5, 64, 64), (19, 384, 128), (40, 704, 64)])
def test_from_mlx_2bit(n, k, g):
    t, s, b = rand_layer(n, k, g)
    s16 = s.astype(np.float16)
    layer = tern.TernaryLinear.from_mlx_2bit(mlx_words((t + 1).astype(np.uint8)), s16, -s16, g, bias=b)
    x = RNG.standard_normal((9, k)).astype(np.float32)
    assert rel_err(layer(x), x.astype(np.float64) @ ref_w(t, s, g).T + b) < BOUND
    # float32 scales exactly representable in float16 are accepted
    tern.TernaryLinear.from_mlx_2bit(mlx_words((t + 1).astype(np.uint8)), s16.astype(np.float32),
                                     -s16.astype(np.float32), g)


def test_from_mlx_2bit_refusals():
    n, k, g = 6, 128, 64
    t, s, _ = rand_layer(n, k, g)
    s16 = s.astype(np.float16)
    words = mlx_words((t + 1).astype(np.uint8))
    bi = -s16
    bi[3, 1] = bi[3, 1] * np.float16(0.5)
    with pytest.raises(ValueError, match="-scale"):
        tern.TernaryLinear.from_mlx_2bit(words, s16, bi, g)
    with pytest.raises(ValueError, match="-scale"):
        tern.TernaryLinear.from_mlx_2bit(words, s16, s16, g)  # bias == +scale
    codes = (t + 1).astype(np.uint8)
    codes[4, 77] = 3
    with pytest.raises(ValueError, match="code 3"):
        tern.TernaryLinear.from_mlx_2bit(mlx_words(codes), s16, -s16, g)
    with pytest.raises(ValueError, match="float16"):
        tern.TernaryLinear.from_mlx_2bit(words, s16.astype(np.float32) + np.float32(1e-6), -s16, g)
    with pytest.raises(ValueError, match="uint32"):
        tern.TernaryLinear.from_mlx_2bit(words.astype(np.int64), s16, -s16, g)
    with pytest.raises(ValueError, match="shape"):
        tern.TernaryLinear.from_mlx_2bit(words, s16[:, :1], -s16[:, :1], g)
    with pytest.raises(ValueError, match="group_size"):
        tern.TernaryLinear.from_mlx_2bit(words, s16, -s16, 100)


def pack_bytes(codes):
    n, k = codes.shape
    c = codes.reshape(n, k // 4, 4).astype(np.uint8)
    return (c[..., 0] | (c[..., 1] << 2) | (c[..., 2] << 4) | (c[..., 3] << 6)).astype(np.uint8)


@pytest.mark.parametrize("n,k,g", [(3, 64, 64), (21, 896, 128), (64, 192, 64)])
def test_from_packed(n, k, g):
    t, s, b = rand_layer(n, k, g)
    layer = tern.TernaryLinear.from_packed(pack_bytes((t + 1).astype(np.uint8)), s, bias=b)
    assert layer.group_size == g
    x = RNG.standard_normal((4, k)).astype(np.float32)
    assert rel_err(layer(x), x.astype(np.float64) @ ref_w(t, s, g).T + b) < BOUND
    np.testing.assert_array_equal(layer.dequantize(), ref_w(t, s, g).astype(np.float32))


def test_from_packed_refusals():
    t, s, _ = rand_layer(5, 128, 64)
    codes = (t + 1).astype(np.uint8)
    w = pack_bytes(codes)
    codes[2, 9] = 3
    with pytest.raises(ValueError, match="code 3"):
        tern.TernaryLinear.from_packed(pack_bytes(codes), s)
    with pytest.raises(ValueError, match="scales"):
        tern.TernaryLinear.from_packed(w, s[:, :1].repeat(3, axis=1))  # group 128/3
    with pytest.raises(ValueError, match="scales"):
        tern.TernaryLinear.from_packed(w, s[:4])
    with pytest.raises(ValueError, match="uint8"):
        tern.TernaryLinear.from_packed(w.astype(np.int16), s)
    s2 = s.copy()
    s2[0, 0] = 1e6  # overflows float16
    with pytest.raises(ValueError, match="finite"), np.errstate(over="ignore"):
        tern.TernaryLinear.from_packed(w, s2)


def _gguf_lite():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import gguf_lite
    return gguf_lite


def _oracle_matrix(rel, tensor):
    """W [N, K] float64 read by tools/gguf_lite.py (independent of tern), plus a Q1_0 decode."""
    g = _gguf_lite()
    r = g.Reader(need_fixture(rel))
    t = r.by_name[tensor]
    if t["type"] == 42:  # Q2_0: the layout follows from the span to the next tensor
        n = int(np.prod(t["ne"]))
        nxt = min([u["offset"] for u in r.tensors if u["offset"] > t["offset"]] +
                  [len(r.buf) - r.data_offset])
        if nxt - t["offset"] >= n // 64 * 18:
            t = dict(t, g64=True, data=r.buf[r.data_offset + t["offset"]:r.data_offset + t["offset"] + n // 64 * 18])
    if t["type"] == 41:  # Q1_0: fp16 d + 16 bytes of signs per 128, bit set -> +d
        K = t["ne"][0]
        N = int(np.prod(t["ne"])) // K
        blk = np.frombuffer(t["data"], np.uint8).reshape(N, K // 128, 18)
        d = blk[:, :, :2].copy().view(np.float16).astype(np.float64).reshape(N, K // 128, 1)
        bits = np.unpackbits(blk[:, :, 2:], axis=-1, bitorder="little")
        return (np.where(bits == 1, 1.0, -1.0) * d).reshape(N, K)
    return np.asarray(g.dequant(t), np.float64)


# (file given to tern, tensor, file the oracle reads): the PTQ1_0 file holds the PQ2_0
# file's tensors transcoded losslessly (fixture README), so the PQ2_0 bytes are its oracle.
@pytest.mark.parametrize("rel,tensor,oracle", [
    ("qwen3-tiny/model-q2_0.gguf", "blk.0.ffn_gate.weight", None),
    ("qwen3-tiny/model-q2_0_g64.gguf", "blk.1.attn_q.weight", None),
    ("qwen35-tiny/model-pq2_0.gguf", "blk.0.ffn_down.weight", None),
    ("qwen35-tiny/model-ptq1_0.gguf", "blk.3.attn_k.weight", "qwen35-tiny/model-pq2_0.gguf"),
    ("qwen3-q1-tiny/model-q1_0.gguf", "blk.2.ffn_up.weight", None)])
def test_from_gguf_matches_independent_reader(rel, tensor, oracle):
    path = need_fixture(rel)
    w = _oracle_matrix(oracle or rel, tensor)
    layer = tern.TernaryLinear.from_gguf(path, tensor)
    assert layer.shape == w.shape
    np.testing.assert_array_equal(layer.dequantize(), w.astype(np.float32))
    x = RNG.standard_normal((5, layer.in_features)).astype(np.float32)
    assert rel_err(layer(x), x.astype(np.float64) @ w.T) < BOUND
    b = RNG.standard_normal(layer.out_features).astype(np.float32)
    lb = tern.TernaryLinear.from_gguf(path, tensor, bias=b)
    assert rel_err(lb(x), x.astype(np.float64) @ w.T + b) < BOUND


def test_from_gguf_refusals(tmp_path):
    path = need_fixture("qwen3-tiny/model-q2_0.gguf")
    with pytest.raises(ValueError, match="no tensor"):
        tern.TernaryLinear.from_gguf(path, "blk.0.nope.weight")
    with pytest.raises(ValueError, match="dimensions"):
        tern.TernaryLinear.from_gguf(path, "blk.0.attn_norm.weight")
    with pytest.raises(ValueError, match="BF16"):  # a 2-D tensor that is not ternary
        tern.TernaryLinear.from_gguf(need_fixture("qwen35-tiny/model-pq2_0.gguf"), "blk.0.ssm_alpha.weight")
    with pytest.raises(ValueError, match="bias"):
        tern.TernaryLinear.from_gguf(path, "blk.0.ffn_gate.weight", bias=np.zeros(3, np.float32))
    with pytest.raises(tern.Error):
        tern.TernaryLinear.from_gguf(tmp_path / "absent.gguf", "x")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    with pytest.raises(tern.Error):
        tern.TernaryLinear.from_gguf(bad, "x")


def test_threads_setting_and_threaded_result():
    t, s, b = rand_layer(300, 512, 128)
    layer = tern.TernaryLinear.from_trits(t, s, 128, b)
    x = RNG.standard_normal((40, 512)).astype(np.float32)
    y1 = layer(x)
    old = tern.get_threads()
    try:
        tern.set_threads(2)
        assert tern.get_threads() == 2
        y2 = layer(x)
    finally:
        tern.set_threads(old)
    assert rel_err(y2, x.astype(np.float64) @ ref_w(t, s, 128).T + b) < BOUND
    np.testing.assert_allclose(y1, y2, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        tern.set_threads(-1)


def test_version_is_the_library_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        import re
        v = re.search(r"project\(tern VERSION ([0-9.]+)", f.read()).group(1)
    assert tern.__version__ == v
    assert tern.kernel_isa() in ("scalar", "avx2", "avx512", "neon")


def test_bench_self_check_runs():
    from tern import bench
    assert bench.main(["--quick", "--reps", "1", "--threads", "1", "--json"]) == 0
