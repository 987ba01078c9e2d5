/*
 * speculative.c - the drafters of speculative decoding (tern.h tern_drafter_*):
 *   ngram  prompt lookup: the last n tokens (n = n_max down to n_min) searched for in
 *          the history (prompt and generated text), latest occurrence first; the tokens
 *          that followed it are the draft (continued periodically past the history's
 *          end). Cheap: no model, the history only.
 *   draft  a small model with the target's tokenizer, run greedily on its own session:
 *          it evaluates the history it has not seen, then drafts k tokens by evaluating
 *          k - 1 of its own guesses, and rewinds them afterwards (tern_session_truncate on
 *          attention-only models, one reused snapshot on GDN models), so the next call
 *          starts from the history alone.
 * The target's side (one verify pass, the acceptance rule, adaptive k) is generate.c.
 */
#include "core/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_NGRAM = 1, KIND_DRAFT = 2, MAX_DRAFT = 64 };

struct tern_drafter {
    int kind;
    int n_max, n_min;               /* ngram */
    tern_model *dm;                 /* draft: the model (borrowed), its session */
    tern_session *ds;
    tern_session_snapshot *snap;    /* GDN draft models: the state before the guesses */
    int32_t *seen;                  /* the history the draft session holds ([0, n_seen)) */
    size_t n_seen, cap;
    int n_vocab;
};

tern_status tern_drafter_ngram_new(int n_max, int n_min, tern_drafter **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_drafter_ngram_new: NULL argument");
    *out = NULL;
    if (n_max <= 0) n_max = 4;
    if (n_min <= 0) n_min = 2;
    if (n_min > n_max || n_max > 64)
        return tern_fail(TERN_ERR_INVALID_ARG, "prompt lookup: n-gram sizes %d..%d (1 <= min <= max <= 64)", n_min,
                         n_max);
    tern_drafter *d = calloc(1, sizeof *d);
    if (!d) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    d->kind = KIND_NGRAM;
    d->n_max = n_max;
    d->n_min = n_min;
    *out = d;
    return TERN_OK;
}

tern_status tern_drafter_model_new(tern_model *draft, const tern_tokenizer *draft_tok, const tern_tokenizer *target_tok,
                                   int n_ctx, tern_drafter **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_drafter_model_new: NULL argument");
    *out = NULL;
    if (!draft || !draft_tok || !target_tok)
        return tern_fail(TERN_ERR_INVALID_ARG, "tern_drafter_model_new: NULL argument");
    tern_status st = tern_tokenizer_compare(target_tok, draft_tok);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tern_last_error());
        return tern_fail(st, "the draft model cannot draft for this model: %s (first: the target's, second: the "
                             "draft's)", msg);
    }
    tern_drafter *d = calloc(1, sizeof *d);
    if (!d) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    d->kind = KIND_DRAFT;
    d->dm = draft;
    d->n_vocab = tern_model_get_info(draft)->n_vocab;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx > 0 ? n_ctx : 4096;
    st = tern_session_new(draft, &sp, &d->ds);
    if (st) {
        free(d);
        return st;
    }
    *out = d;
    return TERN_OK;
}

void tern_drafter_free(tern_drafter *d) {
    if (d) { /* the draft model is the caller's */
        tern_session_snapshot_free(d->snap);
        tern_session_free(d->ds);
        free(d->seen);
    }
    free(d);
}

const char *tern_drafter_kind(const tern_drafter *d) {
    return !d ? "" : d->kind == KIND_NGRAM ? "ngram" : "draft";
}

/* Prompt lookup: the latest earlier occurrence of the last n tokens, longest n first. */
static int draft_ngram(const tern_drafter *d, const int32_t *h, size_t n, int k, int32_t *out) {
    for (int g = d->n_max; g >= d->n_min; g--) {
        if ((size_t)g >= n) continue;
        const int32_t *key = h + n - g;
        /* a match at j: h[j .. j+g) == key, followed by at least one token (j + g < n) */
        for (size_t j = n - g; j-- > 0;) {
            if (h[j] != key[0] || memcmp(h + j, key, (size_t)g * sizeof *h)) continue;
            /* the tokens that followed it; where they run into the end of the history, the
             * draft's own tokens (the text repeating with period n - from: short loops such
             * as "+1, 0, +1, 0," draft k tokens, not one period) */
            size_t from = j + (size_t)g;
            int c = 0;
            for (; c < k; c++) out[c] = from + (size_t)c < n ? h[from + (size_t)c] : out[from + (size_t)c - n];
            return c;
        }
    }
    return 0;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* The draft model: bring its session to the history, then guess greedily. */
static int draft_model(tern_drafter *d, const int32_t *h, size_t n, int k, int32_t *out) {
    size_t common = 0;
    while (common < d->n_seen && common < n && d->seen[common] == h[common]) common++;
    if (common == n && n) common--; /* the last token is evaluated again for its logits */
    tern_session *s = d->ds;
    tern_status st = TERN_OK;
    if (common < d->n_seen) {
        if (tern_session_can_truncate(s)) {
            st = tern_session_truncate(s, (int)common);
        } else if (d->snap && tern_session_snapshot_pos(d->snap) == (int)common) {
            st = tern_session_snapshot_restore(s, d->snap);
        } else {
            tern_session_reset(s);
            common = 0;
        }
        if (st) return -1;
        d->n_seen = common;
    }
    if (n > d->cap) {
        size_t cap = n + n / 2 + 64;
        int32_t *p = realloc(d->seen, cap * sizeof *p);
        if (!p) {
            tern_fail(TERN_ERR_NOMEM, "draft model: out of memory");
            return -1;
        }
        d->seen = p;
        d->cap = cap;
    }
    if (n + (size_t)k > (size_t)tern_session_n_ctx(s)) return 0; /* no room: no draft */
    if (n > d->n_seen) {
        st = tern_session_eval(s, h + d->n_seen, n - d->n_seen, NULL);
        if (st) {
            tern_session_reset(s);
            d->n_seen = 0;
            return -1;
        }
        memcpy(d->seen + d->n_seen, h + d->n_seen, (n - d->n_seen) * sizeof *h);
        d->n_seen = n;
    }
    /* the guesses are evaluated and rewound: keep the state at n */
    if (k > 1 && !tern_session_can_truncate(s)) {
        st = d->snap ? tern_session_snapshot_retake(s, d->snap) : tern_session_snapshot_take_in(s, TERN_SNAPSHOT_BACKEND, &d->snap);
        if (st) return -1;
    }
    int c = 0;
    for (; c < k; c++) {
        out[c] = argmax(tern_session_logits(s), d->n_vocab);
        if (c + 1 < k && (st = tern_session_eval(s, &out[c], 1, NULL))) break;
    }
    if (k > 1) {
        if (tern_session_can_truncate(s)) st = tern_session_truncate(s, (int)n);
        else st = tern_session_snapshot_restore(s, d->snap);
    }
    if (st) {
        tern_session_reset(s);
        d->n_seen = 0;
        return -1;
    }
    return c;
}

int tern_drafter_draft(tern_drafter *d, const int32_t *history, size_t n, int k, int32_t *out) {
    if (!d || (!history && n) || (!out && k > 0)) {
        tern_fail(TERN_ERR_INVALID_ARG, "tern_drafter_draft: NULL argument");
        return -1;
    }
    if (k <= 0 || n == 0) return 0;
    if (k > MAX_DRAFT) k = MAX_DRAFT;
    return d->kind == KIND_NGRAM ? draft_ngram(d, history, n, k, out) : draft_model(d, history, n, k, out);
}
