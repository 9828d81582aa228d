/* Internal representation shared by the tokenizer loaders (tokenizer.json,
 * GGUF vocab) and the encode/decode pipeline. Mirrors the stages of Hugging
 * Face `tokenizers`: added tokens -> normalizer -> pre-tokenizer -> model
 * (BPE) -> post-processor; decoding runs the decoder chain. */
#ifndef PAGODA_TOKENIZER_TOK_INTERNAL_H
#define PAGODA_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok_map.h"
#include "tokenizer/tokenizer.h"

/* ---- normalizers ---- */
typedef enum {
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_LOWERCASE,
    NORM_PREPEND,   /* a = text to prepend */
    NORM_REPLACE,   /* a = pattern (string), b = content */
    NORM_STRIP,     /* left/right */
} tok_norm_kind;

typedef struct tok_norm {
    tok_norm_kind kind;
    pcre2_code *re; /* Replace with a Regex pattern (else a is the literal) */
    char *a, *b;
    size_t alen, blen;
    bool left, right;
} tok_norm;

/* ---- pre-tokenizers ---- */
typedef enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE, PRE_DIGITS } tok_pre_kind;
typedef enum {
    SPLIT_ISOLATED,
    SPLIT_REMOVED,
    SPLIT_MERGED_PREV,
    SPLIT_MERGED_NEXT,
    SPLIT_CONTIGUOUS
} tok_split_behavior;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } tok_prepend_scheme;

typedef struct tok_pre {
    tok_pre_kind kind;
    pcre2_code *re;      /* Split (regex or escaped string), ByteLevel use_regex */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space; /* ByteLevel */
    char repl[8];          /* Metaspace replacement (UTF-8) */
    size_t repl_len;
    tok_prepend_scheme prepend; /* Metaspace */
    bool split;                 /* Metaspace */
    bool individual_digits;     /* Digits */
} tok_pre;

/* ---- decoders ---- */
typedef enum {
    DEC_BYTELEVEL,
    DEC_METASPACE,
    DEC_BYTEFALLBACK,
    DEC_FUSE,
    DEC_STRIP,
    DEC_REPLACE
} tok_dec_kind;

typedef struct tok_dec {
    tok_dec_kind kind;
    char *a, *b; /* Replace: pattern, content; Strip: content char; Metaspace: replacement */
    size_t alen, blen;
    int start, stop;            /* Strip */
    tok_prepend_scheme prepend; /* Metaspace */
} tok_dec;

typedef struct tok_added {
    const char *content; /* == tok->tokens[id] unless overridden */
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

#define TOK_MAX_STAGES 16

struct pg_tokenizer {
    /* vocab */
    int32_t n_vocab;
    char **tokens;          /* id -> text as stored in the vocab (NUL terminated) */
    uint32_t *token_lens;
    uint8_t *is_special;    /* per id: added special / control token */
    uint8_t *raw_decode;    /* per id: 1 = decoders leave its text as is (GGUF user-defined /
                               control); 2 = it decodes to nothing (GGUF UNUSED: padding) */
    char **bytes;           /* id -> decoded bytes (for token_bytes / decode) */
    uint32_t *bytes_lens;
    pg_strmap vocab;

    /* BPE model */
    pg_pairmap merges;
    bool byte_level;        /* symbols start as byte-level chars (GPT-2 mapping) */
    bool byte_fallback;
    bool ignore_merges;
    bool fuse_unk;
    /* No pre-tokenizer, SentencePiece-style: no vocab piece has a '▁' right
     * after another character, so no merge crosses the start of a "▁word"
     * and the text can be cut there before BPE (same result, far less work). */
    bool split_at_mark;
    int32_t unk_id;
    int32_t byte_char_id[256]; /* byte-level: vocab id of the char standing for byte b */
    int32_t byte_tok_id[256];  /* byte fallback: id of "<0xXX>" or -1 */
    int32_t ascii_id[128];     /* vocab id of each 1-byte ASCII char (or -1) */
    char byte_char[256][2];    /* UTF-8 of the byte-level char for byte b */
    uint8_t byte_char_len[256];

    /* pipeline */
    tok_norm norms[TOK_MAX_STAGES];
    int n_norms;
    tok_pre pres[TOK_MAX_STAGES];
    int n_pres;
    tok_dec decs[TOK_MAX_STAGES];
    int n_decs;

    /* added tokens, sorted by length (longest first) */
    tok_added *added;
    int n_added;
    uint8_t added_first_byte[256]; /* 1 if some added token starts with byte b */

    /* post-processing for add_special */
    int32_t prefix_ids[4];
    int n_prefix;
    int32_t suffix_ids[4];
    int n_suffix;

    int32_t bos_id, eos_id, pad_id;
    char *chat_template;

    /* string storage owned by the tokenizer */
    char **owned;
    size_t n_owned, owned_cap;
};

/* Allocation helpers for the loaders. */
pg_tokenizer *pg_tok_new(void);
/* Copy `len` bytes into tokenizer-owned storage (NUL terminated). NULL on OOM. */
char *pg_tok_strdup(pg_tokenizer *t, const char *s, size_t len);
/* Allocate per-id arrays for n tokens. */
pagoda_status pg_tok_alloc_vocab(pg_tokenizer *t, int32_t n);
/* A map of the lengths tokens[0..n) have: set[k] != 0 iff some token is k
 * bytes long (*max_len: the longest). Splitting a piece into two vocab
 * tokens needs both lengths in it; without the filter every split of a
 * piece hashed both halves, O(len^2): one corrupt 100 kB token took 45 s to
 * load. NULL on OOM (the caller's error). */
uint8_t *pg_tok_length_set(const pg_tokenizer *t, int32_t n, size_t *max_len);
/* After tokens[], added[] and decoders are set: build the vocab map,
 * byte tables, per-token decoded bytes and the added-token index. */
pagoda_status pg_tok_finish(pg_tokenizer *t, const char *what);

/* Compile a regex (UTF + UCP, JIT when available). `literal` escapes it. */
pagoda_status pg_tok_compile(const char *pattern, size_t len, bool literal, pcre2_code **out,
                             const char *what);

/* GPT-2 byte <-> unicode mapping (bytes_to_unicode in HF / OpenAI). */
uint32_t pg_tok_byte_to_cp(uint8_t b);
/* -1 if cp is not one of the 256 mapped code points. */
int pg_tok_cp_to_byte(uint32_t cp);

/* Loaders. */
pagoda_status pg_tok_load_json(const char *dir, pg_tokenizer **out);
pagoda_status pg_tok_load_gguf(const char *path, pg_tokenizer **out);

/* GPT-2 pre-tokenizer regex (ByteLevel use_regex). */
extern const char PG_TOK_GPT2_REGEX[];

#endif
