"""tern.Model.embed against the qwen3-tiny fixture's reference: its head is tied, so the final
hidden states are the least-squares solution of token_embd . h = the reference logits
(transformers, float64); token_embd is read here through tern.TernaryLinear.from_gguf and
checked to reproduce those logits first."""
import json

import numpy as np
import pytest

import tern
from conftest import need_fixture


@pytest.fixture(scope="module")
def ref():
    path = need_fixture("qwen3-tiny/model-q2_0.gguf")
    with open(need_fixture("qwen3-tiny/reference.json")) as f:
        r = json.load(f)
    E = tern.TernaryLinear.from_gguf(path, "token_embd.weight").dequantize().astype(np.float64)
    seq, ent = r["sequences"][0], r["logits"][0]
    L = np.fromfile(need_fixture("qwen3-tiny/" + ent["logits_file"]), dtype="<f4").astype(np.float64)
    L = L.reshape(len(seq["ids"]), E.shape[0])
    h = np.linalg.lstsq(E, L.T, rcond=None)[0].T
    assert np.abs(h @ E.T - L).max() < 1e-4  # the tied head explains the reference logits
    return path, seq["ids"], h


def test_embed_matches_reference_hidden_states(ref):
    path, ids, h = ref
    with tern.Model(path, threads=2, n_ctx=128) as m:
        rows = m.embed(ids, pooling=None, normalize=False)
        assert rows.shape == h.shape and rows.dtype == np.float32
        assert np.abs(rows - h).max() < 2e-3 * np.abs(h).max()
        want = {"mean": h.mean(0), "last": h[-1], "cls": h[0]}
        for how, w in want.items():
            v = m.embed(ids, pooling=how)
            assert v.shape == (h.shape[1],)
            assert abs(np.linalg.norm(v) - 1) < 1e-5
            assert np.abs(v - w / np.linalg.norm(w)).max() < 2e-3, how
            raw = m.embed(ids, pooling=how, normalize=False)
            assert np.abs(raw - w).max() < 2e-3 * np.abs(w).max(), how
        # mean of the rows equals the mean pooling; the pooled kinds differ
        assert np.abs(m.embed(ids, normalize=False) - rows.astype(np.float64).mean(0)).max() < 1e-4
        assert np.abs(m.embed(ids, pooling="last") - m.embed(ids, pooling="cls")).max() > 0.05
        # a text embeds as its plain-text ids; errors
        t = "def main(): <|im_start|>"
        assert np.array_equal(m.embed(t), m.embed(m.tokenize(t, special=False)))
        with pytest.raises(tern.Error):
            m.embed(ids, pooling="max")
        with pytest.raises(tern.Error):
            m.embed([])
        with pytest.raises(tern.Error):
            m.embed([m.n_vocab + 3])
