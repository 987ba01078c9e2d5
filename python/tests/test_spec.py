"""tern.Model(spec=...): speculative decoding from Python gives the plain text (greedy, byte
for byte) with prompt lookup and with a draft model, reports its counts in Model.last["spec"],
refuses a draft model with another tokenizer naming the difference and a bad spec value."""
import pytest

import tern
from conftest import need_fixture

PROMPT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n"


def test_spec_greedy_same():
    fx = need_fixture("qwen3-tiny/model-q2_0.gguf")
    with tern.Model(fx, threads=2) as m:
        plain = m.generate(PROMPT, max_tokens=48, temperature=0, repeat_penalty=1.0)
        assert "spec" not in m.last
    for spec in ("ngram", "draft:" + fx):
        for k in (1, 4, 8):
            with tern.Model(fx, threads=2, spec=spec, spec_k=k) as m:
                assert m.generate(PROMPT, max_tokens=48, temperature=0, repeat_penalty=1.0) == plain
                if spec != "ngram":
                    s = m.last["spec"]
                    assert s["passes"] > 0 and 0 < s["accepted"] <= s["drafted"]


def test_spec_refusals():
    fx = need_fixture("qwen3-tiny/model-q2_0.gguf")
    other = need_fixture("qwen35-tiny/model-pq2_0.gguf")
    with pytest.raises(tern.Error, match="tokenizers differ"):
        tern.Model(fx, spec="draft:" + other)
    with pytest.raises(ValueError, match="spec"):
        tern.Model(fx, spec="bogus")
    with pytest.raises(ValueError, match="spec_k"):
        tern.Model(fx, spec="ngram", spec_k=99)
