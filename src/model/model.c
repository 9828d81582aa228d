/* The model interface (see model.h): dispatch to the architecture's ops. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "dist/comm.h"
#include "model/arch.h"
#include "model/linear.h"
#include "model/pack_cache.h"

struct pg_model_workspace {
    const pg_model *model;
    void *impl;
};

void pg_model_options_default(pg_model_options *o) {
    memset(o, 0, sizeof *o);
    o->compute = PG_DTYPE_COUNT;
}

pagoda_status pg_model_load(const pg_model_source *src, const pg_model_options *o, pg_model **out) {
    *out = NULL;
    pg_model_options def;
    if (!o) {
        pg_model_options_default(&def);
        o = &def;
    }
    const pg_model_config *c = pg_model_source_config(src);
    const pg_arch *a = c->arch;
    if (!a) {
        char list[768];
        return pg_error(
            PAGODA_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (supported: %s)",
            pg_model_source_path(src), c->architecture, pg_model_supported(list, sizeof list));
    }
    if (o->tp_size > 1 || o->tp_rank != 0) {
        if (o->tp_size < 1 || o->tp_rank < 0 || o->tp_rank >= o->tp_size || !o->comm ||
            pg_comm_rank(o->comm) != o->tp_rank || pg_comm_size(o->comm) != o->tp_size)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "model: tensor-parallel rank %d of %d does not match its communicator",
                            o->tp_rank, o->tp_size);
        if (!a->tensor_parallel)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: tensor parallelism (--tensor-parallel-size %d) is not supported "
                            "for %s (supported: llama, qwen3, qwen3_moe, gpt_oss)",
                            pg_model_source_path(src), o->tp_size, a->name);
    }
    /* the packed-weight cache session: linear.c takes or records every
     * packed weight of this load (model/pack_cache.h) */
    long long total = 0;
    for (size_t i = 0; i < pg_model_source_n_tensors(src); i++) {
        const pg_tensor *t = pg_model_source_tensor_at(src, i);
        if (t->ndim == 2 || t->ndim == 3) total += (long long)t->nbytes; /* linear weights */
    }
    pg_linear_progress_begin(pg_model_source_path(src), total);
    pg_pack_cache *pc = pg_pack_cache_begin(src, o); /* (verifying a file counts as loading) */
    pagoda_status st = a->create(src, o, out);
    pg_pack_cache_end(pc, st == PAGODA_OK);
    pg_linear_progress_end(st == PAGODA_OK);
    return st;
}

void pg_model_free(pg_model *m) {
    if (m) m->ops->free(m);
}

pagoda_status pg_model_base_init(pg_model *m, const pg_model_ops *ops, const pg_model_source *src,
                                 const pg_model_options *o, int32_t num_layers) {
    const pg_model_config *c = pg_model_source_config(src);
    m->ops = ops;
    m->arch = c->arch;
    m->cfg = *c;
    m->compute = o->compute;
    m->max_context = c->max_position_embeddings;
    if (o->max_context > 0 && (m->max_context <= 0 || o->max_context < m->max_context))
        m->max_context = o->max_context;
    else if (o->max_context > m->max_context)
        PG_WARN("%s: max_model_len %d exceeds the model's max_position_embeddings %d: using %d",
                pg_model_source_path(src), o->max_context, m->max_context, m->max_context);
    if (m->max_context <= 0)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: max_position_embeddings is not set and no context limit was given",
                        pg_model_source_path(src));
    m->num_layers = num_layers;
    m->cache = calloc((size_t)(num_layers > 0 ? num_layers : 1), sizeof *m->cache);
    if (!m->cache) return pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
    return PAGODA_OK;
}

void pg_model_base_release(pg_model *m) {
    free(m->cache);
    m->cache = NULL;
}

const pg_model_config *pg_model_get_config(const pg_model *m) {
    return &m->cfg;
}
const char *pg_model_arch_name(const pg_model *m) {
    return m->arch ? m->arch->name : "?";
}
int32_t pg_model_max_context(const pg_model *m) {
    return m->max_context;
}
pg_dtype pg_model_compute_dtype(const pg_model *m) {
    return m->compute;
}
int32_t pg_model_num_layers(const pg_model *m) {
    return m->num_layers;
}
const pg_layer_cache_spec *pg_model_layer_cache(const pg_model *m, int32_t l) {
    return l >= 0 && l < m->num_layers ? &m->cache[l] : NULL;
}
size_t pg_model_weight_bytes_per_step(const pg_model *m) {
    return m->ops->weight_bytes_per_step(m);
}

pagoda_status pg_model_workspace_create(const pg_model *m, const pg_step_limits *lim,
                                        pg_model_workspace **out) {
    *out = NULL;
    pg_model_workspace *ws = calloc(1, sizeof *ws);
    if (!ws) return pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
    ws->model = m;
    pagoda_status st = m->ops->workspace_create(m, lim, &ws->impl);
    if (st != PAGODA_OK) {
        free(ws);
        return st;
    }
    *out = ws;
    return PAGODA_OK;
}

void pg_model_workspace_free(pg_model_workspace *ws) {
    if (!ws) return;
    ws->model->ops->workspace_free(ws->impl);
    free(ws);
}

size_t pg_model_workspace_bytes(const pg_model_workspace *ws) {
    return ws ? ws->model->ops->workspace_bytes(ws->impl) : 0;
}

pagoda_status pg_model_forward(const pg_model *m, pg_model_workspace *ws, const pg_batch *b,
                               float *logits) {
    if (!ws || ws->model != m)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: workspace of another model");
    if (b->hidden_out && !m->ops->hidden_out)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: %s does not output hidden states",
                        m->arch->name);
    return m->ops->forward(m, ws->impl, b, logits);
}

/* ---- encoder-decoder models ---- */

int32_t pg_model_encoder_steps(const pg_model *m) {
    return m->ops->encoder_steps ? m->ops->encoder_steps(m) : 0;
}

bool pg_model_encoder_input_shape(const pg_model *m, int32_t *rows, int32_t *cols) {
    int32_t r = 0, c = 0;
    bool ok = m->ops->encoder_input_shape && m->ops->encoder_input_shape(m, &r, &c);
    if (rows) *rows = r;
    if (cols) *cols = c;
    return ok;
}

size_t pg_model_encoder_state_bytes(const pg_model *m) {
    return m->ops->encoder_state_bytes ? m->ops->encoder_state_bytes(m) : 0;
}

int32_t pg_model_encoder_step_tokens(const pg_model *m) {
    return m->ops->encoder_step_tokens ? m->ops->encoder_step_tokens(m) : 0;
}

pagoda_status pg_model_encode_step(const pg_model *m, pg_model_workspace *ws, int32_t step,
                                   const float *input, void *state) {
    if (!m->ops->encode_step)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: %s has no encoder", m->arch->name);
    if (!ws || ws->model != m)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: workspace of another model");
    return m->ops->encode_step(m, ws->impl, step, input, state);
}

pagoda_status pg_model_encoder_kv(const pg_model *m, pg_model_workspace *ws, const void *state,
                                  const int32_t *block_table, pg_paged_kv *const *kv) {
    if (!m->ops->encoder_kv)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: %s has no encoder", m->arch->name);
    if (!ws || ws->model != m)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: workspace of another model");
    return m->ops->encoder_kv(m, ws->impl, state, block_table, kv);
}

/* ---- multi-token prediction ---- */

bool pg_model_has_hidden_out(const pg_model *m) {
    return m->ops->hidden_out;
}

int32_t pg_model_mtp_layers(const pg_model *m) {
    return m->ops->mtp_create ? m->cfg.mtp_layers : 0;
}

pagoda_status pg_model_mtp_create(const pg_model *target, const pg_model_source *src,
                                  const pg_model_options *o, pg_model **out) {
    *out = NULL;
    if (!target->ops->mtp_create)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: %s has no multi-token-prediction (MTP) head (pagoda runs the MTP "
                        "heads of qwen3_5 / qwen3_5_moe checkpoints)",
                        target->arch->name);
    if (target->cfg.mtp_layers < 1)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: %s ships no multi-token-prediction (MTP) weights "
                        "(mtp_num_hidden_layers / nextn_predict_layers is 0)",
                        pg_model_source_path(src));
    return target->ops->mtp_create(target, src, o, out);
}
