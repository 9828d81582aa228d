#!/usr/bin/env python3
"""Multi-turn chat benchmark: time to first token of each turn when every
turn appends to the previous conversation (the prompt of turn k is the
prompt of turn k-1, its completion and a new user message).

Runs against an OpenAI-compatible server already listening (pagoda serve or
llama-server) through /v1/completions with streaming, greedy, a fixed
number of output tokens per turn. Conversations run one after another (one
client), so TTFT is the prefill of what the server has to recompute: with a
working prefix cache only the new message, without one the whole history.

  bench/multiturn.py --url http://127.0.0.1:8000 --conversations 4 --turns 6 \
      --user-tokens 96 --output-tokens 32 [--json out.json] [--label pagoda]

Prints per-turn medians and the median TTFT of turns 2+ (the figure
docs/PERFORMANCE.md compares). Standard library only.
"""
import argparse
import json
import random
import statistics
import sys
import time
import urllib.error
import urllib.request

WORDS = ("the a of and to in is was he she it they said one two time day way little big "
         "cat dog tree house river sun moon story friend happy sad ran saw went came looked "
         "red blue green small old new good bad long short").split()


def user_text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def stream_completion(url, model, prompt, max_tokens, timeout):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft = None
    text = []
    try:
        r = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        sys.exit("request failed: HTTP %d: %s" % (e.code, e.read().decode("utf-8", "replace")))
    with r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            ch = ev.get("choices") or []
            if not ch:
                continue
            t = ch[0].get("text") or ""
            if t and ttft is None:
                ttft = time.perf_counter() - t0
            text.append(t)
    total = time.perf_counter() - t0
    return (ttft if ttft is not None else total), total, "".join(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", help="model id (default: the first of /v1/models)")
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--user-words", type=int, default=80, help="words per user message")
    ap.add_argument("--system-words", type=int, default=0,
                    help="words of a system prompt each conversation starts with (its own text)")
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if not a.model:
        with urllib.request.urlopen(a.url + "/v1/models", timeout=60) as r:
            a.model = json.load(r)["data"][0]["id"]
    rng = random.Random(a.seed)
    per_turn = [[] for _ in range(a.turns)]
    for c in range(a.conversations):
        prompt = "Conversation %d.\n" % c
        if a.system_words:
            prompt += "System: " + user_text(rng, a.system_words) + "\n"
        for t in range(a.turns):
            prompt += "User: " + user_text(rng, a.user_words) + "\nAssistant:"
            ttft, total, text = stream_completion(a.url, a.model, prompt, a.output_tokens,
                                                  a.timeout)
            per_turn[t].append(ttft)
            prompt += text + "\n"
            print("conv %d turn %d: prompt %d chars, TTFT %.1f ms, total %.1f ms" %
                  (c, t + 1, len(prompt), ttft * 1e3, total * 1e3), file=sys.stderr)
    later = [x for t in per_turn[1:] for x in t]
    res = {
        "label": a.label,
        "url": a.url,
        "conversations": a.conversations,
        "turns": a.turns,
        "user_words": a.user_words,
        "system_words": a.system_words,
        "output_tokens": a.output_tokens,
        "ttft_ms_median_per_turn": [statistics.median(t) * 1e3 for t in per_turn],
        "ttft_ms_median_turn1": statistics.median(per_turn[0]) * 1e3,
        "ttft_ms_median_turns2plus": statistics.median(later) * 1e3 if later else None,
    }
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
