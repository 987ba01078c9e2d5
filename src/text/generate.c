/*
 * generate.c - the token loop: evaluate a prompt on a session, then sample,
 * stream and evaluate one token at a time until a stop rule fires:
 *   eog      the sampled id is an end-of-generation token (<|im_end|>, eos, ...)
 *   stop_string  the text contains one of the stop strings (cut before it)
 *   max_tokens   max_tokens ids were sampled
 *   context_full the next id would not fit in the session's context
 *   cancelled    *cancel became non-zero or on_text returned false
 * Streaming: token bytes pass through the UTF-8 hold-back of the streaming
 * detokenizer, then the longest tail that could still begin a stop string is
 * held back until it is decided.
 *
 * The loop is written once, as the step API (tern_gen_*): tern_generate is a
 * loop over it, and the server's scheduler drives one tern_gen per slot
 * (choose for every slot, then tern_gen_advance_batch over the decoding ones).
 */
#include "core/common.h"
#include "model/session.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

void tern_gen_result_free(tern_gen_result *r) {
    if (!r) return;
    tern_tokens_free(&r->tokens);
    tern_str_free(&r->text);
}

size_t tern_stop_scan(const char *text, size_t len, size_t before, const char *const *stop, size_t n_stop,
                      bool *matched) {
    size_t cut = len, held = 0;
    *matched = false;
    for (size_t k = 0; k < n_stop; k++) {
        size_t sl = strlen(stop[k]);
        if (!sl) continue;
        /* a new match ends after `before`: it starts at before - sl + 1 or later */
        for (size_t i = before >= sl ? before - sl + 1 : 0; i + sl <= len && i < cut; i++)
            if (!memcmp(text + i, stop[k], sl)) { cut = i; *matched = true; break; }
        /* the longest suffix that is a proper prefix of this stop string */
        for (size_t l = sl - 1; l > held; l--)
            if (l <= len && !memcmp(text + len - l, stop[k], l)) { held = l; break; }
    }
    return *matched ? cut : len - held;
}


struct tern_gen {
    tern_session *s;
    const tern_tokenizer *t;
    tern_sampler *smp;
    tern_gen_params p;
    char **stop;                    /* copies of p.stop */
    int n_vocab;
    int32_t *eog;                   /* ignore_eos: the end-of-generation ids */
    int n_eog;
    float *masked;                  /* ignore_eos: logits with them at -inf */
    tern_tokens tokens;
    tern_str text;
    size_t emitted, safe;           /* bytes passed to on_text; bytes safe to show */
    tern_detok_stream ds;
    int32_t pending;                /* chosen id not yet evaluated (-1: none) */
    bool cancelled;                 /* on_text returned false */
    bool finished;
    tern_stop_reason reason;
    /* speculation (p.drafter): the history the drafter reads (the prompt given to this
     * generator and every chosen id), the verify window: rows vrows[vbase + j] of the
     * tokens vtok[vbase + j] (j < vn: vtok[vbase] was the pending id, then the drafts);
     * vj is the row the next choice reads; vacc: the pending id is the draft already
     * evaluated there. keep_at > 0: the window closed, the session keeps that many of the
     * verify's tokens (settled at the next advance). GDN models: rejected rows are not
     * evaluated again at once; their kept tokens (defer) lead the next verify. */
    int32_t *hist;
    size_t hist_n, hist_cap;
    int kmax, k;
    const float *vrows; /* the session's rows of the verify (tern_session_verify_rows) */
    int32_t *vtok;
    int vrows_cap, vpos0, vbase, vn, vj, keep_at, vtotal;
    bool vacc, gdn;
    int32_t *defer;
    int n_defer;
    size_t drafted, accepted, steps;
    /* cost control: seconds per token of plain steps and of verify windows (moving
     * averages, 0: not measured yet); while windows cost more per token than plain
     * steps, `cool` plain steps follow before drafting again (small models whose
     * weights sit in the CPU's cache gain nothing from reading them once). t_spec is
     * v_time / v_tok, decayed sums of the windows' seconds and tokens: a window's cost
     * per token weighted by its tokens, so one window that drafted badly (a single token)
     * does not outweigh the well drafted ones that follow it */
    double t_plain, t_spec, vt, v_time, v_tok;
    int cool, cool_len;
};

static void ema(double *avg, double x) { *avg = *avg > 0 ? 0.7 * *avg + 0.3 * x : x; }

/* Rows a verify may hold: deferred tokens (at most kmax + 1), the pending id, kmax drafts. */
static int spec_rows(int kmax) { return 2 * kmax + 2; }

static tern_status hist_push(tern_gen *g, const int32_t *ids, size_t n) {
    if (!g->p.drafter) return TERN_OK;
    if (g->hist_n + n > g->hist_cap) {
        size_t cap = (g->hist_n + n) * 2 + 64;
        int32_t *h = tern_malloc(cap * sizeof *h);
        if (!h) return tern_fail(TERN_ERR_NOMEM, "generate: out of memory");
        if (g->hist_n) memcpy(h, g->hist, g->hist_n * sizeof *h);
        tern_free(g->hist, g->hist_cap * sizeof *h);
        g->hist = h;
        g->hist_cap = cap;
    }
    memcpy(g->hist + g->hist_n, ids, n * sizeof *ids);
    g->hist_n += n;
    return TERN_OK;
}

void tern_gen_free(tern_gen *g) {
    if (!g) return;
    for (size_t i = 0; g->stop && i < g->p.n_stop; i++)
        if (g->stop[i]) tern_free(g->stop[i], strlen(g->stop[i]) + 1);
    tern_free(g->stop, g->p.n_stop * sizeof *g->stop);
    tern_free(g->eog, (size_t)g->n_eog * sizeof *g->eog);
    tern_free(g->masked, (size_t)g->n_vocab * sizeof(float));
    tern_tokens_free(&g->tokens);
    tern_str_free(&g->text);
    tern_free(g->hist, g->hist_cap * sizeof *g->hist);
    if (g->vtok) tern_free(g->vtok, (size_t)g->vrows_cap * sizeof *g->vtok);
    if (g->defer) tern_free(g->defer, (size_t)g->vrows_cap * sizeof *g->defer);
    tern_free(g, sizeof *g);
}

tern_status tern_gen_new(tern_session *s, const tern_tokenizer *t, tern_sampler *smp, const tern_gen_params *p,
                         tern_gen **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_new: NULL argument");
    *out = NULL;
    if (!s || !t || !smp) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_new: NULL argument");
    tern_gen *g = tern_calloc(1, sizeof *g);
    if (!g) return tern_fail(TERN_ERR_NOMEM, "tern_gen_new: out of memory");
    g->s = s;
    g->t = t;
    g->smp = smp;
    if (p) g->p = *p;
    g->pending = -1;
    g->n_vocab = tern_model_get_info(s->m)->n_vocab; /* the logits' length (the tokenizer's may be smaller) */
    tern_status st = tern_str_append(&g->text, "", 0);
    if (!st && g->p.n_stop) {
        if (!g->p.stop) st = tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_new: n_stop > 0 with no stop strings");
        else if (!(g->stop = tern_calloc(g->p.n_stop, sizeof *g->stop))) st = tern_fail(TERN_ERR_NOMEM, "tern_gen_new: out of memory");
        for (size_t i = 0; !st && i < g->p.n_stop; i++) {
            const char *src = g->p.stop[i] ? g->p.stop[i] : "";
            size_t l = strlen(src);
            if (!(g->stop[i] = tern_malloc(l + 1))) { st = tern_fail(TERN_ERR_NOMEM, "tern_gen_new: out of memory"); break; }
            memcpy(g->stop[i], src, l + 1);
        }
    }
    if (!st && g->p.ignore_eos) {
        for (int pass = 0; pass < 2 && !st; pass++) { /* count, then fill */
            g->n_eog = 0;
            for (int32_t id = 0; id < g->n_vocab; id++) /* as the server did: ids up to the logits' length */
                if (tern_token_is_eog(t, id)) {
                    if (pass) g->eog[g->n_eog] = id;
                    g->n_eog++;
                }
            if (!pass && g->n_eog && !(g->eog = tern_malloc((size_t)g->n_eog * sizeof *g->eog)))
                st = tern_fail(TERN_ERR_NOMEM, "tern_gen_new: out of memory");
        }
    }
    if (!st && ((g->p.ignore_eos && g->n_eog) || g->p.process || g->p.grammar) &&
        !(g->masked = tern_malloc((size_t)g->n_vocab * sizeof(float))))
        st = tern_fail(TERN_ERR_NOMEM, "tern_gen_new: out of memory");
    if (!st && g->p.drafter) {
        g->kmax = g->p.spec_k > 0 ? (g->p.spec_k < 16 ? g->p.spec_k : 16) : 8;
        g->k = g->kmax;
        g->vrows_cap = spec_rows(g->kmax);
        g->gdn = !tern_session_can_truncate(s);
        g->vtok = tern_malloc((size_t)g->vrows_cap * sizeof *g->vtok);
        g->defer = tern_malloc((size_t)g->vrows_cap * sizeof *g->defer);
        if (!g->vtok || !g->defer) st = tern_fail(TERN_ERR_NOMEM, "tern_gen_new: out of memory");
        if (!st && g->p.spec_history && g->p.n_spec_history)
            st = hist_push(g, g->p.spec_history, g->p.n_spec_history);
    }
    if (st) {
        tern_gen_free(g);
        return st;
    }
    g->p.stop = (const char *const *)g->stop;
    *out = g;
    return TERN_OK;
}

tern_status tern_gen_prefill(tern_gen *g, const int32_t *ids, size_t n) {
    if (!g || (!ids && n)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_prefill: NULL argument");
    if (!n) return TERN_OK;
    if ((size_t)tern_session_pos(g->s) + n > (size_t)tern_session_n_ctx(g->s))
        return tern_fail(TERN_ERR_CONTEXT_FULL, "generate: the prompt (%zu tokens) does not fit the context "
                         "(%d of %d positions used)", n, tern_session_pos(g->s), tern_session_n_ctx(g->s));
    tern_status st = tern_session_eval(g->s, ids, n, NULL);
    if (st) return st;
    for (size_t i = 0; i < n; i++) tern_sampler_accept(g->smp, ids[i]); /* penalties see the prompt (HF) */
    return hist_push(g, ids, n);
}

static tern_stop_reason gen_stop(tern_gen *g, tern_stop_reason r) {
    g->reason = r;
    return r;
}

/* The position the session would have without speculation: the verify's rows after the
 * current one (and deferred tokens not yet evaluated again) are not counted. */
static int gen_pos(const tern_gen *g) {
    if (g->keep_at) return g->vpos0 + g->keep_at;
    if (g->vn) return g->vpos0 + g->vbase + g->vj + 1;
    return tern_session_pos(g->s) + g->n_defer;
}

/* A closed window (keep_at > 0): keep that many of the verify's tokens. On a GDN model
 * the states go back to before the verify and, unless `now` or too many, the kept
 * tokens wait (defer) to lead the next verify instead of a pass of their own. */
static tern_status settle(tern_gen *g, bool now) {
    if (!g->keep_at) return TERN_OK;
    const int keep = g->keep_at;
    g->keep_at = 0;
    if (!g->gdn || now || keep > g->kmax + 1 || keep == g->vtotal) return tern_session_verify_keep(g->s, keep);
    tern_status st = tern_session_verify_keep(g->s, 0);
    if (st) return st;
    memcpy(g->defer, g->vtok, (size_t)keep * sizeof *g->defer);
    g->n_defer = keep;
    return TERN_OK;
}

static tern_status choose(tern_gen *g, int32_t *id_out, tern_stop_reason *reason);

tern_status tern_gen_choose(tern_gen *g, int32_t *id_out, tern_stop_reason *reason) {
    if (!g || !reason) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_choose: NULL argument");
    int32_t dummy;
    if (!id_out) id_out = &dummy;
    *id_out = g->tokens.n ? g->tokens.ids[g->tokens.n - 1] : -1;
    if (g->reason != TERN_STOP_NONE) { *reason = g->reason; return TERN_OK; }
    *reason = TERN_STOP_NONE;
    if (g->pending >= 0) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_choose: the chosen token was not evaluated");
    if (!g->vn) return choose(g, id_out, reason);
    /* in a verify window: the choice reads row vj; a stop settles the window at once */
    tern_status st = choose(g, id_out, reason);
    if (!st && *reason != TERN_STOP_NONE && g->vn) {
        g->keep_at = g->vbase + g->vj + 1;
        g->vn = 0;
    }
    if (!st && *reason != TERN_STOP_NONE) st = settle(g, true);
    return st;
}

static tern_status choose(tern_gen *g, int32_t *id_out, tern_stop_reason *reason) {
    const tern_gen_params *p = &g->p;
    if (p->cancel && atomic_load_explicit(p->cancel, memory_order_relaxed)) { *reason = gen_stop(g, TERN_STOP_CANCELLED); return TERN_OK; }
    if (p->max_tokens > 0 && g->tokens.n >= (size_t)p->max_tokens) { *reason = gen_stop(g, TERN_STOP_MAX_TOKENS); return TERN_OK; }
    const float *logits = g->vn ? g->vrows + (size_t)(g->vbase + g->vj) * g->n_vocab : tern_session_logits(g->s);
    const int32_t draft = g->vn && g->vj + 1 < g->vn ? g->vtok[g->vbase + g->vj + 1] : -1;
    if (!logits) return tern_fail(TERN_ERR_INTERNAL, "generate: the session has no logits");
    if (g->masked) {
        memcpy(g->masked, logits, (size_t)g->n_vocab * sizeof(float));
        if (p->ignore_eos)
            for (int i = 0; i < g->n_eog; i++) g->masked[g->eog[i]] = -INFINITY;
        if (p->process) p->process(g->masked, g->n_vocab, p->process_user);
        /* constrained output: tokens the grammar does not allow next get -inf */
        tern_status gst = p->grammar ? tern_grammar_matcher_mask(p->grammar, g->masked, g->n_vocab, NULL) : TERN_OK;
        if (gst) return gst;
        logits = g->masked;
    }
    int32_t id = draft >= 0 ? tern_sampler_sample_draft(g->smp, logits, draft) : tern_sampler_sample(g->smp, logits);
    if (g->vn) {
        if (id == draft) { /* accepted: already evaluated at the next row */
            g->vacc = true;
            g->accepted++;
        } else { /* the window ends with this row: the tokens up to its own are kept */
            g->keep_at = g->vbase + g->vj + 1;
            int acc = g->vj, nd = g->vn - 1;
            if (g->steps > 1) { /* the first window pays one-time costs (snapshot storage): not counted */
                g->v_time = 0.7 * g->v_time + g->vt;
                g->v_tok = 0.7 * g->v_tok + (acc + 1);
                g->t_spec = g->v_time / g->v_tok;
            }
            if (g->t_plain > 0 && g->t_spec > g->t_plain) { /* back off, longer each time */
                g->cool_len = g->cool_len ? (g->cool_len < 256 ? 2 * g->cool_len : 256) : 8;
                g->cool = g->cool_len;
            } else if (g->t_plain > 0) {
                g->cool_len = 0;
            }
            g->k = acc == nd ? (g->k + 2 < g->kmax ? g->k + 2 : g->kmax) : (acc + 1 < g->kmax ? acc + 1 : g->kmax);
            g->vn = 0;
        }
    }
    if (p->grammar && !isfinite(logits[id]))
        return tern_fail(TERN_ERR_INVALID_ARG, "generate: every token the grammar allows was excluded (ignore_eos, "
                         "logit_bias or the sampler)");
    if (p->grammar) {
        tern_status ast = tern_grammar_matcher_accept_token(p->grammar, g->t, id);
        if (ast) return ast;
    }
    tern_sampler_accept(g->smp, id);
    tern_status st = tern_tokens_push(&g->tokens, id);
    if (!st) st = hist_push(g, &id, 1);
    if (st) return st;
    *id_out = id;
    if (tern_token_is_eog(g->t, id)) { *reason = gen_stop(g, TERN_STOP_EOG); return TERN_OK; }
    if (p->on_token && !p->on_token(logits, g->n_vocab, id, p->token_user))
        return tern_fail(TERN_ERR_NOMEM, "generate: the token callback failed (out of memory)");
    size_t before = g->text.len;
    if ((st = tern_detok_stream_push(&g->ds, g->t, id, &g->text))) return st;
    bool stopped;
    size_t safe = tern_stop_scan(g->text.data, g->text.len, before, p->stop, p->n_stop, &stopped);
    if (stopped) {
        g->text.len = safe;
        g->text.data[safe] = 0;
        memset(&g->ds, 0, sizeof g->ds); /* the cut text is final: nothing held back follows it */
    }
    g->safe = safe;
    if (safe > g->emitted && p->on_text) {
        if (!p->on_text(g->text.data + g->emitted, safe - g->emitted, p->user)) g->cancelled = true;
    }
    if (safe > g->emitted) g->emitted = safe;
    if (stopped) { *reason = gen_stop(g, TERN_STOP_STRING); return TERN_OK; }
    if (g->cancelled) { *reason = gen_stop(g, TERN_STOP_CANCELLED); return TERN_OK; }
    if (gen_pos(g) >= tern_session_n_ctx(g->s)) { *reason = gen_stop(g, TERN_STOP_CONTEXT_FULL); return TERN_OK; }
    g->pending = id;
    return TERN_OK;
}

/* Speculation: evaluate the pending id with the drafts that follow it (and deferred
 * tokens before it) in one verify pass, opening a window of rows for the next choices. */
static tern_status advance_spec(tern_gen *g) {
    if (g->vacc) { /* the accepted draft: its row is the window's next */
        g->vacc = false;
        g->vj++;
        g->pending = -1;
        return TERN_OK;
    }
    tern_status st = settle(g, false);
    if (st) return st;
    int k = g->k;
    if (g->p.max_tokens > 0) { /* drafts past max_tokens would never be chosen */
        long left = (long)g->p.max_tokens - (long)g->tokens.n;
        if (left < k) k = left > 0 ? (int)left : 0;
    }
    long room = (long)tern_session_n_ctx(g->s) - tern_session_pos(g->s) - g->n_defer - 1;
    if (room < k) k = room > 0 ? (int)room : 0;
    /* no plain step measured yet: one, to compare with */
    if (g->p.spec_always) g->cool = 0;
    else if (g->t_spec > 0 && g->t_plain <= 0 && !g->cool) g->cool = 1;
    if (g->cool > 0) {
        g->cool--;
        k = 0;
    }
    int nd = 0;
    if (k > 0) {
        nd = tern_drafter_draft(g->p.drafter, g->hist, g->hist_n, k, g->vtok + g->n_defer + 1);
        if (nd < 0) nd = 0; /* a draft model's error (e.g. out of memory): this step goes on without drafts */
    }
    if (!nd && !g->n_defer) { /* nothing drafted: a plain step */
        double t0 = tern_now_s();
        st = tern_session_eval(g->s, &g->pending, 1, NULL);
        ema(&g->t_plain, tern_now_s() - t0);
        if (!st) g->pending = -1;
        return st;
    }
    memcpy(g->vtok, g->defer, (size_t)g->n_defer * sizeof *g->vtok);
    g->vtok[g->n_defer] = g->pending;
    const int n = g->n_defer + 1 + nd;
    g->vpos0 = tern_session_pos(g->s);
    double t0 = tern_now_s();
    /* the rows stay in the session (on CUDA where the device wrote them: no host copy) */
    st = tern_session_verify(g->s, g->vtok, (size_t)n, NULL);
    g->vt = tern_now_s() - t0;
    if (st) return st;
    g->vrows = tern_session_verify_rows(g->s);
    g->vtotal = n;
    g->steps++;
    g->drafted += (size_t)nd;
    g->vbase = g->n_defer;
    g->n_defer = 0;
    g->vn = 1 + nd;
    g->vj = 0;
    g->pending = -1;
    return TERN_OK;
}

tern_status tern_gen_advance(tern_gen *g) {
    if (!g) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_advance: NULL argument");
    if (g->pending < 0) return TERN_OK;
    if (g->p.drafter) return advance_spec(g);
    tern_status st = tern_session_eval(g->s, &g->pending, 1, NULL);
    if (!st) g->pending = -1;
    return st;
}

void tern_gen_spec_stats(const tern_gen *g, size_t *drafted, size_t *accepted, size_t *steps) {
    if (drafted) *drafted = g ? g->drafted : 0;
    if (accepted) *accepted = g ? g->accepted : 0;
    if (steps) *steps = g ? g->steps : 0;
}

tern_status tern_gen_advance_batch(tern_gen *const *g, size_t n) {
    if (!g && n) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_advance_batch: NULL argument");
    enum { STACK = 32 };
    tern_session *ss_stack[STACK], **ss = ss_stack;
    int32_t ids_stack[STACK], *ids = ids_stack;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!g[i]) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_advance_batch: generator %zu is NULL", i);
    if (n > STACK) {
        ss = tern_malloc(n * sizeof *ss);
        ids = tern_malloc(n * sizeof *ids);
        if (!ss || !ids) {
            if (ss) tern_free(ss, n * sizeof *ss);
            if (ids) tern_free(ids, n * sizeof *ids);
            return tern_fail(TERN_ERR_NOMEM, "tern_gen_advance_batch: out of memory");
        }
    }
    tern_status st = TERN_OK;
    /* speculating generators verify their drafts on their own */
    for (size_t i = 0; i < n && !st; i++)
        if (g[i]->pending >= 0 && g[i]->p.drafter) st = tern_gen_advance(g[i]);
    for (size_t i = 0; i < n; i++)
        if (g[i]->pending >= 0) { ss[m] = g[i]->s; ids[m] = g[i]->pending; m++; }
    if (st) {
    } else if (m == 1) {
        for (size_t i = 0; i < n; i++)
            if (g[i]->pending >= 0) st = tern_gen_advance(g[i]);
    } else if (m > 1 && !(st = tern_session_eval_batch(ss, ids, m, NULL))) {
        for (size_t i = 0; i < n; i++) g[i]->pending = -1;
    }
    if (ss != ss_stack) tern_free(ss, n * sizeof *ss);
    if (ids != ids_stack) tern_free(ids, n * sizeof *ids);
    return st;
}

tern_status tern_gen_step(tern_gen *g, int32_t *id, tern_stop_reason *reason) {
    tern_status st = tern_gen_choose(g, id, reason);
    if (st || *reason != TERN_STOP_NONE) return st;
    return tern_gen_advance(g);
}

tern_status tern_gen_finish(tern_gen *g) {
    if (!g) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gen_finish: NULL argument");
    if (g->finished) return TERN_OK;
    if (g->vn) { /* ended without a stop inside the window: keep what was chosen */
        g->keep_at = g->vbase + g->vj + 1;
        g->vn = 0;
    }
    tern_status sst = settle(g, true);
    if (!sst && g->n_defer) { /* deferred kept tokens: evaluate them now */
        sst = tern_session_eval(g->s, g->defer, (size_t)g->n_defer, NULL);
        g->n_defer = 0;
    }
    if (sst) return sst;
    g->finished = true;
    if (g->reason == TERN_STOP_STRING) return TERN_OK;
    tern_status st = tern_detok_stream_flush(&g->ds, &g->text);
    if (st) return st;
    g->safe = g->text.len;
    if (g->text.len > g->emitted && g->p.on_text && !g->cancelled)
        g->p.on_text(g->text.data + g->emitted, g->text.len - g->emitted, g->p.user);
    g->emitted = g->text.len;
    return TERN_OK;
}

const char *tern_gen_text(const tern_gen *g, size_t *len, size_t *safe) {
    if (len) *len = g ? g->text.len : 0;
    if (safe) *safe = g ? g->safe : 0;
    return g ? g->text.data : NULL;
}

const int32_t *tern_gen_tokens(const tern_gen *g, size_t *n) {
    if (n) *n = g ? g->tokens.n : 0;
    return g ? g->tokens.ids : NULL;
}

tern_stop_reason tern_gen_reason(const tern_gen *g) { return g ? g->reason : TERN_STOP_NONE; }

tern_status tern_generate(tern_session *s, const tern_tokenizer *t, tern_sampler *smp, const int32_t *prompt,
                          size_t n_prompt, const tern_gen_params *p, tern_gen_result *r) {
    if (!s || !t || !smp || !r || (!prompt && n_prompt))
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_generate: NULL argument");
    memset(r, 0, sizeof *r);
    tern_status st = tern_str_append(&r->text, "", 0);
    if (st) return st;
    if (!n_prompt && tern_session_pos(s) == 0)
        return tern_fail(TERN_ERR_INVALID_ARG, "generate: empty prompt on an empty session");
    tern_gen *g;
    if ((st = tern_gen_new(s, t, smp, p, &g))) return st;
    double t0 = tern_now_s();
    if ((st = tern_gen_prefill(g, prompt, n_prompt))) { tern_gen_free(g); return st; }
    r->n_prompt = n_prompt;
    double t1 = tern_now_s();
    r->prompt_s = t1 - t0;
    tern_stop_reason why = TERN_STOP_NONE;
    int32_t id;
    while (!(st = tern_gen_step(g, &id, &why)) && why == TERN_STOP_NONE) {}
    if (!st) st = tern_gen_finish(g);
    r->reason = why;
    /* the result takes the reply (on an error: what was generated before it) */
    tern_str_free(&r->text);
    r->text = g->text;
    r->tokens = g->tokens;
    memset(&g->text, 0, sizeof g->text);
    memset(&g->tokens, 0, sizeof g->tokens);
    tern_gen_spec_stats(g, &r->spec_drafted, &r->spec_accepted, &r->spec_steps);
    tern_gen_free(g);
    r->gen_s = tern_now_s() - t1;
    return st;
}
