#!/usr/bin/env python3
"""Known answers of pagoda's prefix-cache block hash (src/engine/block_hash.h),
computed independently of the C code: python3's hashlib for SHA-256 and the
xxhsum command (Debian package `xxhash`, `xxhsum -H2`: XXH3-128, canonical
big-endian hex) for xxhash.

    python3 tests/data/block_hash_kat.py

prints the table that tests/test_block_pool.c (test_block_hash_known_answers)
holds. The byte string of one block is
    parent (32 bytes; zeros for the first block) | u32 LE num_tokens |
    num_tokens x i32 LE token ids | u64 LE extra_len | extra bytes
and an xxhash block hash is XXH3-128's 16 canonical bytes followed by 16 zeros.
"""
import hashlib
import struct
import subprocess


def block_bytes(parent, tokens, extra):
    return (parent + struct.pack('<I', len(tokens)) +
            b''.join(struct.pack('<i', t) for t in tokens) +
            struct.pack('<Q', len(extra)) + extra)


def sha256(data):
    return hashlib.sha256(data).digest()


def xxh3_128(data):
    out = subprocess.run(['xxhsum', '-H2', '-'], input=data, capture_output=True,
                         check=True).stdout.decode()
    return bytes.fromhex(out.split()[0]) + bytes(16)


ROOT = bytes(32)
# (name, parent case index or None, tokens, extra)
CASES = [
    ('first block, 4 tokens', None, [1, 2, 3, 4], b''),
    ('its child', 0, [5, 6, 7, 8], b''),
    ('first block, salt "tenant-a"', None, [1, 2, 3, 4], b'tenant-a'),
    ('child of the salted block', 2, [5, 6, 7, 8], b''),
    ('16 tokens incl. large ids', None,
     [0, 1, 255, 256, 65535, 65536, 151643, 2147483647] + list(range(1000, 1008)), b''),
    ('no tokens, salt of 40 bytes', None, [], b'0123456789abcdefghijklmnopqrstuvwxyzABCD'),
    ('300 tokens (i * 7919 % 151936) after case 1', 1, [i * 7919 % 151936 for i in range(300)],
     b''),
]


def main():
    for algo, fn in (('SHA256', sha256), ('XXHASH', xxh3_128)):
        got = []
        for name, parent, tokens, extra in CASES:
            p = ROOT if parent is None else got[parent]
            got.append(fn(block_bytes(p, tokens, extra)))
            print(f'            /* {algo}: {name} */')
            print(f'            "{got[-1].hex()}",')


if __name__ == '__main__':
    main()
