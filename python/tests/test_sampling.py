"""Sampling in tern.Model: seeds, top_p / top_k / min_p and the penalties against `tern run`
(same prompt, seed and flags: the same tokens), the filters' effect checked on the logits,
argument checks, the model's general.sampling.* and tern.chat.thinking keys (copies written
by `tern convert --set`), and Model.meta."""
import json
import os
import subprocess
import warnings

import numpy as np
import pytest

import tern
from conftest import REPO, need_fixture, tern_bin

Q3 = ("qwen3-tiny", "model-q2_0.gguf", "q2_0")
Q35 = ("qwen35-tiny", "model-pq2_0.gguf", "pq2_0")
EMBEDDED = os.path.join(REPO, "models", "tern-default.gguf")
PROMPT = "The quick brown fox"
# the CLI's layout (tern_model_params_default reads $TERN_REPACK), for bit-equal logits
REPACK = os.environ.get("TERN_REPACK") != "0"


def embedded():
    if not os.path.exists(EMBEDDED):
        pytest.skip("models/tern-default.gguf missing")
    return EMBEDDED


@pytest.fixture(scope="module")
def q3():
    with tern.Model(need_fixture("%s/%s" % Q3[:2]), threads=1, n_ctx=512, repack=REPACK) as m:
        yield m


def cli_run(path, prompt, n, *flags, raw=True):
    """`tern run --json` on one thread; its JSON (tokens, text, prompt_tokens, ...)."""
    cmd = [tern_bin(), "run", "-m", path, "--json", "--quiet", "--threads", "1", "-n", str(n), "-p", prompt]
    cmd += ["--raw"] if raw else []
    out = subprocess.run(cmd + [str(f) for f in flags], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def convert(tmp_path, fixture, name, *sets):
    """A copy of a fixture model with metadata keys set (`tern convert --set KEY=TYPE:VALUE`)."""
    src = need_fixture("%s/%s" % fixture[:2])
    dst = str(tmp_path / name)
    cmd = [tern_bin(), "convert", src, dst, "--to", fixture[2], "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return dst


def test_seeds_at_temperature_one(q3):
    """The defect: the sampler got top_p ~1e-45 and was always greedy."""
    greedy = q3.generate(PROMPT, max_tokens=32, temperature=0)
    g = q3.last["tokens"]
    runs = {}
    for seed in (5, 6, 5):
        q3.generate(PROMPT, max_tokens=32, temperature=1.0, top_p=1.0, top_k=0, seed=seed)
        runs.setdefault(seed, []).append(q3.last["tokens"])
    assert runs[5][0] == runs[5][1], "the same seed must repeat"
    assert runs[5][0] != runs[6][0], "two seeds gave the same tokens at temperature 1"
    assert runs[5][0] != g and runs[6][0] != g, "temperature 1 gave the greedy tokens"
    assert greedy
    # the defaults sample too (temperature 0.7, top-p 0.8, top-k 20 on this model)
    outs = set()
    for seed in range(1, 5):
        q3.generate(PROMPT, max_tokens=32, seed=seed)
        outs.add(tuple(q3.last["tokens"]))
    assert len(outs) > 1


# (flags of tern run, the same as generate() arguments)
CASES = [
    ((), {}),
    (("--temp", 1.0), dict(temperature=1.0)),
    (("--temp", 1.0, "--seed", 6), dict(temperature=1.0, seed=6)),
    (("--temp", 1.5, "--top-p", 0.5), dict(temperature=1.5, top_p=0.5)),
    (("--temp", 1.5, "--top-k", 3), dict(temperature=1.5, top_k=3)),
    (("--temp", 1.5, "--min-p", 0.2), dict(temperature=1.5, min_p=0.2)),
    (("--temp", 1.2, "--top-k", 0, "--top-p", 1, "--min-p", 0), dict(temperature=1.2, top_k=0, top_p=1.0, min_p=0.0)),
    (("--temp", 1.0, "--repeat-penalty", 1.5, "--presence-penalty", 0.5, "--frequency-penalty", 0.3),
     dict(temperature=1.0, repeat_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.3)),
]


@pytest.mark.parametrize("which", ["qwen3-tiny", "embedded"])
def test_same_tokens_as_cli(which):
    """Same prompt, seed and sampling flags: the tokens of `tern run --raw` (the embedded
    model carries general.sampling.* keys: left-out flags take them in both)."""
    path = embedded() if which == "embedded" else need_fixture("%s/%s" % Q3[:2])
    with tern.Model(path, threads=1, repack=REPACK) as m:
        for flags, kw in CASES:
            kw = dict(kw)
            seed = kw.pop("seed", 5)
            if "--seed" not in flags:
                flags = flags + ("--seed", seed)
            cli = cli_run(path, PROMPT, 40, *flags)
            text = m.generate(PROMPT, max_tokens=40, seed=seed, **kw)
            assert m.last["tokens"] == cli["tokens"], (which, flags)
            assert text == cli["text"] or "\ufffd" in cli["text"]


def softmax_rows(logits, temp):
    z = logits.astype(np.float64) / temp
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def sampled_rows(m, prompt_ids, toks):
    """Logits row i: the next-token logits that chose toks[i]."""
    lg = m.eval(list(prompt_ids) + list(toks))
    return lg[len(prompt_ids) - 1:len(prompt_ids) - 1 + len(toks)]


def test_filters_act_on_the_distribution(q3):
    """top_k / top_p / min_p keep what they promise (checked on the logits), each changes
    the output of an unfiltered run with the same seed, and at their tightest equal greedy."""
    ids = q3.tokenize(PROMPT)
    n, T, seed = 40, 1.5, 11
    eps = 0.02  # evaluating the whole sequence at once differs from decoding by ~2e-3 in a logit
    q3.generate(ids, max_tokens=n, temperature=0)
    greedy = q3.last["tokens"]
    q3.generate(ids, max_tokens=n, temperature=T, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
    free = q3.last["tokens"]
    lg = sampled_rows(q3, ids, free)
    ranks = [int((row > row[t] + eps).sum()) for row, t in zip(lg, free)]
    assert max(ranks) >= 3, "the unfiltered run never left the top 3: a weak test"

    q3.generate(ids, max_tokens=n, temperature=T, top_k=3, top_p=1.0, min_p=0.0, seed=seed)
    got = q3.last["tokens"]
    assert got != free
    lg = sampled_rows(q3, ids, got)
    for row, t in zip(lg, got):
        assert (row > row[t] + eps).sum() < 3, "top_k=3 sampled a token ranked below 3"

    q3.generate(ids, max_tokens=n, temperature=T, top_k=0, top_p=0.3, min_p=0.0, seed=seed)
    got = q3.last["tokens"]
    assert got != free
    lg = sampled_rows(q3, ids, got)
    for row, p, t in zip(lg, softmax_rows(lg, T), got):
        above = p[row > row[t] + eps].sum()
        assert above < 0.3 + eps, "top_p=0.3 sampled a token below the nucleus (mass above it %g)" % above

    q3.generate(ids, max_tokens=n, temperature=T, top_k=0, top_p=1.0, min_p=0.3, seed=seed)
    got = q3.last["tokens"]
    assert got != free
    lg = sampled_rows(q3, ids, got)
    for p, t in zip(softmax_rows(lg, T), got):
        assert p[t] >= 0.3 * p.max() * (1 - eps), "min_p=0.3 sampled p %g < 0.3 x %g" % (p[t], p.max())

    for kw in (dict(top_k=1, top_p=1.0, min_p=0.0), dict(top_k=0, top_p=1e-6, min_p=0.0),
               dict(top_k=0, top_p=1.0, min_p=1.0)):
        q3.generate(ids, max_tokens=n, temperature=T, seed=seed, **kw)
        assert q3.last["tokens"] == greedy, kw


def test_argument_checks(q3):
    bad = [dict(top_p=0.0), dict(top_p=1.5), dict(top_p=-0.1), dict(temperature=-1), dict(temperature=float("nan")),
           dict(temperature=101), dict(top_k=-1), dict(min_p=-0.01), dict(min_p=1.01), dict(repeat_penalty=0),
           dict(presence_penalty=float("inf")), dict(max_tokens=-1), dict(seed=-1), dict(seed=2 ** 64)]
    for kw in bad:
        name = next(iter(kw))
        with pytest.raises(ValueError, match=name):
            q3.generate("Hi", **kw)
        if name != "max_tokens":
            with pytest.raises(ValueError, match=name):
                q3.chat([{"role": "user", "content": "Hi"}], max_tokens=2, **kw)
    with pytest.raises(TypeError, match="top_k"):
        q3.generate("Hi", top_k=2.5)
    with pytest.raises(TypeError, match="temperature"):
        q3.generate("Hi", temperature="hot")
    # `tern run` refuses --top-p 0 the same way (greedy is temperature 0)
    out = subprocess.run([tern_bin(), "run", "-m", q3.path, "--raw", "-p", "Hi", "--top-p", "0", "-n", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--top-p" in out.stderr
    # edges that are allowed
    q3.generate("Hi", max_tokens=2, top_p=1.0, top_k=0, min_p=1.0, temperature=100, seed=2 ** 64 - 1)
    q3.generate("Hi", max_tokens=2, temperature=np.float32(0.5), top_k=np.int64(3))


def test_model_sampling_keys_are_followed(tmp_path):
    base = need_fixture("%s/%s" % Q3[:2])
    with tern.Model(base, threads=1, repack=REPACK) as m:
        assert m.meta("general.sampling.temp") is None
        assert m.sampling_defaults() == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0,
                                         "repeat_penalty": 1.0, "presence_penalty": 0.0,
                                         "frequency_penalty": 0.0, "penalty_last_n": 0}
        m.generate(PROMPT, max_tokens=32, temperature=0)
        greedy = m.last["tokens"]
    cold = convert(tmp_path, Q3, "cold.gguf", "general.sampling.temp=f32:0.0")
    with tern.Model(cold, threads=1, repack=REPACK) as m:
        assert m.meta("general.sampling.temp") == 0.0
        assert m.sampling_defaults()["temperature"] == 0.0
        for seed in (1, 2):
            m.generate(PROMPT, max_tokens=32, seed=seed)  # no temperature: the model's 0
            assert m.last["tokens"] == greedy
            c = m.chat([{"role": "user", "content": "Hi"}], max_tokens=8, seed=seed)
            assert c["text"] == m.chat([{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0)["text"]
        # an explicit argument wins over the key
        a = [m.generate(PROMPT, max_tokens=32, temperature=1.0, top_p=1.0, seed=s) and m.last["tokens"]
             for s in (1, 2)]
        assert a[0] != a[1]
    assert cli_run(cold, PROMPT, 32, "--seed", 3)["tokens"] == greedy

    # every key, as the CLI reads them (integers for top_k / penalty_last_n)
    keyed = convert(tmp_path, Q3, "keyed.gguf", "general.sampling.temp=f32:1.3", "general.sampling.top_k=i32:5",
                    "general.sampling.top_p=f32:0.9", "general.sampling.min_p=f32:0.02",
                    "general.sampling.penalty_repeat=f32:1.2", "general.sampling.penalty_last_n=i32:16",
                    "general.sampling.penalty_freq=f32:0.25", "general.sampling.penalty_present=f32:0.5")
    with tern.Model(keyed, threads=1, repack=REPACK) as m:
        d = m.sampling_defaults()
        assert d["top_k"] == 5 and d["penalty_last_n"] == 16
        for k, v in (("temperature", 1.3), ("top_p", 0.9), ("min_p", 0.02), ("repeat_penalty", 1.2),
                     ("frequency_penalty", 0.25), ("presence_penalty", 0.5)):
            assert abs(d[k] - v) < 1e-6, k
        for seed in (4, 9):
            m.generate(PROMPT, max_tokens=40, seed=seed)
            assert m.last["tokens"] == cli_run(keyed, PROMPT, 40, "--seed", seed)["tokens"]
        m.generate(PROMPT, max_tokens=40, seed=4, top_k=40)
        assert m.last["tokens"] == cli_run(keyed, PROMPT, 40, "--seed", 4, "--top-k", 40)["tokens"]

    # keys out of range or of another type: ignored with a warning (the CLI warns too)
    odd = convert(tmp_path, Q3, "odd.gguf", "general.sampling.top_p=f32:0", "general.sampling.temp=str:hot",
                  "general.sampling.top_k=f32:3.5", "tern.chat.thinking=str:yes")
    with pytest.warns(UserWarning) as w:
        m = tern.Model(odd, threads=1, repack=REPACK)
    with m:
        msgs = " ".join(str(x.message) for x in w)
        assert "general.sampling.top_p" in msgs and "general.sampling.temp" in msgs
        assert "general.sampling.top_k" in msgs and "tern.chat.thinking" in msgs
        assert m.thinking is False  # qwen3's template default
        assert m.sampling_defaults()["top_p"] == 0.8 and m.sampling_defaults()["temperature"] == 0.7
        assert m.meta("general.sampling.temp") == "hot"
        with pytest.raises(ValueError, match="general.sampling.temp"):
            m.meta("general.sampling.temp", float)


def test_thinking_key_is_followed(tmp_path):
    """thinking: an argument > tern.chat.thinking > the template's default (qwen35: on)."""
    path = need_fixture("%s/%s" % Q35[:2])
    off = convert(tmp_path, Q35, "nothink.gguf", "tern.chat.thinking=bool:false")
    msgs = [{"role": "user", "content": "Hi"}]
    with tern.Model(path, threads=1, repack=REPACK) as m:
        assert m.meta("tern.chat.thinking") is None and m.thinking is True
        d = m.sampling_defaults()
        assert (d["temperature"], d["top_p"]) == (0.6, 0.95)
        assert m.sampling_defaults(thinking=False)["temperature"] == 0.7
        m.chat(msgs, max_tokens=4, temperature=0)
        on_prompt = m.last["n_prompt"]
        assert m._thinking_open
        m.chat(msgs, max_tokens=4, temperature=0, thinking=False)
        assert not m._thinking_open and m.last["n_prompt"] != on_prompt
    with tern.Model(off, threads=1, repack=REPACK) as m:
        assert m.meta("tern.chat.thinking") is False and m.thinking is False
        d = m.sampling_defaults()
        assert (d["temperature"], d["top_p"]) == (0.7, 0.8)
        r = m.chat(msgs, max_tokens=24, seed=7)
        assert not m._thinking_open
        cli = cli_run(off, "Hi", 24, "--seed", 7, raw=False)
        assert m.last["n_prompt"] == cli["prompt_tokens"] and m.last["tokens"] == cli["tokens"]
        assert r["content"] == cli["content"] or "\ufffd" in cli["text"]
        m.chat(msgs, max_tokens=4, temperature=0, thinking=True)  # the argument wins
        assert m._thinking_open and m.last["n_prompt"] == on_prompt
    # a thinking model in chat mode: same tokens as `tern run` (its 0.6 / 0.95 defaults)
    with tern.Model(path, threads=1, repack=REPACK) as m:
        m.chat(msgs, max_tokens=24, seed=7)
        assert m.last["tokens"] == cli_run(path, "Hi", 24, "--seed", 7, raw=False)["tokens"]


def test_embedded_model_chat_does_not_think():
    """models/tern-default.gguf says tern.chat.thinking=false: a plain chat must not start
    inside <think> (the documented streaming example looped there)."""
    with tern.Model(embedded(), threads=1, repack=REPACK) as m:
        assert m.meta("tern.chat.thinking") is False and m.thinking is False
        assert m.meta("general.sampling.top_k") == 40 and m.sampling_defaults()["top_k"] == 40
        text = "".join(m.chat([{"role": "user", "content": "Hi"}], max_tokens=48, seed=1, stream=True))
        assert not m._thinking_open
        r = m.parse_reply(text)
        assert r["content"].strip(), text


def test_meta(q3):
    assert q3.meta("general.architecture") == "qwen3"
    assert isinstance(q3.meta("qwen3.block_count"), int)
    assert q3.meta("qwen3.block_count", float) == float(q3.meta("qwen3.block_count"))
    assert q3.meta("no.such.key") is None and q3.meta("no.such.key", bool) is None
    with pytest.raises(ValueError, match="general.architecture"):
        q3.meta("general.architecture", int)
    with pytest.raises(ValueError):
        q3.meta("tokenizer.ggml.tokens")  # an array
    with pytest.raises(ValueError):
        q3.meta("general.architecture", list)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tern.Model(need_fixture("qwen35-tiny/mlx-pack"), threads=1, n_ctx=64) as m:
            assert m.meta("general.sampling.temp") is None  # MLX packs carry no GGUF keys
            assert m.thinking is True
