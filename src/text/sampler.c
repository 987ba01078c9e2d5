/*
 * sampler.c - next-token choice from logits.
 *
 * Order of operations (the Hugging Face warper order):
 *   1. penalties over the last `penalty_last_n` accepted tokens (tern_generate
 *      accepts the prompt and every sampled id):
 *        repetition (llama.cpp / CTRL style, once per distinct token):
 *            l = l > 0 ? l / rp : l * rp
 *        frequency and presence (OpenAI style): l -= count * freq + (count > 0) * pres
 *   2. temperature <= 0: argmax (lowest id on ties) - done.
 *   3. l /= temperature; softmax over the candidates
 *   4. top-k (keep the k most likely), top-p (smallest set whose mass >= p, the
 *      token that crosses p included), min-p (drop p < min_p * p_max)
 *   5. draw from the renormalised distribution with the seeded generator
 *      (xoshiro256**, seeded by splitmix64 from the seed): same seed, same logits
 *      -> same tokens.
 * Tokens whose scaled logit is more than 40 below the maximum (relative
 * probability < 4e-18) are not candidates; that keeps the sort short for large
 * vocabularies and changes no probability by more than n_vocab * 4e-18.
 */
#include "core/common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tern_sampler {
    tern_sampler_params p;
    int n_vocab;
    uint64_t rng[4];
    int32_t *hist;          /* ring of the last penalty_last_n accepted ids */
    int hist_n, hist_pos, hist_cap;
    float *work;            /* [n_vocab] penalised logits */
    struct cand { float p; int32_t id; } *cand;  /* [n_vocab] candidates */
    uint16_t *count;        /* [n_vocab] occurrences in the window */
};

void tern_sampler_params_default(tern_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
    p->seed = 0;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t rng_next(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return r;
}
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static void reseed(tern_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

tern_status tern_sampler_new(const tern_sampler_params *p, int n_vocab, tern_sampler **out) {
    if (!p || !out || n_vocab <= 0) return tern_fail(TERN_ERR_INVALID_ARG, "tern_sampler_new: bad argument");
    *out = NULL;
    if (!(p->temperature >= 0 || p->temperature < 0) || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1) || !(p->repeat_penalty > 0) || p->penalty_last_n < 0 ||
        !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty) || !isfinite(p->temperature))
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "sampler: invalid parameters (need top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1, "
                         "repeat_penalty > 0, finite penalties and temperature)");
    tern_sampler *s = tern_calloc(1, sizeof *s);
    if (!s) return tern_fail(TERN_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->penalty_last_n ? p->penalty_last_n : 64;
    s->hist = tern_calloc((size_t)s->hist_cap, sizeof *s->hist);
    s->work = tern_malloc((size_t)n_vocab * sizeof *s->work);
    s->cand = tern_malloc((size_t)n_vocab * sizeof *s->cand);
    s->count = tern_calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->hist || !s->work || !s->cand || !s->count) {
        tern_sampler_free(s);
        return tern_fail(TERN_ERR_NOMEM, "sampler: out of memory (%d-token vocabulary)", n_vocab);
    }
    reseed(s);
    *out = s;
    return TERN_OK;
}

void tern_sampler_free(tern_sampler *s) {
    if (!s) return;
    size_t n = (size_t)s->n_vocab;
    tern_free(s->hist, (size_t)s->hist_cap * sizeof *s->hist);
    tern_free(s->work, n * sizeof *s->work);
    tern_free(s->cand, n * sizeof *s->cand);
    tern_free(s->count, n * sizeof *s->count);
    tern_free(s, sizeof *s);
}

void tern_sampler_reset(tern_sampler *s) {
    if (!s) return;
    s->hist_n = s->hist_pos = 0;
    reseed(s);
}

void tern_sampler_accept(tern_sampler *s, int32_t id) {
    if (!s || id < 0 || id >= s->n_vocab) return;
    s->hist[s->hist_pos] = id;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
    if (s->hist_n < s->hist_cap) s->hist_n++;
}

static int cmp_cand_desc(const void *a, const void *b) {
    /* probability descending; ties by id ascending */
    const struct cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int32_t tern_sampler_sample(tern_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    const tern_sampler_params *p = &s->p;
    float *l = s->work;
    memcpy(l, logits, (size_t)n * sizeof *l);
    bool pen = s->hist_n && (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0);
    if (pen) {
        for (int i = 0; i < s->hist_n; i++) if (s->count[s->hist[i]] < UINT16_MAX) s->count[s->hist[i]]++;
        for (int i = 0; i < s->hist_n; i++) {
            int32_t id = s->hist[i];
            uint16_t c = s->count[id];
            if (!c) continue; /* already applied for this id */
            float v = l[id];
            if (p->repeat_penalty != 1.0f) v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
            v -= (float)c * p->frequency_penalty + p->presence_penalty;
            l[id] = v;
            s->count[id] = 0;
        }
    }
    /* argmax (also the temperature <= 0 result) */
    int32_t best = 0;
    for (int i = 1; i < n; i++) if (l[i] > l[best]) best = i;
    if (p->temperature <= 0 || !isfinite(l[best])) return best;
    const float inv_t = 1.0f / p->temperature, mx = l[best] * inv_t;
    /* candidates with unnormalised probabilities exp(l/T - max) */
    int m = 0;
    double sum = 0;
    struct cand *c = s->cand;
    for (int i = 0; i < n; i++) {
        float z = l[i] * inv_t - mx;
        if (!(z >= -40.0f)) continue;
        float e = expf(z);
        c[m].p = e;
        c[m].id = i;
        m++;
        sum += e;
    }
    int k = (p->top_k > 0 && p->top_k < m) ? p->top_k : m;
    if (k < m || p->top_p < 1.0f) {
        qsort(c, (size_t)m, sizeof *c, cmp_cand_desc);
        m = k;
        sum = 0;
        for (int i = 0; i < m; i++) sum += c[i].p;
        if (p->top_p < 1.0f) {
            double acc = 0, lim = p->top_p * sum;
            for (int i = 0; i < m; i++) {
                acc += c[i].p;
                if (acc >= lim) { m = i + 1; break; }
            }
            sum = 0;
            for (int i = 0; i < m; i++) sum += c[i].p;
        }
    }
    if (p->min_p > 0) {
        /* the maximum unnormalised probability is exp(0) = 1 */
        float thr = p->min_p;
        int j = 0;
        sum = 0;
        for (int i = 0; i < m; i++)
            if (c[i].p >= thr) { c[j++] = c[i]; sum += c[i].p; }
        m = j;
    }
    if (m <= 0) return best;
    double u = rng_unit(s->rng) * sum, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += c[i].p;
        if (u < acc) return c[i].id;
    }
    return c[m - 1].id;
}

const char *tern_stop_reason_str(tern_stop_reason r) {
    switch (r) {
    case TERN_STOP_NONE: return "none";
    case TERN_STOP_EOG: return "eog";
    case TERN_STOP_STRING: return "stop_string";
    case TERN_STOP_MAX_TOKENS: return "max_tokens";
    case TERN_STOP_CONTEXT_FULL: return "context_full";
    case TERN_STOP_CANCELLED: return "cancelled";
    }
    return "unknown";
}
