"""tern.Model: a loaded model with its tokenizer, one session (KV cache) and sampling."""
import codecs
import json
import math
import operator
import os
import queue
import threading
import warnings

import numpy as np

from . import _tern

# Sampling, as `tern run` / `tern chat` / `tern serve` choose it (src/cli/cli_gen.c):
# an explicit argument > the model's general.sampling.* key > the built-in default (the
# Qwen3 model card: temperature 0.7, top-p 0.8, or 0.6 / 0.95 when thinking; top-k 20).
_BUILTIN = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "penalty_last_n": 0}
_THINKING = {"temperature": 0.6, "top_p": 0.95}
# llama.cpp's general.sampling.* GGUF keys: (key, argument, reader, lo, hi), the CLI's ranges;
# a key of another type or out of its range is ignored with a warning, as the CLI does
_MODEL_KEYS = (("general.sampling.temp", "temperature", "float", 0.0, 100.0),
               ("general.sampling.top_p", "top_p", "float", 1e-6, 1.0),
               ("general.sampling.min_p", "min_p", "float", 0.0, 1.0),
               ("general.sampling.penalty_repeat", "repeat_penalty", "float", 1e-3, 100.0),
               ("general.sampling.top_k", "top_k", "int", 0, 1 << 24),
               ("general.sampling.penalty_last_n", "penalty_last_n", "int", 0, 1 << 24),
               ("general.sampling.penalty_freq", "frequency_penalty", "float", -2.0, 2.0),
               ("general.sampling.penalty_present", "presence_penalty", "float", -2.0, 2.0))
_CHAT_QWEN35 = 1  # tern_chat_format TERN_CHAT_QWEN35


def _f32_short(v):
    """A float read as float32 by its shortest decimal (0.8, not 0.800000011920929): the
    same float32 again when handed back to the sampler."""
    return float(str(np.float32(v))) if isinstance(v, float) else v


def _real(name, v, lo, hi, lo_open=False, what=""):
    """A finite number in [lo, hi] (or (lo, hi] with lo_open); ValueError naming the argument."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError("tern: %s must be a number, got %s" % (name, type(v).__name__))
    f = float(v)
    if not math.isfinite(f) or f > hi or f < lo or (lo_open and f == lo):
        raise ValueError("tern: %s must be in %s%g, %g]%s, got %r" % (name, "(" if lo_open else "[", lo, hi, what, v))
    return f


def _integer(name, v, lo, hi, what=""):
    if isinstance(v, (bool, np.bool_)):
        raise TypeError("tern: %s must be an integer, got bool" % name)
    try:
        i = operator.index(v)
    except TypeError:
        raise TypeError("tern: %s must be an integer, got %s" % (name, type(v).__name__)) from None
    if i < lo or i > hi:
        raise ValueError("tern: %s must be an integer in [%d, %d]%s, got %d" % (name, lo, hi, what, i))
    return i


def _ids(ids, name="ids"):
    a = np.asarray(ids)
    if a.ndim != 1:
        raise ValueError("tern: %s must be a 1-D sequence of token ids" % name)
    if a.size and a.dtype.kind not in "iu":
        raise ValueError("tern: %s must be integers, got dtype %s" % (name, a.dtype))
    if a.size and (a.min() < -(2 ** 31) or a.max() >= 2 ** 31):
        raise ValueError("tern: a token id is out of the int32 range")
    return np.ascontiguousarray(a, dtype=np.int32)


class Model:
    """A ternary LLM (GGUF file or MLX pack directory) on the CPU (or "cuda").

    Model(path=None) loads the default model the CLI uses (tern.default_model_path()).
    threads: kernel threads (None: all online cores). n_ctx: KV cache positions
    (0: min(4096, the model's training context)). repack: ternary weights copied into the
    kernels' fastest layout at load where there is one (AVX-512), file pages dropped; False
    keeps the file layout. cache_type: the KV cache's storage,
    "f32", "f16", "bf16" or "q8_0" (None: f16 on the CPU). spec: speculative decoding for
    generate and chat, "ngram" (prompt lookup) or "draft:PATH" (a draft model with the same
    tokenizer, else tern.Error naming the difference); spec_k: the most drafted tokens a
    pass (0: 8). The text is the same as without (greedy: byte for byte); last["spec"] has
    the drafted / accepted / passes counts. Use as a context manager or call
    close(); any use after close raises tern.Error.
    """

    def __init__(self, path_or_pack=None, device="cpu", threads=None, n_ctx=0, repack=True,
                 cache_type=None, spec=None, spec_k=0):
        from . import default_model_path

        if path_or_pack is None:
            path_or_pack = default_model_path()
            if path_or_pack is None:
                raise _tern.Error("tern: no model given and no default model found (set TERN_MODEL)")
        self.path = os.fspath(path_or_pack)
        if threads is not None and (int(threads) < 0):
            raise ValueError("tern: threads must be >= 0")
        self._lock = threading.RLock()
        self._h = None
        self._h = _tern.model_load(self.path, device or "cpu", 0 if threads is None else int(threads),
                                   int(n_ctx), bool(repack), cache_type or "")
        self._info = _tern.model_info(self._h)
        self._format = _tern.chat_format(self._h)
        self._model_sampling = self._read_model_sampling()
        self._thinking = self._read_thinking()
        self._set_spec(spec, spec_k, device, threads)
        self.last = None  # details of the last generate/chat: tokens, stop_reason, n_prompt, timings

    def _set_spec(self, spec, spec_k, device, threads):
        if spec is None:
            return
        spec = os.fspath(spec) if not isinstance(spec, str) else spec
        if spec == "ngram":
            kind, path = "ngram", ""
        elif spec.startswith("draft:") and len(spec) > 6:
            kind, path = "draft", spec[6:]
        else:
            self.close()
            raise ValueError("tern: spec must be 'ngram' or 'draft:PATH' (got %r)" % (spec,))
        k = int(spec_k)
        if not 0 <= k <= 16:
            self.close()
            raise ValueError("tern: spec_k must be 0..16")
        try:
            _tern.set_spec(self._h, kind, path, k, device or "cpu", 0 if threads is None else int(threads))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ lifetime
    def close(self):
        with self._lock:
            if self._h is not None:
                _tern.model_close(self._h)

    def __enter__(self):
        self._handle()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def closed(self):
        return self._h is None or not _tern_is_open(self._h)

    def _handle(self):
        if self._h is None or not _tern_is_open(self._h):
            raise _tern.Error("tern: the model is closed")
        return self._h

    def __repr__(self):
        if self.closed:
            return "<tern.Model %r (closed)>" % self.path
        i = self._info
        return "<tern.Model %r %s %s %d layers vocab %d>" % (self.path, i["arch"], i["weight_type"], i["n_layers"],
                                                             i["n_vocab"])

    # ------------------------------------------------------------ facts
    @property
    def info(self):
        """Architecture, format, weight type, sizes and memory (a dict)."""
        with self._lock:
            return _tern.model_info(self._handle())

    @property
    def n_vocab(self):
        return self._info["n_vocab"]

    @property
    def n_ctx(self):
        return self._info["n_ctx"]

    @property
    def cache_type(self):
        """The KV cache type in use ("f32", "f16", "bf16" or "q8_0")."""
        return self._info["cache_type"]

    @property
    def chat_template(self):
        with self._lock:
            return _tern.chat_template(self._handle())

    def meta(self, key, type=None):
        """The value of a GGUF metadata key (e.g. "general.sampling.temp",
        "tern.chat.thinking"), None when the model has no such key (MLX packs have none).
        type: None = the key's own type (bool, str, int or float; arrays raise
        tern.ValueError), or bool / int / float / str to read it as that (float: a float32
        given by its shortest decimal; takes an integer value too); a value of another type
        raises tern.ValueError naming the key."""
        kinds = {None: "", bool: "bool", int: "int", float: "float", str: "str"}
        if type not in kinds:
            raise ValueError("tern: meta type must be bool, int, float, str or None")
        with self._lock:
            return _f32_short(_tern.model_meta(self._handle(), str(key), kinds[type]))

    def _read_model_sampling(self):
        out = {}
        for key, arg, kind, lo, hi in _MODEL_KEYS:
            try:
                v = _tern.model_meta(self._h, key, kind)
            except ValueError as e:
                warnings.warn("tern: ignoring %s (%s)" % (key, e), stacklevel=3)
                continue
            if v is None:
                continue
            if not (lo <= v <= hi):
                warnings.warn("tern: ignoring %s (out of range)" % key, stacklevel=3)
                continue
            out[arg] = _f32_short(v)
        return out

    def _read_thinking(self):
        try:
            v = _tern.model_meta(self._h, "tern.chat.thinking", "bool")
        except ValueError as e:  # e.g. a string where a BOOL belongs
            warnings.warn("tern: ignoring tern.chat.thinking (%s)" % e, stacklevel=3)
            v = None
        return v if v is not None else self._format == _CHAT_QWEN35

    @property
    def thinking(self):
        """Whether chat() thinks when thinking=None: the model's tern.chat.thinking key,
        else the template's default (on for qwen35, off for qwen3), as the CLI and server."""
        return self._thinking

    def sampling_defaults(self, thinking=None):
        """The sampling generate() and chat() use for arguments left at None: the model's
        general.sampling.* keys, else the built-in defaults (temperature 0.7, top_p 0.8, or
        0.6 / 0.95 when thinking; top_k 20; min_p 0; penalties off). thinking=None: the
        model's default (self.thinking). penalty_last_n 0 = a window of 64 tokens."""
        if thinking is None:
            thinking = self._thinking
        d = dict(_BUILTIN)
        if thinking:
            d.update(_THINKING)
        d.update(self._model_sampling)
        return d

    # ------------------------------------------------------------ text
    def tokenize(self, text, special=True):
        """Token ids of text (no BOS added). special=True: added tokens such as <|im_start|>
        in the text become their ids (as `tern run --raw`); False: plain text only."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        with self._lock:
            return _tern.tokenize(self._handle(), bytes(text), bool(special))

    def detokenize_bytes(self, ids):
        with self._lock:
            return _tern.detokenize(self._handle(), _ids(ids))

    def detokenize(self, ids):
        """Text of ids (invalid UTF-8 replaced by U+FFFD)."""
        return self.detokenize_bytes(ids).decode("utf-8", "replace")

    # ------------------------------------------------------------ evaluation
    def eval(self, ids, reset=True):
        """Logits float32 [T, n_vocab] (row t: next-token logits after ids[0..t]).
        reset=True starts from an empty context; False continues the session."""
        a = _ids(ids)
        out = np.empty((a.size, self.n_vocab), np.float32)
        with self._lock:
            h = self._handle()
            if a.size == 0:
                if reset:
                    _tern.reset(h)
                return out
            _tern.eval(h, a, out, bool(reset))
        return out

    def reset(self):
        with self._lock:
            _tern.reset(self._handle())

    _POOLING = {None: 0, "none": 0, "mean": 1, "last": 2, "cls": 3}

    def embed(self, text_or_ids, pooling="mean", normalize=True):
        """An embedding: the final hidden state (after the output norm, before the LM head)
        of a text (tokenized as plain text: no control token is made from it) or of token
        ids, from an empty context. pooling "mean", "last" or "cls" (the first token) gives
        float32 [n_embd]; None gives every token's row, [T, n_embd]. normalize: divided by
        the Euclidean norm (each row for None). It uses the model's one session, reset
        first: afterwards the session holds the embedded tokens, as after eval()."""
        if pooling not in self._POOLING:
            raise _tern.TernValueError("tern: pooling must be 'mean', 'last', 'cls' or None, not %r" % (pooling,))
        if isinstance(text_or_ids, (str, bytes)):
            a = _ids(self.tokenize(text_or_ids, special=False))
        else:
            a = _ids(text_or_ids)
        if a.size == 0:
            raise _tern.TernValueError("tern: nothing to embed (no tokens)")
        E = self.info["n_embd"]
        out = np.empty((a.size, E) if pooling in (None, "none") else (E,), np.float32)
        with self._lock:
            _tern.embed(self._handle(), a, out, self._POOLING[pooling], bool(normalize))
        return out

    @property
    def pos(self):
        with self._lock:
            return _tern.pos(self._handle())

    # ------------------------------------------------------------ generation
    def _gen_args(self, prompt_ids, reset, max_tokens, sampling, thinking, seed, stop):
        """The extension's generate arguments; sampling: the caller's arguments (None =
        the default, sampling_defaults(thinking)), checked with ValueErrors naming them."""
        if stop is None:
            stop = ()
        elif isinstance(stop, (str, bytes)):
            stop = (stop,)
        stops = tuple(s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in stop)
        if any(not s for s in stops):
            raise ValueError("tern: empty stop string")
        if any(b"\0" in s for s in stops):
            raise ValueError("tern: a stop string contains NUL")
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        seed = _integer("seed", seed, 0, 2 ** 64 - 1)
        max_tokens = 0 if max_tokens is None else _integer("max_tokens", max_tokens, 0, 1 << 24, " (0 = no limit)")
        d = self.sampling_defaults(thinking)
        for k, v in sampling.items():
            if v is not None:
                d[k] = v
        # the ranges of `tern run` (src/cli/cli_gen.c); top_p 0 is refused there too
        t = _real("temperature", d["temperature"], 0.0, 100.0, what=" (0 = greedy)")
        top_p = _real("top_p", d["top_p"], 0.0, 1.0, lo_open=True, what=" (1 = off; temperature=0 is greedy)")
        top_k = _integer("top_k", d["top_k"], 0, 1 << 24, " (0 = off)")
        min_p = _real("min_p", d["min_p"], 0.0, 1.0, what=" (0 = off)")
        rp = _real("repeat_penalty", d["repeat_penalty"], 0.0, 100.0, lo_open=True, what=" (1 = off)")
        pp = _real("presence_penalty", d["presence_penalty"], -100.0, 100.0, what=" (0 = off)")
        fp = _real("frequency_penalty", d["frequency_penalty"], -100.0, 100.0, what=" (0 = off)")
        last_n = _integer("penalty_last_n", d["penalty_last_n"], 0, 1 << 24)
        return (prompt_ids, bool(reset), max_tokens, t, top_p, top_k, min_p, rp, pp, fp, last_n, seed, stops)

    def _finish(self, r):
        text, ids, reason, n_prompt, prompt_s, gen_s = r
        self.last = {"tokens": ids, "stop_reason": reason, "n_prompt": n_prompt, "prompt_s": prompt_s,
                     "gen_s": gen_s, "text_bytes": text}
        d, a, n = _tern.spec_stats(self._handle())
        if d or n:
            self.last["spec"] = {"drafted": d, "accepted": a, "passes": n}
        return text.decode("utf-8", "replace")

    def _run(self, args, stream):
        if not stream:
            with self._lock:
                return self._finish(_tern.generate(self._handle(), *args, None))
        return self._stream(args)

    def _stream(self, args):
        self._handle()
        q = queue.Queue()
        stop_flag = threading.Event()
        done = object()

        def on_text(b):
            q.put(b)
            return not stop_flag.is_set()

        def work():
            try:
                with self._lock:
                    h = self._handle()
                    self._streaming = h
                    r = _tern.generate(h, *args, on_text)
                q.put((done, r, None))
            except BaseException as e:  # handed to the consumer
                q.put((done, None, e))

        t = threading.Thread(target=work, daemon=True)
        t.start()
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            while True:
                item = q.get()
                if isinstance(item, tuple) and item and item[0] is done:
                    _, r, e = item
                    if e is not None:
                        raise e
                    tail = dec.decode(b"", final=True)
                    self._finish(r)
                    if tail:
                        yield tail
                    return
                piece = dec.decode(item)
                if piece:
                    yield piece
        finally:
            if t.is_alive():
                stop_flag.set()
                h = getattr(self, "_streaming", None)
                if h is not None:
                    _tern.cancel(h)
                t.join()

    def generate(self, prompt, max_tokens=256, temperature=None, top_p=None, top_k=None, min_p=None, seed=None,
                 stop=None, stream=False, repeat_penalty=None, reset=True, presence_penalty=None,
                 frequency_penalty=None):
        """Continue `prompt` (text, tokenized with special tokens parsed, or a list of ids)
        as is, without a chat template (as `tern run --raw`). Sampling arguments left at
        None take the model's general.sampling.* keys, else the built-in defaults, as
        `tern run --raw` does (sampling_defaults()). temperature 0: greedy; top_p in (0, 1]
        (1 = off); top_k >= 0 (0 = off); min_p in [0, 1]; seed None: a random one.
        The same prompt, seed and sampling give the same tokens as `tern run --raw`.
        Returns the text (a stop string is not included); with stream=True an iterator
        of text pieces (complete UTF-8 characters) whose concatenation is that text.
        Details (tokens, stop_reason, ...) are in self.last afterwards."""
        sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p,
                    "repeat_penalty": repeat_penalty, "presence_penalty": presence_penalty,
                    "frequency_penalty": frequency_penalty}
        ids = self.tokenize(prompt) if isinstance(prompt, (str, bytes)) else list(prompt)
        if not ids:
            raise ValueError("tern: the prompt is empty")
        args = self._gen_args(_ids(ids, "prompt"), reset, max_tokens, sampling, None, seed, stop)
        return self._run(args, stream)

    # ------------------------------------------------------------ chat
    def chat(self, messages, tools=None, thinking=None, max_tokens=512, temperature=None, top_p=None,
             top_k=None, min_p=None, seed=None, stop=None, stream=False, repeat_penalty=None,
             presence_penalty=None, frequency_penalty=None):
        """Reply to `messages` (dicts with role, content, optional reasoning_content and
        tool_calls) through the model's chat template (Qwen3 / Qwen3.5 ChatML). tools: a
        list of tool definitions (JSON-able) or a JSON string. thinking: None = the model's
        default (self.thinking: its tern.chat.thinking key, else on for qwen35, off for
        qwen3). Sampling arguments left at None follow the CLI: the model's
        general.sampling.* keys, else temperature 0.7 / top-p 0.8 (0.6 / 0.95 when
        thinking), top-k 20. Returns a dict: content, reasoning, tool_calls [{name,
        arguments}], text, stop_reason; with stream=True an iterator of the raw reply text
        pieces (parse with parse_reply afterwards if wanted)."""
        sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p,
                    "repeat_penalty": repeat_penalty, "presence_penalty": presence_penalty,
                    "frequency_penalty": frequency_penalty}
        msgs = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError("tern: each message must be a dict with a 'role'")
            calls = []
            for c in m.get("tool_calls") or ():
                f = c.get("function", c)
                a = f.get("arguments", {})
                calls.append((str(f["name"]), a if isinstance(a, str) else json.dumps(a, ensure_ascii=False)))
            content = m.get("content")
            msgs.append((str(m["role"]), None if content is None else str(content),
                         m.get("reasoning_content"), calls))
        if tools is not None and not isinstance(tools, str):
            tools = json.dumps(tools, ensure_ascii=False)
        think = self._thinking if thinking is None else bool(thinking)
        with self._lock:
            ids, thinking_open, fmt = _tern.chat_tokenize(self._handle(), msgs, tools, int(think))
        args = self._gen_args(_ids(ids, "prompt"), True, max_tokens, sampling, think, seed, stop)
        self._thinking_open = thinking_open
        if stream:
            return self._run(args, True)
        text = self._run(args, False)
        reply = self.parse_reply(text, thinking_open)
        reply["text"] = text
        reply["stop_reason"] = self.last["stop_reason"]
        return reply

    def parse_reply(self, text, thinking_open=None):
        """Split generated text into reasoning, content and tool calls (the template's markup)."""
        if thinking_open is None:
            thinking_open = getattr(self, "_thinking_open", False)
        with self._lock:
            r, c, calls = _tern.chat_parse(self._handle(), text.encode("utf-8"), bool(thinking_open))
        return {"reasoning": r.decode("utf-8", "replace"), "content": c.decode("utf-8", "replace"),
                "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


def _tern_is_open(h):
    try:
        _tern.pos(h)
        return True
    except _tern.Error:
        return False
