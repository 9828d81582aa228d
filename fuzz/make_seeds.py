#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets in fuzz/ (docs/FUZZING.md).

    make_seeds.py OUT_DIR ASSETS_DIR SOURCE_DIR GEN_MODEL

Writes OUT_DIR/<target>/<name> for every target. Seeds are made at run
time: small models written by gen_model (the random-model generator),
headers, prefixes and excerpts of the files in ../shared/assets (never
copied into the repository), and tiny hand-written inputs. A seed whose
source is missing (an asset, ffmpeg) is skipped with a note on stderr.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

OUT, ASSETS, SRC, GEN_MODEL = sys.argv[1:5]


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def asset(rel, optional=False):
    p = os.path.join(ASSETS, rel)
    if not os.path.exists(p):
        if optional:
            return None
        print(f"make_seeds: {p} missing, its seeds skipped", file=sys.stderr)
        return None
    with open(p, "rb") as f:
        return f.read()


HF_DIRS = ["llm/stories260K-hf", "llm/stories260K-hf-bf16"] + [
    f"oracles/{m}/hf" for m in
    ["gpt-oss-tiny", "qwen3-dense-tiny", "qwen3-moe-tiny", "qwen35-tiny", "whisper-tiny-random"]]


def safetensors_small(raw, keep=6):
    """A valid safetensors file with the header's first `keep` tensors, each
    reshaped to at most 2x3 elements (zeros), and its __metadata__."""
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out, off = {}, 0
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "I32": 4, "I64": 8, "F64": 8,
             "I16": 2, "BOOL": 1}
    for k, v in header.items():
        if k == "__metadata__":
            out[k] = v
            continue
        if len(out) > keep:
            break
        shape = [min(d, 3) for d in v["shape"]][:2]
        cnt = 1
        for d in shape:
            cnt *= d
        nb = cnt * sizes.get(v["dtype"], 4)
        out[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(out, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"\0" * off


def gguf_prefix(raw):
    """The header, metadata and tensor table of a GGUF (v2/v3), without the
    data section: a seed that reaches every check before the data."""
    pos = 24
    n_tensors, n_kv = struct.unpack("<QQ", raw[8:24])

    def string(p):
        n = struct.unpack("<Q", raw[p:p + 8])[0]
        return p + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(p, t):
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack("<IQ", raw[p:p + 12])
            p += 12
            if et == 8:
                for _ in range(n):
                    p = string(p)
                return p
            return p + n * sizes[et]
        return p + sizes[t]

    for _ in range(n_kv):
        pos = string(pos)
        t = struct.unpack("<I", raw[pos:pos + 4])[0]
        pos = value(pos + 4, t)
    for _ in range(n_tensors):
        pos = string(pos)
        nd = struct.unpack("<I", raw[pos:pos + 4])[0]
        pos += 4 + 8 * nd + 4 + 8
    return raw[:pos]


def seeds_models():
    tmp = tempfile.mkdtemp(prefix="pagoda-seeds-")
    try:
        shapes = ["--hidden", "16", "--layers", "2", "--heads", "2", "--kv-heads", "1", "--ffn",
                  "32", "--vocab", "48"]
        for arch, dtype in [("llama", "f32"), ("llama", "q8_0"), ("qwen3", "q4_0"),
                            ("qwen3", "bf16"), ("qwen3_moe", "f16"), ("gpt_oss", "f32"),
                            ("qwen3_5", "f32")]:
            g = os.path.join(tmp, f"{arch}-{dtype}.gguf")
            h = os.path.join(tmp, f"{arch}-{dtype}")
            r = subprocess.run([GEN_MODEL, "--arch", arch, "--gguf", g, "--hf", h, "--dtype",
                                dtype if dtype != "q4_0" and dtype != "q8_0" else "f32"]
                               + shapes, capture_output=True)
            if r.returncode != 0:
                print(f"make_seeds: gen_model {arch}: {r.stderr.decode()[-200:]}",
                      file=sys.stderr)
                continue
            if dtype in ("q8_0", "q4_0"):
                subprocess.run([GEN_MODEL, "--arch", arch, "--gguf", g, "--dtype", dtype]
                               + shapes, capture_output=True, check=True)
            with open(g, "rb") as f:
                put("fuzz_gguf", f"{arch}-{dtype}.gguf", f.read())
            with open(os.path.join(h, "model.safetensors"), "rb") as f:
                put("fuzz_safetensors", f"gen-{arch}-{dtype}", f.read())
            with open(os.path.join(h, "config.json"), "rb") as f:
                cfg = f.read()
            gen = b""
            gp = os.path.join(h, "generation_config.json")
            if os.path.exists(gp):
                with open(gp, "rb") as f:
                    gen = f.read()
            put("fuzz_hf_config", f"gen-{arch}-{dtype}", cfg + b"\0" + gen)
    finally:
        shutil.rmtree(tmp)
    for rel in ["oracles/qwen3-dense-tiny/model.gguf", "oracles/gpt-oss-tiny/model.gguf",
                "llm/llama2c/stories260K-q4_0.gguf"]:
        raw = asset(rel)
        if raw:
            put("fuzz_gguf", rel.replace("/", "_") + ".prefix", gguf_prefix(raw))


def seeds_hf():
    for d in HF_DIRS:
        name = d.replace("/", "_")
        cfg = asset(d + "/config.json")
        gen = asset(d + "/generation_config.json") or b""
        if cfg:
            put("fuzz_hf_config", name, cfg + b"\0" + gen)
        st = asset(d + "/model.safetensors")
        if st:
            put("fuzz_safetensors", name, safetensors_small(st))
        tok = asset(d + "/tokenizer.json", optional=True)  # whisper-tiny-random has none
        tcfg = asset(d + "/tokenizer_config.json", optional=True)
        if tok:
            put("fuzz_tokenizer_json", name, tok + (b"\0" + tcfg if tcfg else b""))
        if tcfg:
            put("fuzz_hf_config", name + "-tokenizer_config", tcfg)
    put("fuzz_hf_config", "ct", json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 48,
        "quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                "ignore": ["lm_head", "re:.*mlp.*"], "config_groups": {
                                    "group_0": {"targets": ["Linear"], "weights": {
                                        "num_bits": 4, "type": "int", "symmetric": True,
                                        "strategy": "group", "group_size": 32}}}}}))
    st = asset("llm/stories260K-hf/model.safetensors")
    if st:
        n = struct.unpack("<Q", st[:8])[0]
        names = [k for k in json.loads(st[8:8 + n]) if k != "__metadata__"]
        one = "model-00001-of-00002.safetensors"
        two = "model-00002-of-00002.safetensors"
        put("fuzz_safetensors_index", "one-shard", json.dumps(
            {"metadata": {"total_size": len(st)}, "weight_map": {k: one for k in names}}))
        put("fuzz_safetensors_index", "two-shards", json.dumps(
            {"metadata": {"total_size": len(st)},
             "weight_map": {k: (one if i % 2 else two) for i, k in enumerate(names)}}))


def seeds_tokenizers():
    for rel in ["whisper/gpt2.tiktoken", "whisper/multilingual.tiktoken"]:
        raw = asset(rel)
        if raw:
            lines = raw.split(b"\n")
            put("fuzz_tiktoken", os.path.basename(rel) + ".300", bytes([99]) +
                b"\n".join(lines[:300]) + b"\n")
            put("fuzz_tiktoken", os.path.basename(rel) + ".260", bytes([0]) +
                b"\n".join(lines[:260]) + b"\n")


def seeds_templates():
    d = os.path.join(ASSETS, "chat-templates")
    if os.path.isdir(d):
        for f in sorted(os.listdir(d)):
            if f.endswith(".jinja"):
                with open(os.path.join(d, f), "rb") as fh:
                    put("fuzz_jinja", f, fh.read())
    with open(os.path.join(SRC, "tests/data/chat_simple.jinja"), "rb") as fh:
        simple = fh.read()
    put("fuzz_jinja", "simple-with-messages", simple + b"\0" + json.dumps(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]).encode())
    put("fuzz_jinja", "macros", "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}"
        "{% endmacro %}{% for m in messages %}{{ f(3) }}{{ m.role | upper }}{% set ns = "
        "namespace(x=1) %}{% set ns.x = ns.x * 2 %}{{ ns.x }}{{ m | tojson(indent=2) }}"
        "{% endfor %}{{ raise_exception('x') if false }}{{ strftime_now('%Y') }}")
    put("fuzz_jinja", "loops", "{% for i in range(10) %}{% for j in range(i) %}{{ loop.index }}"
        "{% if loop.last %}{% break %}{% endif %}{% endfor %}{% endfor %}{{ 'ab' * 3 }}"
        "{{ [1, 2, 3] | map('string') | join(',') }}{{ {'a': 1}.items() | list }}")


def seeds_requests():
    bodies = {
        0: [{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9,
             "seed": -3, "stop": ["\n"], "logprobs": 2, "echo": True, "n": 2,
             "logit_bias": {"5": -100}, "stream": True, "stream_options": {"include_usage": True}},
            {"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 1, "cache_salt": "a"},
            {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {
                "name": "n", "schema": {"type": "object", "properties": {
                    "a": {"type": "integer"}}, "required": ["a"]}}}},
            {"prompt": "x", "structured_outputs": {"regex": "[a-z]{2,5}"}},
            {"prompt": "x", "guided_choice": ["yes", "no"]},
            {"prompt": "x", "guided_grammar": "root ::= \"a\" | \"b\" root"}],
        1: [{"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
             "tools": [{"type": "function", "function": {"name": "f", "parameters": {
                 "type": "object", "properties": {"x": {"type": "string"}}}}}],
             "chat_template_kwargs": {"enable_thinking": False}, "max_completion_tokens": 8,
             "top_logprobs": 2, "logprobs": True, "reasoning_effort": "low"},
            {"messages": [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hel"}],
             "add_generation_prompt": False, "continue_final_message": True},
            {"messages": [{"role": "user", "content": "Hi"}],
             "response_format": {"type": "json_object"}}],
        2: [{"prompt": "Once upon a time", "return_token_strs": True},
            {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True}],
        3: [{"tokens": [1, 2, 3, 400], "model": "stories260K"}],
    }
    for ep, items in bodies.items():
        for i, b in enumerate(items):
            put("fuzz_request", f"ep{ep}-{i}", bytes([ep]) + json.dumps(b).encode())
    put("fuzz_request", "harmony-chat", bytes([5]) + json.dumps(
        {"messages": [{"role": "user", "content": "Hi"},
                      {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                       "function": {"name": "f", "arguments": "{}"}}]},
                      {"role": "tool", "tool_call_id": "c", "content": "ok"}]}).encode())


def seeds_streams():
    put("fuzz_bench_sse", "chunks", b"\x07" + b"".join(
        b'data: {"choices":[{"index":0,"text":"%d"}]}\r\n\r\n' % i for i in range(4)) +
        b'data: {"choices":[],"usage":{"completion_tokens":4,"prompt_tokens":3}}\n\n'
        b": comment\nevent: x\nid: 1\nretry: 5\ndata: [DONE]\n\n")
    put("fuzz_bench_sse", "multiline", b"\x00data:a\rdata:b\r\rdata\n\ndata: {\"error\":"
        b"{\"message\":\"boom\"}}\n\ndata: tail-without-blank-line")
    put("fuzz_bench_sse", "chat", b"\x03" + b"".join(
        b'data: {"choices":[{"index":0,"delta":{"content":"w%d"}}]}\n\n' % i for i in range(3)))
    for f in sorted(os.listdir(os.path.join(SRC, "tests/data/harmony"))):
        if f.endswith(".txt"):
            with open(os.path.join(SRC, "tests/data/harmony", f), "rb") as fh:
                text = fh.read()
            # the completion after the last "<|start|>assistant"
            cut = text.rfind(b"<|start|>assistant")
            put("fuzz_harmony", f, b"\x05" + (text[cut + 18:] if cut >= 0 else text))
    put("fuzz_harmony", "calls", b"\x02<|channel|>analysis<|message|>Need the tool.<|end|>"
        b"<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
        b"<|message|>{\"city\": \"Paris\"}<|call|>")
    put("fuzz_harmony", "final", b"\x00<|channel|>final<|message|>Caf\xc3\xa9 \xe4\xbd\xa0"
        b"<|return|>")


def seeds_hub():
    c40 = b"0123456789abcdef0123456789abcdef01234567"
    put("fuzz_hub", "info", b"\x00" + json.dumps(
        {"sha": c40.decode(), "siblings": [{"rfilename": n} for n in
         ["config.json", "model.safetensors", "sub/m-Q4_0.gguf", "../x", "/etc/passwd"]]}).encode())
    put("fuzz_hub", "error", b"\x02" + b'{"error":"Repository not found"}')
    le = lambda v: v.to_bytes(8, "little")
    put("fuzz_hub", "head-lfs", b"\x01" + le(0) + le(1 << 63) +
        b"HTTP/1.1 302 Found\r\nX-Repo-Commit: " + c40 + b"\r\nX-Linked-Etag: \"" + c40 + c40[:24] +
        b"\"\r\nX-Linked-Size: 123456\r\nLocation: https://cdn.example/x\r\n"
        b"Content-Length: 1089\r\n\r\n")
    put("fuzz_hub", "head-small", b"\x03" + le(0) + le(42) +
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /api/resolve/x\r\n\r\n"
        b"HTTP/2 200\r\nETag: W/\"" + c40 + b"\"\r\nContent-Length: 42\r\n\r\n")
    put("fuzz_hub", "resume", b"\x01" + le(100) + le(1000) +
        b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 100-999/1000\r\n"
        b"Content-Length: 900\r\n\r\n")
    put("fuzz_hub", "resume-star", b"\x01" + le(7) + le(1 << 63) +
        b"HTTP/1.1 206\r\nContent-Range: bytes 7-99/*\r\n\r\n")


def seeds_grammars():
    schemas = [
        ({"type": "object", "properties": {"name": {"type": "string", "minLength": 1,
          "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
          "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name"], "additionalProperties": False}, '{"name": "Al", "age": 3}'),
        ({"anyOf": [{"type": "number"}, {"type": "null"}, {"const": "x"}]}, "-1.5e3"),
        ({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
          "$ref": "#/$defs/node"}, '{"next": {"next": {}}}'),
        ({"type": "string", "pattern": "^[a-z]+[0-9]?$", "format": "date"}, '"2026-12-02"'),
        ({"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "string"},
          "minItems": 1}, '[true, "x"]'),
    ]
    for i, (s, sample) in enumerate(schemas):
        put("fuzz_json_schema", f"s{i}", json.dumps(s).encode() + b"\0" + sample.encode())
    regexes = [("[a-z]{2,5}@(foo|bar)\\.com", "ab@foo.com"), ("\\d+(\\.\\d*)?[eE]?", "12.5e"),
               ("(?:a|b)*c?[^x-z\\n]\\w\\s\\S", "ababcq_ z"), ("^\\u00e9.{0,3}$", "\xc3\xa9ab"),
               ("[\\p{L}]+|x+?", "xx")]
    for i, (r, sample) in enumerate(regexes):
        put("fuzz_regex", f"r{i}", r.encode() + b"\0" + sample.encode())
    grammars = [
        ('root ::= "{" ws pair ("," ws pair)* "}"\npair ::= [a-z]+ ":" ws value\n'
         'value ::= [0-9]+ | "\\"" [^"]* "\\""\nws ::= [ \\t\\n]*', '{a: 1, b: "x"}'),
        ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]{1,3} | "(" expr ")"',
         "(1+22)-3"),
        ('root ::= "\\u00e9" x? [^\\x00-\\x1f]\nx ::= "a"+ # comment', "\xc3\xa9aab"),
    ]
    for i, (g, sample) in enumerate(grammars):
        put("fuzz_ebnf", f"g{i}", g.encode() + b"\0" + sample.encode())


def seeds_audio():
    form = b""
    for key, fn, data in [("file", True, b"RIFF....WAVEfmt "), ("model", False, b"whisper-1"),
                          ("language", False, b"en"), ("response_format", False, b"verbose_json"),
                          ("temperature", False, b"0.2"),
                          ("timestamp_granularities[]", False, b"segment"),
                          ("seed", False, b"7"), ("top_p", False, b"0.9"),
                          ("max_completion_tokens", False, b"10"), ("stream", False, b"true")]:
        form += bytes([1 | 2 if fn else 0, len(key)]) + key.encode() + \
            struct.pack("<H", len(data)) + data
    put("fuzz_audio_form", "form", form)
    wav = os.path.join(ASSETS, "whisper/jfk.wav")
    if not os.path.exists(wav):
        return
    ff = shutil.which("ffmpeg")
    names = ["a.wav", "a.mp3", "a.flac", "a.ogg", "a.webm", "a.m4a", "a.opus"]
    tmp = tempfile.mkdtemp(prefix="pagoda-seeds-")
    try:
        for i, ext in enumerate(["wav", "mp3", "flac", "ogg", "webm", "m4a", "opus"]):
            out = os.path.join(tmp, "a." + ext)
            if not ff:
                break
            args = [ff, "-v", "error", "-y", "-t", "0.25", "-i", wav]
            if ext == "wav":
                args += ["-ar", "8000", "-ac", "2"]
            r = subprocess.run(args + [out], capture_output=True)
            if r.returncode == 0:
                with open(out, "rb") as f:
                    put("fuzz_audio_decode", "a." + ext, bytes([names.index("a." + ext)]) +
                        f.read())
    finally:
        shutil.rmtree(tmp)
    if not ff:
        print("make_seeds: ffmpeg missing, audio seeds are WAV only", file=sys.stderr)
        with open(wav, "rb") as f:
            put("fuzz_audio_decode", "jfk-cut.wav", b"\0" + f.read()[:8044])


seeds_models()
seeds_hf()
seeds_tokenizers()
seeds_templates()
seeds_requests()
seeds_streams()
seeds_hub()
seeds_grammars()
seeds_audio()
