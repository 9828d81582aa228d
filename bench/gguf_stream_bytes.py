#!/usr/bin/env python3
"""Bytes of a GGUF file's weights that one decode step streams, as the file stores them.

Every tensor's stored size (ggml block sizes), minus `token_embd.weight` when the file
has a separate `output.weight` (the embedding is then only looked up, one row per token;
tied, it is also the lm_head and streamed in full). This is the numerator of issue 23's
bandwidth bound: bound (tokens/s) = read bandwidth / these bytes. The KV cache and
activations are not counted (small next to the weights at short contexts).

usage: gguf_stream_bytes.py FILE.gguf [-v]   prints the byte count (-v: per-type totals too)
Errors: a file that is not GGUF v2/v3, or a tensor type not in the table, exits 1 naming it."""
import struct
import sys

# ggml_type id -> (name, block elements, block bytes), from ggml.h / ggml.c's type traits
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 30: ("BF16", 1, 2),
    39: ("MXFP4", 32, 17),
}
# GGUF metadata value types -> struct format (8: string, 9: array handled apart)
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
          12: "d"}


def fail(msg):
    print(f"gguf_stream_bytes: {msg}", file=sys.stderr)
    sys.exit(1)


class Reader:
    def __init__(self, f):
        self.f = f

    def get(self, fmt):
        n = struct.calcsize("<" + fmt)
        b = self.f.read(n)
        if len(b) != n:
            fail("truncated file")
        return struct.unpack("<" + fmt, b)[0]

    def string(self):
        return self.f.read(self.get("Q")).decode("utf-8", "replace")

    def skip_value(self, t):
        if t in SCALAR:
            self.get(SCALAR[t])
        elif t == 8:
            self.f.seek(self.get("Q"), 1)
        elif t == 9:
            et, n = self.get("I"), self.get("Q")
            if et in SCALAR:
                self.f.seek(n * struct.calcsize("<" + SCALAR[et]), 1)
            else:
                for _ in range(n):
                    self.skip_value(et)
        else:
            fail(f"unknown metadata type {t}")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], "rb") as f:
        r = Reader(f)
        if f.read(4) != b"GGUF" or r.get("I") not in (2, 3):
            fail(f"{sys.argv[1]}: not a GGUF v2/v3 file")
        n_tensors, n_kv = r.get("Q"), r.get("Q")
        for _ in range(n_kv):
            r.string()
            r.skip_value(r.get("I"))
        tensors = {}
        for _ in range(n_tensors):
            name = r.string()
            dims = [r.get("Q") for _ in range(r.get("I"))]
            t = r.get("I")
            r.get("Q")  # offset
            if t not in TYPES:
                fail(f"tensor '{name}' has unknown type id {t}")
            tname, be, bb = TYPES[t]
            n = 1
            for d in dims:
                n *= d
            tensors[name] = (tname, n // be * bb)
    if "output.weight" in tensors:
        tensors.pop("token_embd.weight", None)
    total = sum(b for _, b in tensors.values())
    print(total)
    if "-v" in sys.argv[2:]:
        by = {}
        for tname, b in tensors.values():
            by[tname] = by.get(tname, 0) + b
        for tname, b in sorted(by.items()):
            print(f"  {tname}\t{b}", file=sys.stderr)


main()
