#!/usr/bin/env python3
"""Transcription serving benchmark (issue 17's serving checks), against a
`pagoda serve CHAT_MODEL WHISPER_MODEL` already listening:

  1. sequential: N transcriptions of FILE one after another;
  2. concurrent: the same N at once (N client threads);
     -> audio seconds transcribed per wall second of each, and their ratio
        (concurrent / sequential: batching should make it >= 1);
  3. chat alone: a streamed chat completion of --chat-tokens tokens, TPOT =
     median time between its tokens;
  4. chat under load: the same chat while the N concurrent transcriptions run
     -> TPOT ratio (loaded / alone; the issue asks for <= 2).

  bench/transcribe_load.py --url http://127.0.0.1:8000 --whisper whisper-base \
      --chat llama-1b-q8_0.gguf --file jfk.wav --n 16 [--repeats 3] [--json out.json]

Each transcription is a multipart POST to /v1/audio/transcriptions with
response_format json and --temperature (default 0, the OpenAI API's default:
greedy, hotter retries on the reference's thresholds), as the openai client
sends it; both modes do the same work per file. Medians over --repeats runs,
alternating sequential and concurrent. Standard library only.
"""
import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request
import uuid
import wave


def multipart(fields, file_field, file_name, file_bytes):
    b = uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    parts.append(f'--{b}\r\nContent-Disposition: form-data; name="{file_field}"; '
                 f'filename="{file_name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                 .encode() + file_bytes + b"\r\n")
    parts.append(f"--{b}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={b}"


def transcribe(args, audio):
    body, ctype = multipart({"model": args.whisper, "response_format": "json",
                             "temperature": str(args.temperature)}, "file", "audio.wav", audio)
    req = urllib.request.Request(args.url + "/v1/audio/transcriptions", data=body,
                                 headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=args.timeout) as r:
        out = json.loads(r.read())
    if "text" not in out:
        raise RuntimeError(f"no text in {out}")


def run_transcriptions(args, audio, concurrent):
    errors = []

    def one():
        try:
            transcribe(args, audio)
        except Exception as e:  # noqa: BLE001 (report any failure)
            errors.append(str(e))

    t0 = time.monotonic()
    if concurrent:
        ts = [threading.Thread(target=one) for _ in range(args.n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    else:
        for _ in range(args.n):
            one()
    dt = time.monotonic() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} transcriptions failed: {errors[0]}")
    return dt


def chat_tpot(args):
    body = {"model": args.chat, "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": args.chat_tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    req = urllib.request.Request(args.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=args.timeout) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[5:])
            ch = ev.get("choices") or []
            if ch and (ch[0].get("delta") or {}).get("content"):
                times.append(time.monotonic())
    gaps = [b - a for a, b in zip(times, times[1:])]
    if len(gaps) < 4:
        raise RuntimeError(f"chat stream gave {len(times)} tokens")
    return statistics.median(gaps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--whisper", required=True, help="the Whisper model's name in /v1/models")
    ap.add_argument("--chat", required=True, help="the chat model's name in /v1/models")
    ap.add_argument("--file", required=True, help="a WAV file (its duration is read from it)")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--chat-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json")
    args = ap.parse_args()
    with wave.open(args.file) as w:
        seconds = w.getnframes() / w.getframerate()
    audio = open(args.file, "rb").read()
    total_audio = seconds * args.n

    transcribe(args, audio)  # warm up (weights paged in, workspace touched)
    chat_tpot(args)
    seq, conc, alone, loaded = [], [], [], []
    for r in range(args.repeats):
        seq.append(run_transcriptions(args, audio, False))
        conc.append(run_transcriptions(args, audio, True))
        alone.append(chat_tpot(args))
        # the chat while the concurrent transcriptions run (started just after them)
        res = {}
        th = threading.Thread(target=lambda: res.setdefault("t", run_transcriptions(args, audio,
                                                                                     True)))
        th.start()
        time.sleep(0.5)
        loaded.append(chat_tpot(args))
        th.join()
        print(f"run {r}: sequential {seq[-1]:.2f} s, concurrent {conc[-1]:.2f} s, chat TPOT alone "
              f"{alone[-1] * 1e3:.1f} ms, under load {loaded[-1] * 1e3:.1f} ms", flush=True)
    ms, mc = statistics.median(seq), statistics.median(conc)
    ta, tl = statistics.median(alone), statistics.median(loaded)
    out = {"n": args.n, "audio_seconds_each": seconds,
           "sequential_s": ms, "concurrent_s": mc,
           "sequential_audio_s_per_s": total_audio / ms, "concurrent_audio_s_per_s": total_audio / mc,
           "concurrent_vs_sequential": ms / mc,
           "chat_tpot_alone_ms": ta * 1e3, "chat_tpot_loaded_ms": tl * 1e3,
           "tpot_loaded_vs_alone": tl / ta}
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
