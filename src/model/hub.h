/* Models from the Hugging Face hub: repo ids ("org/name") resolved through
 * the local HF cache and, where the network allows, downloaded into it with
 * libcurl.
 *
 * The cache layout is huggingface_hub's (file_download.py, constants.py), so
 * Python and pagoda share one cache:
 *
 *   $HF_HUB_CACHE/models--org--name/
 *     blobs/<etag>             file contents, named by the hub's ETag: the
 *                              sha256 of an LFS file (X-Linked-Etag), the git
 *                              blob sha1 of a small file (ETag)
 *     blobs/<etag>.incomplete  a transfer in progress (resumed with Range)
 *     snapshots/<commit>/<file>  relative symlink to ../../blobs/<etag>
 *     refs/<revision>          the commit hash a branch or tag pointed to
 *   $HF_HUB_CACHE/.locks/models--org--name/<etag>.lock   flock per blob
 *
 * Hub requests: GET {endpoint}/api/models/{repo}/revision/{revision}
 * (the commit "sha" and the "siblings" file list), HEAD
 * {endpoint}/{repo}/resolve/{commit}/{file} (X-Linked-Etag / ETag,
 * X-Linked-Size / Content-Length; relative redirects followed, the
 * absolute one to the LFS CDN not), GET of the same URL following redirects
 * to the CDN. Authorization: Bearer $HF_TOKEN (never sent to another host).
 * The answers are parsed and checked by model/hub_parse.h.
 *
 * Environment (huggingface_hub's): HF_ENDPOINT (default https://huggingface.co),
 * HF_HOME (default $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface),
 * HF_HUB_CACHE (default $HF_HOME/hub), HF_TOKEN (else the file
 * $HF_TOKEN_PATH, else $HF_HOME/token), HF_HUB_OFFLINE (1/ON/YES/TRUE: the
 * cache only), HF_HUB_DISABLE_PROGRESS_BARS. */
#ifndef PAGODA_MODEL_HUB_H
#define PAGODA_MODEL_HUB_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "model/hub_parse.h"

/* A model on the hub: "org/name[@REVISION][:TAG]". TAG is a GGUF quant
 * ("Q4_0": the one .gguf file whose name contains it, case-insensitively) or
 * a .gguf file name in the repo; without TAG the safetensors model. */
typedef struct pg_hub_ref {
    char repo[192];     /* "org/name" */
    char revision[256]; /* branch, tag, commit or "refs/pr/N"; "main" unless given */
    char tag[256];      /* "" = safetensors model */
} pg_hub_ref;

/* Parse MODEL as a hub reference. Returns false when it is not one (a path,
 * an empty or malformed name, a part too long); nothing is recorded then.
 * Repo names are [A-Za-z0-9._-]+ per part, not "." or "..", as the hub's. */
bool pg_hub_parse_ref(const char *model, pg_hub_ref *out);

/* MODEL with --revision / --gguf-file folded in ("org/name@R:FILE"), for
 * the options of generate / serve / bench. NULL or "" leaves a part as MODEL
 * has it. An existing path, or no options, is copied unchanged.
 * Errors: INVALID_ARG (MODEL is no repo id but options were given, or MODEL
 * names another revision / tag than the option, or `cap` too small). */
pagoda_status pg_hub_fold_options(const char *model, const char *revision, const char *gguf_file,
                                  char *out, size_t cap);

/* The hub cache directory ($HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub). */
void pg_hub_cache_dir(char *out, size_t cap);

typedef struct pg_hub_options {
    /* fnmatch(3) patterns (huggingface_hub's allow_patterns: '*' also
     * matches '/'): download the repo files matching any, instead of the
     * files a model needs. */
    const char *const *include;
    size_t n_include;
    /* Ask the hub even if the cache holds a complete snapshot (`pagoda
     * download`); otherwise a complete cached snapshot is used as is. */
    bool refresh;
} pg_hub_options;

/* Resolve REF to a local path, downloading what the cache lacks (unless
 * HF_HUB_OFFLINE). `out` gets the snapshot directory, or the GGUF file in it
 * when REF names a GGUF (a tag, or a repo holding one GGUF and no
 * safetensors); *is_gguf tells which (may be NULL). `opt` may be NULL.
 * The files of a safetensors model: config.json, generation_config.json,
 * tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * chat_template.jinja / .json, preprocessor_config.json, *.safetensors and
 * the index. LFS files are checked against their sha256, small files against
 * their git blob sha1; a mismatch removes the download. Each file is linked
 * into the snapshot only once complete and verified; refs/<revision> is
 * written only once every file is there. Progress goes to stderr (a bar on a
 * terminal, a line every few seconds otherwise).
 * Errors: NOT_FOUND (repo, revision, file or tag unknown; not cached in
 * offline mode), INVALID_ARG (401/403: gated or private, token missing or
 * rejected), IO (network, disk; an interrupted transfer keeps its
 * .incomplete file for the next run), FORMAT (checksum or size mismatch,
 * bad hub answer). One line naming the repo and the file. */
pagoda_status pg_hub_resolve(const pg_hub_ref *ref, const pg_hub_options *opt, char *out,
                             size_t cap, bool *is_gguf);

/* Helpers exposed for tests. */
/* pg_hub_normalize_etag, pg_hub_safe_filename: model/hub_parse.h. */
/* True when a safetensors model needs repo file NAME (the list above). */
bool pg_hub_wanted_file(const char *name);
/* True when a .gguf NAME matches TAG: the file name itself (with or without
 * a directory) or, for a quant tag, contains it between separators
 * ("x-Q4_0.gguf" matches "q4_0"; "x-Q4_0_4_4.gguf" does not). */
bool pg_hub_gguf_matches(const char *name, const char *tag);

#endif
