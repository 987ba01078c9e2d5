#!/usr/bin/env python3
"""tok_corpus.py - the tokenizer parity corpus: ~80 hand-written strings (code,
CJK, Hindi, Thai, emoji ZWJ sequences, whitespace runs, combining marks, chat
markup and special tokens inside text, contractions, digits) plus 300 random
mixes drawn from them with a fixed seed. Deterministic: the same list on every
machine. Usage: tok_corpus.py [--specials S1,S2,...] > corpus.jsonl (one JSON
string per line)."""
import json
import random
import sys

BASE = [
    "Hello world", " Hello world", "Hello, world! How are you today?", "",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n", " \n \n\n \t \t\t \t\n  \n   \n",
    "trailing space ", "   leading and trailing   ", "a\u00a0b\u2003c\u3000d",
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
    "const re = /^(?:[a-z0-9]+)$/i; // regex", "SELECT id, name FROM users WHERE age >= 18;",
    "<html><body><p class=\"x\">Text &amp; more</p></body></html>",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "don't won't can't shouldn't y'all o'clock", "IT'S ALL CAPS ISN'T IT", "'s 't 're 've 'm 'll 'd",
    "3", "33", "333", "3333", "12345678901234567890", "3.14159 2.71828 -1e-10 0x1F 1,000,000",
    "日本語のテキストを分割します。", "中文文本没有空格，标点符号也不同！", "한국어 텍스트도 있습니다.",
    "我想在apple工作1314151天～", "नमस्ते दुनिया, यह एक परीक्षण है।", "हिन्दी में संयुक्ताक्षर: क्ष त्र ज्ञ",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "กรุงเทพมหานคร อมรรัตนโกสินทร์", "កាន់តែពិសេសអាចខលចេញ",
    "нещо на Български", "Ελληνικά γράμματα", "עברית מימין לשמאל", "العربية من اليمين إلى اليسار",
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "👩\u200d👩\u200d👧\u200d👦 family, 👨🏽\u200d💻 coder, 🏳️\u200d🌈 flag, 🇫🇷🇯🇵 flags",
    "🦙🦙 llama.cpp 😁 ?", "e\u0301 a\u0300 o\u0308 n\u0303 (decomposed)", "é à ö ñ (composed)",
    "Ame\u0301lie Cafe\u0301 nai\u0308ve", "Z\u0351\u0362a\u0350l\u0360g\u0353o\u0321 text", "ﬁ ﬂ Å Ω K (compatibility)",
    "Führer ied 4 ½ months", "w048 7tuijk dsdfhu", "Cửa Việt", " discards", "!!!!!! ?????? ......",
    "''''''```````\"\"\"\"", "------======= ++++ ****", "\r\n windows\r\nline\rendings\r\n",
    "tabs\tand\t\tmore\t\t\ttabs", "mixed\u2028line\u2029separators", "zero\u200bwidth\u200cjoiner\u200dtest",
    "https://example.com/path?query=1&x=%20#frag", "user@example.org +1 (555) 123-4567",
    "$$\\frac{a}{b} = \\sum_{i=0}^{n} x_i^2$$", "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning here\n</think>\n\nanswer", "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|im_start|>", "<|im_start|", "|im_end|>", "< |im_start| >",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<tool_response>\n{\"t\": 1}\n</tool_response>",
    "a<think>b</think>c", "<<think>>", "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>",
]


def corpus(specials=()):
    rng = random.Random(20261130)
    pieces = [s for s in BASE if s] + list(specials)
    out = list(BASE)
    for _ in range(300):
        k = rng.randint(1, 5)
        parts = []
        for _ in range(k):
            p = rng.choice(pieces)
            if len(p) > 6 and rng.random() < 0.5:  # a random slice (may cut words, not code points)
                a = rng.randrange(len(p))
                b = rng.randrange(a, len(p) + 1)
                p = p[a:b]
            parts.append(p)
        sep = rng.choice(["", " ", "\n", "  ", "\t"])
        out.append(sep.join(parts))
    return out


if __name__ == "__main__":
    specials = []
    if len(sys.argv) > 2 and sys.argv[1] == "--specials":
        specials = [s for s in sys.argv[2].split(",") if s]
    for s in corpus(specials):
        sys.stdout.write(json.dumps(s, ensure_ascii=False) + "\n")
