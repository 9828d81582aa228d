#!/usr/bin/env python3
"""Write a "scripted" GPT-OSS model: greedy decoding after any prompt emits one
fixed harmony tool call, so the server's tool-call path can be tested end to
end with the official openai client (a random model never writes one).

usage: scripted_gpt_oss.py SRC_HF_DIR OUT_DIR [final]

SRC_HF_DIR is the gpt-oss-tiny oracle (../shared/assets/oracles/gpt-oss-tiny/hf):
its config and byte-level BPE tokenizer are kept; four non-special added
tokens make each piece of the call one token. The weights make a bigram
model: every attention and expert weight and bias is zero, so the residual
stream is the token's embedding; script token i embeds as the basis vector
e_i (every other token as e_0) and the lm_head row of the token that must
follow it is 10 e_i. After RMSNorm the follower's logit is 80 and every other
logit 0, so after any prompt the model writes

  <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>
  {"city": "Paris"}<|call|>

and stops (<|call|> ends a harmony turn). With `final` the model answers
in the final channel instead,

  <|channel|>final<|message|>{"city": "Paris"}<|return|>

(structured outputs constrain the content after <|channel|>final<|message|>).
Standard library only.
"""
import json
import os
import shutil
import struct
import sys

PIECES = ["commentary", " to=functions.get_weather", "json", '{"city": "Paris"}']
FINAL_PIECES = ["final", '{"city": "Paris"}']


def main():
    src, out = sys.argv[1], sys.argv[2]
    final = len(sys.argv) > 3 and sys.argv[3] == "final"
    pieces = FINAL_PIECES if final else PIECES
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["num_hidden_layers"] = 1
    cfg["layer_types"] = ["full_attention"]
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    for f in ("tokenizer_config.json", "generation_config.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), os.path.join(out, f))
    tok = json.load(open(os.path.join(src, "tokenizer.json")))
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    next_id = max([t["id"] for t in tok["added_tokens"]] + list(tok["model"]["vocab"].values())) + 1
    ids = {}
    for p in pieces:
        ids[p] = next_id
        tok["added_tokens"].append({"id": next_id, "content": p, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": False})
        next_id += 1
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))
    space = tok["model"]["vocab"]["\u0120"]  # byte-level BPE's " "
    if final:
        script = [special["<|channel|>"], ids["final"], special["<|message|>"],
                  ids['{"city": "Paris"}'], special["<|return|>"]]
    else:
        script = [special["<|channel|>"], ids["commentary"], ids[" to=functions.get_weather"],
                  space, special["<|constrain|>"], ids["json"], special["<|message|>"],
                  ids['{"city": "Paris"}'], special["<|call|>"]]
    assert len(set(script)) == len(script)

    V, H = cfg["vocab_size"], cfg["hidden_size"]
    assert next_id <= V and len(script) < H
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    E, I = cfg["num_local_experts"], cfg["intermediate_size"]
    embed = [[0.0] * H for _ in range(V)]
    head = [[0.0] * H for _ in range(V)]
    dim = {t: i + 1 for i, t in enumerate(script)}  # script token -> its basis vector
    for t in range(V):
        embed[t][dim.get(t, 0)] = 1.0
    head[script[0]][0] = 10.0  # any other token -> <|channel|>
    for a, b in zip(script, script[1:]):
        head[b][dim[a]] = 10.0

    L = "model.layers.0."
    zeros = lambda *shape: (shape, None)
    tensors = {
        "model.embed_tokens.weight": ((V, H), embed),
        "lm_head.weight": ((V, H), head),
        "model.norm.weight": ((H,), [1.0] * H),
        L + "input_layernorm.weight": ((H,), [1.0] * H),
        L + "post_attention_layernorm.weight": ((H,), [1.0] * H),
        L + "self_attn.q_proj.weight": zeros(nh * hd, H),
        L + "self_attn.q_proj.bias": zeros(nh * hd),
        L + "self_attn.k_proj.weight": zeros(nkv * hd, H),
        L + "self_attn.k_proj.bias": zeros(nkv * hd),
        L + "self_attn.v_proj.weight": zeros(nkv * hd, H),
        L + "self_attn.v_proj.bias": zeros(nkv * hd),
        L + "self_attn.o_proj.weight": zeros(H, nh * hd),
        L + "self_attn.o_proj.bias": zeros(H),
        L + "self_attn.sinks": zeros(nh),
        L + "mlp.router.weight": zeros(E, H),
        L + "mlp.router.bias": zeros(E),
        L + "mlp.experts.gate_up_proj": zeros(E, H, 2 * I),
        L + "mlp.experts.gate_up_proj_bias": zeros(E, 2 * I),
        L + "mlp.experts.down_proj": zeros(E, I, H),
        L + "mlp.experts.down_proj_bias": zeros(E, H),
    }
    header, off, blobs = {}, 0, []
    for name, (shape, rows) in tensors.items():
        n = 1
        for s in shape:
            n *= s
        if rows is None:
            data = bytes(4 * n)
        elif isinstance(rows[0], list):
            data = b"".join(struct.pack("<%df" % len(r), *r) for r in rows)
        else:
            data = struct.pack("<%df" % n, *rows)
        assert len(data) == 4 * n, name
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


if __name__ == "__main__":
    main()
