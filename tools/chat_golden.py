#!/usr/bin/env python3
"""chat_golden.py - golden chat renders for tests/unit/test_chat.c.

Renders every case below with python jinja2 and the official templates in
tools/templates/ (qwen3.jinja, qwen3.5.jinja) the way transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False, key order kept), raise_exception) and
writes tests/data/chat_golden.json: per case the messages (tool-call arguments
and tools kept as JSON text, exactly what the C API takes), the options, and the
expected prompt text or the template's error message.

usage: python3 tools/chat_golden.py [OUT.json]   (default tests/data/chat_golden.json)
"""
import json
import os
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(msg):
    raise ValueError(msg)


def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    return e


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                            "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Search the web — «quotes» \"and\" \\ slashes",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer", "default": 5}}}}}
TOOLS = json.dumps([WEATHER, SEARCH], ensure_ascii=False)


def call(name, args_text):
    return {"name": name, "arguments": args_text}


HI = [{"role": "user", "content": "Hi"}]
C_CONV = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"}, {"role": "user", "content": "Bye"}]
D_CONV = [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": "", "reasoning_content": "Need tool.",
           "tool_calls": [call("get_weather", '{"city": "Paris"}')]},
          {"role": "tool", "content": '{"temp": 20}'}]
MULTI_TOOL = [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Compare Paris and Oslo."},
              {"role": "assistant", "content": "Let me check both.", "reasoning_content": "two calls",
               "tool_calls": [call("get_weather", '{"city": "Paris", "unit": "c"}'),
                              call("get_weather", '{"city": "Oslo", "unit": "c"}')]},
              {"role": "tool", "content": '{"temp": 20}'}, {"role": "tool", "content": '{"temp": -3}'},
              {"role": "assistant", "content": "Paris is warmer.", "reasoning_content": "20 > -3"},
              {"role": "user", "content": "Thanks!"}]
ARGS = ('{"s": "line1\\nline2 \\"quoted\\" \\\\ tab\\t é 中文 🦙", "i": 42, "neg": -7, "f": 1.0, "g": 2.50, '
        '"e": 1e-05, "big": 1e20, "t": true, "fa": false, "n": null, "list": [1, "two", 3.5, [true]], '
        '"obj": {"k": "v", "nested": {"x": 0.1}}, "empty": {}, "el": [], "z": -0.0, "u": "\\u00e9\\ud83e\\udd99"}')
TYPES = [{"role": "user", "content": "Do it."},
         {"role": "assistant", "content": "", "tool_calls": [call("search", ARGS)]},
         {"role": "tool", "content": "ok"}]
HISTORY = [{"role": "user", "content": "Q1"},
           {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
           {"role": "user", "content": "Q2"},
           {"role": "assistant", "content": "<think>\nR2\n</think>\n\nA2"},
           {"role": "user", "content": "Q3"},
           {"role": "assistant", "content": "\n\nA3 with leading newlines", "reasoning_content": "\nR3\n"}]
UNICODE = [{"role": "system", "content": "Réponds en français. 🇫🇷"},
           {"role": "user", "content": "  日本語で説明して\n\n  "},
           {"role": "assistant", "content": "はい。\n"},
           {"role": "user", "content": "<tool_response>fake</tool_response>"}]
TOOL_ONLY_TAIL = [{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": "Checking.", "tool_calls": [call("get_weather", '{"city": "Rome"}')]},
                  {"role": "tool", "content": "sunny"},
                  {"role": "assistant", "content": "It is sunny.", "reasoning_content": ""}]
SYS_EMPTY_TOOLS = [{"role": "system", "content": "   "}, {"role": "user", "content": "x"}]
NO_USER = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]
SYS_LATE = [{"role": "user", "content": "a"}, {"role": "system", "content": "late"}]
ASST_THINK_NO_CLOSE = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "<think>only open"},
                       {"role": "user", "content": "v"}]
MULTI_THINK = [{"role": "user", "content": "u"},
               {"role": "assistant", "content": "<think>a</think>mid<think>b</think>\n\nend"}]

CASES = [
    ("a_hi_think", HI, None, True, True),
    ("b_hi_nothink", HI, None, True, False),
    ("c_history_strip", C_CONV, None, True, True),
    ("d_tools_call_response", D_CONV, TOOLS, True, True),
    ("d_tools_nothink", D_CONV, TOOLS, True, False),
    ("e_multi_tool_results", MULTI_TOOL, TOOLS, True, True),
    ("e_multi_tool_no_tools_block", MULTI_TOOL, None, True, True),
    ("f_arg_types", TYPES, TOOLS, True, True),
    ("g_history_reasoning", HISTORY, None, False, True),
    ("g_history_reasoning_gen", HISTORY, None, True, False),
    ("h_unicode_whitespace", UNICODE, None, True, True),
    ("i_tool_then_final", TOOL_ONLY_TAIL, TOOLS, False, True),
    ("j_sys_blank_tools", SYS_EMPTY_TOOLS, TOOLS, True, True),
    ("j_empty_tools_list", HI, "[]", True, True),
    ("k_no_user_query", NO_USER, None, True, True),
    ("k_system_late", SYS_LATE, None, True, True),
    ("l_think_unclosed", ASST_THINK_NO_CLOSE, None, True, True),
    ("l_multi_think", MULTI_THINK, None, False, True),
]


def to_template_messages(msgs):
    out = []
    for m in msgs:
        d = {k: v for k, v in m.items() if k != "tool_calls"}
        if "tool_calls" in m:
            d["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": json.loads(c["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(d)
    return out


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "data", "chat_golden.json")
    e = env()
    templates = {"qwen3": e.from_string(open(os.path.join(HERE, "templates", "qwen3.jinja")).read()),
                 "qwen35": e.from_string(open(os.path.join(HERE, "templates", "qwen3.5.jinja")).read())}
    cases = []
    for fmt, tmpl in templates.items():
        for name, msgs, tools, gen, think in CASES:
            c = {"name": f"{fmt}/{name}", "format": fmt, "messages": msgs, "tools_json": tools,
                 "add_generation_prompt": gen, "enable_thinking": think}
            try:
                c["expected"] = tmpl.render(messages=to_template_messages(msgs),
                                            tools=json.loads(tools) if tools else None,
                                            add_generation_prompt=gen, enable_thinking=think)
            except Exception as ex:  # the template refuses: the C renderer must fail too
                c["error"] = str(ex)
            cases.append(c)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/chat_golden.py", "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out_path}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
