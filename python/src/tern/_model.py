"""tern.Model: a loaded model with its tokenizer, one session (KV cache) and sampling."""
import codecs
import json
import os
import queue
import threading

import numpy as np

from . import _tern

_UNSET = object()


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
    "f32", "f16", "bf16" or "q8_0" (None: f16 on the CPU). Use as a context manager or call
    close(); any use after close raises tern.Error.
    """

    def __init__(self, path_or_pack=None, device="cpu", threads=None, n_ctx=0, repack=True,
                 cache_type=None):
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
        self.last = None  # details of the last generate/chat: tokens, stop_reason, n_prompt, timings

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

    @property
    def pos(self):
        with self._lock:
            return _tern.pos(self._handle())

    # ------------------------------------------------------------ generation
    def _gen_args(self, prompt_ids, reset, max_tokens, temperature, top_p, top_k, min_p, repeat_penalty, seed,
                  stop):
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
        if not (0 <= int(seed) < 2 ** 64):
            raise ValueError("tern: seed must be in [0, 2**64)")
        if max_tokens is None:
            max_tokens = 0
        return (prompt_ids, bool(reset), int(max_tokens), float(temperature), float(top_p), int(top_k),
                float(min_p), float(repeat_penalty), int(seed), stops)

    def _finish(self, r):
        text, ids, reason, n_prompt, prompt_s, gen_s = r
        self.last = {"tokens": ids, "stop_reason": reason, "n_prompt": n_prompt, "prompt_s": prompt_s,
                     "gen_s": gen_s, "text_bytes": text}
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

    def generate(self, prompt, max_tokens=256, temperature=0.7, top_p=0.8, top_k=20, min_p=0.0, seed=None,
                 stop=None, stream=False, repeat_penalty=1.0, reset=True):
        """Continue `prompt` (text, tokenized with special tokens parsed, or a list of ids)
        as is, without a chat template (as `tern run --raw`). temperature 0: greedy.
        Returns the text (a stop string is not included); with stream=True an iterator
        of text pieces (complete UTF-8 characters) whose concatenation is that text.
        Details (tokens, stop_reason, ...) are in self.last afterwards."""
        ids = self.tokenize(prompt) if isinstance(prompt, (str, bytes)) else list(prompt)
        if not ids:
            raise ValueError("tern: the prompt is empty")
        args = self._gen_args(_ids(ids, "prompt"), reset, max_tokens, temperature, top_p, top_k, min_p,
                              repeat_penalty, seed, stop)
        return self._run(args, stream)

    # ------------------------------------------------------------ chat
    def chat(self, messages, tools=None, thinking=None, max_tokens=512, temperature=_UNSET, top_p=_UNSET,
             top_k=20, min_p=0.0, seed=None, stop=None, stream=False, repeat_penalty=1.0):
        """Reply to `messages` (dicts with role, content, optional reasoning_content and
        tool_calls) through the model's chat template (Qwen3 / Qwen3.5 ChatML). tools: a
        list of tool definitions (JSON-able) or a JSON string. thinking: None = the model's
        default (on for qwen35, off for qwen3). Sampling defaults follow the CLI (temperature
        0.7 / top-p 0.8, or 0.6 / 0.95 when thinking). Returns a dict: content, reasoning,
        tool_calls [{name, arguments}], text, stop_reason; with stream=True an iterator of
        the raw reply text pieces (parse with parse_reply afterwards if wanted)."""
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
        th = -1 if thinking is None else int(bool(thinking))
        with self._lock:
            ids, thinking_open, fmt = _tern.chat_tokenize(self._handle(), msgs, tools, th)
        think_on = (fmt == 1 and th < 0) or th == 1
        if temperature is _UNSET:
            temperature = 0.6 if think_on else 0.7
        if top_p is _UNSET:
            top_p = 0.95 if think_on else 0.8
        args = self._gen_args(_ids(ids, "prompt"), True, max_tokens, temperature, top_p, top_k, min_p,
                              repeat_penalty, seed, stop)
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
