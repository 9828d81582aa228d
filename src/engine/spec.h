/* Speculative decoding hooks of the engine (include/pagoda.h) for tests and
 * other proposers: the scheduler's proposer interface (engine/scheduler.h,
 * pg_spec_propose_fn) reached through an engine. */
#ifndef PAGODA_ENGINE_SPEC_H
#define PAGODA_ENGINE_SPEC_H

#include "engine/scheduler.h"
#include "pagoda.h"

/* Let fn(ctx, request, max_drafts, out) propose the draft tokens of e's
 * decodes from the next step on, instead of the configured method (a draft
 * model's prepare hook is removed too). The
 * engine must have been created with speculative decoding on. Engine
 * thread only. Errors: PAGODA_ERR_INVALID_ARG (speculation off). */
pagoda_status pg_engine_set_proposer(pagoda_engine *e, pg_spec_propose_fn fn, void *ctx);

/* The draft model of e (method draft_model, engine/draft.h), NULL if none:
 * for tests that inspect its KV state. Engine thread only. */
struct pg_draft;
struct pg_draft *pg_engine_draft(pagoda_engine *e);

/* The MTP head's proposer of e (method mtp, engine/mtp.h), NULL if none:
 * for tests that call its hooks themselves. Engine thread only. */
struct pg_mtp;
struct pg_mtp *pg_engine_mtp(pagoda_engine *e);

#endif
