#!/usr/bin/env python3
"""Differential check of pagoda's Jinja interpreter against Python jinja2.

Developer tool (not a test: the test suite never needs Python). Renders with
`pagoda chat-template` and with jinja2 configured as transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now fixed
to 2025-06-15) and reports every difference.

  scripts/chat_template_diff.py templates [--pagoda build/pagoda] [NAME_SUBSTR...]
      every template in $PAGODA_ASSETS/chat-templates x a set of conversations
  scripts/chat_template_diff.py fuzz [--seed N] [--count N]
      random expressions / statements over a fixed context

Known, deliberate differences: list.append/pop are allowed (jinja2's
immutable sandbox raises SecurityError) and pagoda has a from_json filter.
"""
import argparse
import datetime
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2025, 6, 15).strftime(fmt)
    return env


ENV = make_env()


def py_render(src, messages, tools, kwargs, agp):
    try:
        return ENV.from_string(src).render(messages=messages, tools=tools, documents=None,
                                           add_generation_prompt=agp, **kwargs), None
    except Exception as e:  # noqa: BLE001 - any template error counts
        return None, f"{type(e).__name__}: {e}"


def pg_render(pagoda, tmpdir, src, messages, tools, kwargs, agp):
    path = os.path.join(tmpdir, "t.jinja")
    with open(path, "w") as f:
        f.write(src)
    cmd = [pagoda, "chat-template", path, "--date", "2025-06-15",
           "--messages", json.dumps(messages), "--kwargs", json.dumps(kwargs)]
    if tools is not None:
        cmd += ["--tools", json.dumps(tools)]
    if agp:
        cmd.append("--add-generation-prompt")
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        return None, r.stderr.decode("utf-8", "replace").strip()
    return r.stdout.decode("utf-8"), None


TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["c", "f"], "description": "Unit"}},
        "required": ["city"]}}}
CALL = {"id": "abcDEF123", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATIONS = {
    "plain": ([{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Hi there"},
               {"role": "assistant", "content": "Hello! How can I help?"},
               {"role": "user", "content": "Tell me a joke."}], None, {}, True),
    "single": ([{"role": "user", "content": "Hello"}], None, {}, False),
    "tools": ([{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": "", "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather",
                "content": "{\"temp_c\": 21}"}], [TOOL], {}, True),
    "tools_only": ([{"role": "user", "content": "Hi"}], [TOOL], {}, True),
    "parts": ([{"role": "user", "content": [{"type": "text", "text": "Describe"},
                                            {"type": "text", "text": " this."}]}], None, {}, True),
    "reasoning": ([{"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello!", "reasoning_content": "hmm"},
                   {"role": "user", "content": "Bye"}], None, {}, True),
    "unicode": ([{"role": "user", "content": "Gr\u00fc\u00dfe \u4e16\u754c \U0001F642 \"q\" <t> \\"}],
                None, {}, True),
    "nothink": ([{"role": "user", "content": "Hi"}], None, {"enable_thinking": False}, True),
    "empty": ([], None, {}, True),
}
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def cmd_templates(args):
    assets = os.environ.get("PAGODA_ASSETS", "../shared/assets")
    names = sorted(glob.glob(os.path.join(assets, "chat-templates", "*.jinja")))
    if args.names:
        names = [n for n in names if any(s in n for s in args.names)]
    total = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in names:
            src = open(path).read()
            for cname, (msgs, tools, kw, agp) in CONVERSATIONS.items():
                total += 1
                kwargs = dict(SPECIAL, **kw)
                want, werr = py_render(src, msgs, tools, kwargs, agp)
                got, gerr = pg_render(args.pagoda, tmp, src, msgs, tools, kwargs, agp)
                if (werr is None) == (gerr is None) and (werr is not None or want == got):
                    continue
                bad += 1
                print(f"{os.path.basename(path)} / {cname}:\n  python: {werr or repr(want[:300])}\n"
                      f"  pagoda: {gerr or repr(got[:300])}")
    print(f"{total - bad}/{total} agree")
    return 1 if bad else 0


FUZZ_CTX = {"s": "Hello, wOrld \u00e9", "n": 7, "f": 2.5, "l": [3, 1, 2], "ls": ["b", "A", "c"],
            "d": {"a": 1, "b": "x"}, "e": [], "b": True, "z": 0, "nul": None,
            "users": [{"name": "ann", "active": True, "age": 30},
                      {"name": "bob", "active": False, "age": 25}]}
LITS = ["1", "0", "-3", "0.5", "2.0", "'a'", "'Hello World'", "' x '", "''", "none", "true",
        "[1, 2]", "[]", "{'k': 1}", "(1, 'a')", "'%s!'"]
FILTERS = ["length", "string", "trim", "upper", "lower", "title", "capitalize", "join(',')",
           "default('x')", "default('x', true)", "first", "last", "list", "sort", "unique|list",
           "reverse|list", "int", "float", "abs", "round", "round(1)", "tojson", "tojson(indent=1)",
           "items|list", "dictsort", "map(attribute='name')|list", "selectattr('active')|list",
           "select('odd')|list", "replace('a','b')", "indent(2)", "wordcount", "sum", "min", "max",
           "batch(2)|list", "safe", "map('upper')|list", "center(9)", "truncate(5)"]
TESTS = ["defined", "undefined", "none", "string", "number", "mapping", "sequence", "iterable",
         "odd", "even", "divisibleby(2)", "in(l)", "eq(1)", "boolean", "integer", "float", "true",
         "lower", "upper", "not none", "gt 2"]
METHODS = ["split(',')", "split()", "upper()", "strip()", "startswith('H')", "find('l')",
           "replace('l', 'L')", "title()", "count('l')", "rsplit(',', 1)", "get('a')",
           "get('zz', 5)", "keys()|list", "items()|list", "capitalize()", "splitlines()"]
OPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in",
       "not in", "and", "or"]
SUBSCRIPTS = ["[0]", "[-1]", "[1:3]", "[::-1]", "['a']", "[5]", ".a", ".name", ".zz"]


def fuzz_expr(r, depth=0):
    k = r.randrange(10 if depth < 3 else 3)
    names = list(FUZZ_CTX) + ["u"]
    if k == 0:
        return r.choice(LITS)
    if k in (1, 2):
        return r.choice(names)
    if k == 3:
        return f"{fuzz_expr(r, depth + 1)} | {r.choice(FILTERS)}"
    if k == 4:
        return f"({fuzz_expr(r, depth + 1)} {r.choice(OPS)} {fuzz_expr(r, depth + 1)})"
    if k == 5:
        return f"({fuzz_expr(r, depth + 1)} is {r.choice(TESTS)})"
    if k == 6:
        return f"{r.choice(names)}.{r.choice(METHODS)}"
    if k == 7:
        return f"{r.choice(names)}{r.choice(SUBSCRIPTS)}"
    if k == 8:
        return (f"({fuzz_expr(r, depth + 1)} if {fuzz_expr(r, depth + 1)} "
                f"else {fuzz_expr(r, depth + 1)})")
    return f"(not {fuzz_expr(r, depth + 1)})"


def fuzz_template(r):
    k = r.randrange(4)
    e = fuzz_expr(r, 1)
    if k == 0:
        return "{% for x in " + e + " %}[{{ x }}{{ loop.index }}]{% else %}none{% endfor %}"
    if k == 1:
        return "{% if " + e + " %}T{% else %}F{% endif %}"
    if k == 2:
        return "{% set v = " + e + " %}{{ v }}|{{ v | length if v is iterable else v }}"
    return "{{ " + fuzz_expr(r) + " }}"


def cmd_fuzz(args):
    r = random.Random(args.seed)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.count):
            src = fuzz_template(r)
            want, werr = py_render(src, [], None, FUZZ_CTX, False)
            got, gerr = pg_render(args.pagoda, tmp, src, [], None, FUZZ_CTX, False)
            if (werr is None) == (gerr is None) and (werr is not None or want == got):
                continue
            if (want and "<generator object" in want) or (werr and "generator" in werr):
                continue  # pagoda prints generators without an address
            bad += 1
            print(f"{src}\n  python: {werr or repr(want)}\n  pagoda: {gerr or repr(got)}")
    print(f"{args.count - bad}/{args.count} agree")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pagoda", default="build/pagoda")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("templates")
    t.add_argument("names", nargs="*")
    f = sub.add_parser("fuzz")
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--count", type=int, default=300)
    args = ap.parse_args()
    sys.exit(cmd_templates(args) if args.cmd == "templates" else cmd_fuzz(args))


if __name__ == "__main__":
    main()
