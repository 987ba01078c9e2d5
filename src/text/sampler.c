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
 * llama.cpp's stages (off by default; when one is on, or `samplers` names an order,
 * the staged path below runs instead of 3-5): DRY (a logit penalty after the
 * others), top_n_sigma, temperature, top_k, typ_p, top_p, min_p, xtc, in that
 * order unless `samplers` gives another; then the draw.
 * Tokens whose scaled logit is more than 40 below the maximum (relative
 * probability < 4e-18) are not candidates; that changes no probability by more
 * than n_vocab * 4e-18.
 * Speed on large vocabularies (248,320 tokens for the 27B; a server chooses for
 * every sequence at every step while the device waits): the argmax is a blocked
 * maximum the compiler vectorises and reads the logits in place when nothing
 * changes them; top-k selects the k most likely by quickselect and sorts only
 * those, and top-p without top-k sorts a growing head until its mass reaches p,
 * instead of sorting every candidate (37 ms -> ~1 ms a token at the default
 * settings on the dev VM; the same order, so the same tokens).
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
    int pen_n;              /* penalty window (the last pen_n of the history) */
    uint8_t *breaker;       /* [n_vocab] DRY sequence breakers (NULL: none) */
    int *dry_len;           /* [n_vocab] DRY: longest repeat each token would extend */
    struct cand *cand2;     /* [n_vocab] staged path: typical_p's ranking */
    int32_t draft;          /* tern_sampler_sample_draft: the drafted id (-1: none) */
    uint8_t order[16];      /* staged path: the stages, in order */
    int n_order;
    bool staged;
};

enum { ST_DRY = 1, ST_TOP_K, ST_TYP_P, ST_TOP_P, ST_MIN_P, ST_XTC, ST_SIGMA, ST_TEMP };
static const char *const stage_name[] = {"", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "top_n_sigma",
                                         "temperature"};

/* "a;b;c" (',' or ' ' also separate; "typical_p" and "typical" name typ_p) -> s->order; false on an
 * unknown name or too many. */
static bool parse_order(tern_sampler *s, const char *spec) {
    s->n_order = 0;
    while (*spec) {
        size_t n = strcspn(spec, ";, ");
        if (n) {
            int st = 0;
            for (int k = 1; k <= ST_TEMP && !st; k++)
                if (strlen(stage_name[k]) == n && !memcmp(spec, stage_name[k], n)) st = k;
            if (!st && ((n == 9 && !memcmp(spec, "typical_p", 9)) || (n == 7 && !memcmp(spec, "typical", 7)))) st = ST_TYP_P;
            if (!st && n == 9 && !memcmp(spec, "penalties", 9)) st = -1; /* always first here */
            if (!st || s->n_order == (int)sizeof s->order) return false;
            if (st > 0) s->order[s->n_order++] = (uint8_t)st;
        }
        spec += n;
        if (*spec) spec++;
    }
    return true;
}

void tern_sampler_params_default(tern_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
    p->seed = 0;
    p->typical_p = 1.0f;
    p->xtc_threshold = 0.1f;
    p->dry_base = 1.75f;
    p->dry_allowed_length = 2;
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
    if (!(p->typical_p > 0 && p->typical_p <= 1) || !isfinite(p->top_n_sigma) || !(p->xtc_probability >= 0 &&
        p->xtc_probability <= 1) || !(p->xtc_threshold >= 0 && p->xtc_threshold <= 1) || !(p->dry_multiplier >= 0) ||
        !isfinite(p->dry_multiplier) || !(p->dry_base >= 1 && p->dry_base <= 100) || p->dry_allowed_length < 0 ||
        p->dry_penalty_last_n < 0 || p->min_keep < 0 || p->n_dry_breakers < 0 || (p->n_dry_breakers && !p->dry_breakers))
        return tern_fail(TERN_ERR_INVALID_ARG,
                         "sampler: invalid parameters (need 0 < typical_p <= 1, xtc_probability and xtc_threshold in "
                         "[0, 1], dry_multiplier >= 0, 1 <= dry_base <= 100, dry lengths and min_keep >= 0)");
    tern_sampler *s = tern_calloc(1, sizeof *s);
    if (!s) return tern_fail(TERN_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->draft = -1;
    s->p.samplers = NULL;
    s->p.dry_breakers = NULL;
    s->pen_n = p->penalty_last_n ? p->penalty_last_n : 64;
    s->hist_cap = s->pen_n;
    int dry_n = p->dry_penalty_last_n ? p->dry_penalty_last_n : 1024;
    if (p->dry_multiplier > 0 && dry_n > s->hist_cap) s->hist_cap = dry_n;
    s->staged = p->samplers || p->typical_p < 1 || p->top_n_sigma > 0 || p->xtc_probability > 0 ||
                p->dry_multiplier > 0 || p->min_keep > 1;
    if (p->samplers && !parse_order(s, p->samplers)) {
        tern_free(s, sizeof *s);
        return tern_fail(TERN_ERR_INVALID_ARG, "sampler: 'samplers' names an unknown stage (known: dry, top_k, "
                         "typ_p, top_p, min_p, xtc, top_n_sigma, temperature)");
    }
    if (!p->samplers) {
        static const uint8_t def[] = {ST_DRY, ST_SIGMA, ST_TEMP, ST_TOP_K, ST_TYP_P, ST_TOP_P, ST_MIN_P, ST_XTC};
        memcpy(s->order, def, sizeof def);
        s->n_order = (int)sizeof def;
    }
    s->hist = tern_calloc((size_t)s->hist_cap, sizeof *s->hist);
    if (s->staged && !(s->cand2 = tern_malloc((size_t)n_vocab * sizeof *s->cand2))) {
        tern_sampler_free(s);
        return tern_fail(TERN_ERR_NOMEM, "sampler: out of memory (%d-token vocabulary)", n_vocab);
    }
    if (p->dry_multiplier > 0) {
        s->breaker = tern_calloc((size_t)n_vocab, 1);
        s->dry_len = tern_calloc((size_t)n_vocab, sizeof *s->dry_len);
        if (!s->breaker || !s->dry_len) {
            tern_sampler_free(s);
            return tern_fail(TERN_ERR_NOMEM, "sampler: out of memory (%d-token vocabulary)", n_vocab);
        }
        for (int i = 0; i < p->n_dry_breakers; i++)
            if (p->dry_breakers[i] >= 0 && p->dry_breakers[i] < n_vocab) s->breaker[p->dry_breakers[i]] = 1;
    }
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
    if (s->breaker) tern_free(s->breaker, n);
    if (s->cand2) tern_free(s->cand2, n * sizeof *s->cand2);
    if (s->dry_len) tern_free(s->dry_len, n * sizeof *s->dry_len);
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

/* The k-th most recent accepted id (k < hist_n). */
static int32_t hist_back(const tern_sampler *s, int k) {
    int i = s->hist_pos - 1 - k;
    return s->hist[i < 0 ? i + s->hist_cap : i];
}

/* DRY (llama.cpp's "Don't Repeat Yourself"): for every earlier place where the history's last
 * tokens occur again, the token that followed it would extend a repeat of that length n (no
 * breaker inside); the longest n per token >= allowed_length costs mult * base^(n - allowed). */
#define DRY_MAX_MATCH 64        /* longer repeats count as 64 (their penalty is past any logit
                                 * anyway); bounds the work to window x 64 per token */
static void apply_dry(tern_sampler *s, float *l) {
    const tern_sampler_params *p = &s->p;
    int L = s->hist_n, w = p->dry_penalty_last_n ? p->dry_penalty_last_n : 1024;
    if (L > w) L = w;
    if (L < 2) return;
    /* h(i): the i-th of the window's L tokens, oldest first */
#define H(i) hist_back(s, L - 1 - (i))
    int32_t last = H(L - 1);
    if (s->breaker[last]) return;
    int touched = 0;
    for (int j = L - 2; j >= 0; j--) {
        if (H(j) != last) continue;
        int n = 0;
        while (n <= j && n < DRY_MAX_MATCH && H(j - n) == H(L - 1 - n) && !s->breaker[H(j - n)]) n++;
        int32_t next = H(j + 1);
        if (n > s->dry_len[next]) { if (!s->dry_len[next]) touched++; s->dry_len[next] = n; }
    }
    if (!touched) return;
    for (int j = 0; j + 1 < L; j++) {
        int32_t t = H(j + 1);
        int n = s->dry_len[t];
        if (!n) continue;
        s->dry_len[t] = 0;
        if (n >= p->dry_allowed_length)
            l[t] -= p->dry_multiplier * powf(p->dry_base, (float)(n - p->dry_allowed_length));
    }
#undef H
}

static int cmp_cand_desc(const void *a, const void *b) {
    /* probability descending; ties by id ascending */
    const struct cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_cand_id(const void *a, const void *b) {
    const struct cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static inline bool cand_before(struct cand a, struct cand b) {
    return a.p > b.p || (a.p == b.p && a.id < b.id);
}

/* Rearrange c[0 .. m) so that c[0 .. t) are its t first in cmp_cand_desc's order, sorted
 * (the rest in any order): quickselect then a sort of the head. The order is total (ids
 * differ), so the head is the same as after sorting everything. */
static void cand_head(struct cand *c, int m, int t) {
    if (t >= m) { qsort(c, (size_t)m, sizeof *c, cmp_cand_desc); return; }
    if (t <= 0) return;
    int lo = 0, hi = m - 1, rounds = 0;
    while (hi > lo) {
        if (++rounds > 64) { qsort(c + lo, (size_t)(hi - lo + 1), sizeof *c, cmp_cand_desc); break; }
        /* median of three as the pivot */
        int mid = lo + (hi - lo) / 2;
        struct cand a = c[lo], b = c[mid], d = c[hi], pv;
        if (cand_before(a, b)) pv = cand_before(b, d) ? b : (cand_before(a, d) ? d : a);
        else pv = cand_before(a, d) ? a : (cand_before(b, d) ? d : b);
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_before(c[i], pv)) i++;
            while (cand_before(pv, c[j])) j--;
            if (i <= j) { struct cand x = c[i]; c[i] = c[j]; c[j] = x; i++; j--; }
        }
        /* c[lo .. j] before-or-equal pv, c[i .. hi] after-or-equal; the t-th boundary */
        if (t - 1 <= j) hi = j;
        else if (t - 1 >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)t, sizeof *c, cmp_cand_desc);
}

/* The k first candidates (scaled logit z = l * inv_t - mx >= -40, in cmp_cand_desc's order of
 * z) into c[0 .. m), m <= k, unsorted: a min-heap of the k best so far (c[0] the worst), so most
 * logits cost one comparison; a quickselect over all candidates when k is large. */
static int top_k_scan(const float *l, int n, float inv_t, float mx, int k, struct cand *c, int *n_cand) {
    int m = 0, all = 0;
    if (k > 1024) {
        for (int i = 0; i < n; i++) {
            float z = l[i] * inv_t - mx;
            if (!(z >= -40.0f)) continue;
            c[m].p = z;
            c[m].id = i;
            m++;
        }
        *n_cand = m;
        if (k < m) { cand_head(c, m, k); m = k; }
        return m;
    }
    for (int i = 0; i < n; i++) {
        float z = l[i] * inv_t - mx;
        if (!(z >= -40.0f)) continue;
        all++;
        struct cand x = {z, i};
        if (m < k) {        /* sift up: parents are worse (after) than children */
            int j = m++;
            while (j > 0 && cand_before(c[(j - 1) / 2], x)) { c[j] = c[(j - 1) / 2]; j = (j - 1) / 2; }
            c[j] = x;
        } else if (cand_before(x, c[0])) { /* better than the worst kept: replace it, sift down */
            int j = 0;
            for (;;) {
                int a = 2 * j + 1, b = a + 1, w = j;
                struct cand cw = x;
                if (a < m && cand_before(cw, c[a])) { w = a; cw = c[a]; }
                if (b < m && cand_before(cw, c[b])) { w = b; cw = c[b]; }
                if (w == j) break;
                c[j] = c[w];
                j = w;
            }
            c[j] = x;
        }
    }
    *n_cand = all;
    return m;
}

/* The index of the largest logit (the lowest id on ties; NaNs never win; a NaN at 0 keeps
 * 0, as a plain scan from 0 does). A blocked maximum first (vectorised), then its first
 * occurrence. */
static int32_t argmax_of(const float *l, int n) {
    if (l[0] != l[0]) return 0;
    enum { W = 16 };
    float mx[W];
    for (int j = 0; j < W; j++) mx[j] = -INFINITY;
    int i = 0;
    for (; i + W <= n; i += W)
        for (int j = 0; j < W; j++) mx[j] = l[i + j] > mx[j] ? l[i + j] : mx[j];
    float M = l[0];
    for (int j = 0; j < W; j++) M = mx[j] > M ? mx[j] : M;
    for (; i < n; i++) M = l[i] > M ? l[i] : M;
    int32_t b = 0;
    while (b < n && !(l[b] == M)) b++;
    return b < n ? b : 0;
}

/* Normalised probabilities of candidates c[0 .. m) (their .p: logits) into pr. */
static void cand_probs(const struct cand *c, int m, float *pr) {
    float mx = c[0].p;
    for (int i = 1; i < m; i++) if (c[i].p > mx) mx = c[i].p;
    double sum = 0;
    for (int i = 0; i < m; i++) sum += pr[i] = expf(c[i].p - mx);
    for (int i = 0; i < m; i++) pr[i] = (float)(pr[i] / sum);
}

/* The draw from candidates c[0 .. m) of weights w (stride ws floats from w, summing to
 * sum). With a draft (tern_sampler_sample_draft): speculative rejection sampling for a
 * drafter that proposes one id with certainty (q a point mass): the draft is kept with
 * probability p(draft) = w / sum; otherwise the id comes from p with the draft removed,
 * renormalised (the residual norm(max(p - q, 0))). Either way the id has distribution p. */
static int32_t draw(tern_sampler *s, const struct cand *c, const float *w, size_t ws, int m, double sum) {
    int skip = -1;
    if (s->draft >= 0) {
        double wd = 0;
        for (int i = 0; i < m; i++)
            if (c[i].id == s->draft) { skip = i; wd = w[(size_t)i * ws]; break; }
        if (skip >= 0) {
            if (rng_unit(s->rng) * sum < wd || !(sum - wd > 0)) return s->draft;
            sum -= wd;
        }
    }
    double u = rng_unit(s->rng) * sum, acc = 0;
    int last = -1;
    for (int i = 0; i < m; i++) {
        if (i == skip) continue;
        acc += w[(size_t)i * ws];
        last = i;
        if (u < acc) return c[i].id;
    }
    return c[last >= 0 ? last : m - 1].id;
}

/* The staged path: candidates (within 40 of the maximum at the final scale) carry their
 * logits through the stages in s->order; probabilities are the softmax of what is left. */
static int32_t sample_staged(tern_sampler *s, float *l, float lmax) {
    const tern_sampler_params *p = &s->p;
    struct cand *c = s->cand, *c2 = s->cand2;
    bool has_temp = false;
    for (int o = 0; o < s->n_order; o++) has_temp |= s->order[o] == ST_TEMP;
    float span = 40.0f * (has_temp && p->temperature > 1 ? p->temperature : 1.0f);
    int m = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (l[i] >= lmax - span) { c[m].p = l[i]; c[m].id = i; m++; }
    float *pr = l;                  /* l is not needed any more: probability scratch */
    const int keep = p->min_keep > 1 ? p->min_keep : 1;
    bool sorted = false;
#define SORT() do { if (!sorted) { qsort(c, (size_t)m, sizeof *c, cmp_cand_desc); sorted = true; } } while (0)
    for (int o = 0; o < s->n_order && m > 1; o++) {
        switch (s->order[o]) {
        case ST_TEMP: {
            float it = 1.0f / p->temperature;
            for (int i = 0; i < m; i++) c[i].p *= it;
            break;
        }
        case ST_TOP_K:
            if (p->top_k > 0 && p->top_k < m) {
                if (!sorted) { cand_head(c, m, p->top_k); sorted = true; }
                m = p->top_k;
            }
            break;
        case ST_TOP_P:
            if (p->top_p < 1) {
                SORT();
                cand_probs(c, m, pr);
                double acc = 0;
                for (int i = 0; i < m; i++) {
                    acc += pr[i];
                    if (acc >= p->top_p && i + 1 >= keep) { m = i + 1; break; }
                }
            }
            break;
        case ST_MIN_P:
            if (p->min_p > 0) {
                SORT();
                cand_probs(c, m, pr);
                float thr = p->min_p * pr[0];
                for (int i = keep; i < m; i++) if (pr[i] < thr) { m = i; break; }
            }
            break;
        case ST_TYP_P:
            if (p->typical_p < 1) {
                SORT();
                cand_probs(c, m, pr);
                double hent = 0;
                for (int i = 0; i < m; i++) if (pr[i] > 0) hent -= pr[i] * log(pr[i]);
                for (int i = 0; i < m; i++) {
                    double sc = pr[i] > 0 ? fabs(-log(pr[i]) - hent) : INFINITY;
                    c2[i].p = (float)-sc;   /* descending -score = ascending score; ties by position */
                    c2[i].id = i;
                }
                qsort(c2, (size_t)m, sizeof *c2, cmp_cand_desc);
                double acc = 0;
                for (int k = 0; k < m; k++) {
                    acc += pr[c2[k].id];
                    pr[c2[k].id] = -1;      /* kept */
                    if (acc >= p->typical_p && k + 1 >= keep) break;
                }
                int j = 0;
                for (int i = 0; i < m; i++) if (pr[i] < 0) c[j++] = c[i];
                m = j;
            }
            break;
        case ST_XTC:
            if (p->xtc_probability > 0 && rng_unit(s->rng) < p->xtc_probability) {
                SORT();
                cand_probs(c, m, pr);
                int a = 0;
                while (a < m && pr[a] >= p->xtc_threshold) a++;
                if (a >= 2 && m - (a - 1) >= keep) {
                    memmove(c, c + a - 1, (size_t)(m - a + 1) * sizeof *c);
                    m -= a - 1;
                }
            }
            break;
        case ST_SIGMA:
            if (p->top_n_sigma > 0) {
                double mean = 0, var = 0;
                float mx = c[0].p;
                for (int i = 0; i < m; i++) { mean += c[i].p; if (c[i].p > mx) mx = c[i].p; }
                mean /= m;
                for (int i = 0; i < m; i++) var += (c[i].p - mean) * (c[i].p - mean);
                float thr = mx - p->top_n_sigma * (float)sqrt(var / m);
                int j = 0;
                for (int i = 0; i < m; i++) if (c[i].p >= thr) c[j++] = c[i];
                m = j;
            }
            break;
        }
    }
#undef SORT
    if (m == 1) return c[0].id;
    cand_probs(c, m, pr);
    return draw(s, c, pr, 1, m, 1.0);
}

int32_t tern_sampler_sample_draft(tern_sampler *s, const float *logits, int32_t draft) {
    s->draft = draft >= 0 && draft < s->n_vocab ? draft : -1;
    int32_t id = tern_sampler_sample(s, logits);
    s->draft = -1;
    return id;
}

int32_t tern_sampler_sample(tern_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    const tern_sampler_params *p = &s->p;
    bool pen = s->hist_n && (p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0);
    bool dry = false;
    if (p->dry_multiplier > 0 && s->breaker)
        for (int i = 0; i < s->n_order && !dry; i++) dry = s->order[i] == ST_DRY;
    /* greedy with nothing changing the logits: read them in place */
    if (p->temperature <= 0 && !pen && !dry) return argmax_of(logits, n);
    float *l = s->work;
    memcpy(l, logits, (size_t)n * sizeof *l);
    if (pen) {
        int w = s->hist_n < s->pen_n ? s->hist_n : s->pen_n;
        for (int i = 0; i < w; i++) { int32_t id = hist_back(s, i); if (s->count[id] < UINT16_MAX) s->count[id]++; }
        for (int i = 0; i < w; i++) {
            int32_t id = hist_back(s, i);
            uint16_t c = s->count[id];
            if (!c) continue; /* already applied for this id */
            float v = l[id];
            if (p->repeat_penalty != 1.0f) v = v > 0 ? v / p->repeat_penalty : v * p->repeat_penalty;
            v -= (float)c * p->frequency_penalty + p->presence_penalty;
            l[id] = v;
            s->count[id] = 0;
        }
    }
    if (dry) apply_dry(s, l);
    /* argmax (also the temperature <= 0 result) */
    int32_t best = argmax_of(l, n);
    if (p->temperature <= 0 || !isfinite(l[best])) return best;
    if (s->staged) return sample_staged(s, l, l[best]);
    const float inv_t = 1.0f / p->temperature, mx = l[best] * inv_t;
    /* candidates with unnormalised probabilities exp(l/T - max) */
    int m = 0;
    double sum = 0;
    struct cand *c = s->cand;
    bool sorted = false;
    if (p->top_k > 0) {
        /* top-k: the k largest scaled logits (exp is monotone), then exp of those only */
        int all = 0;
        m = top_k_scan(l, n, inv_t, mx, p->top_k, c, &all);
        for (int i = 0; i < m; i++) c[i].p = expf(c[i].p);
        if (m < all) {  /* cut: the head by probability (ties by id), its mass summed in that order */
            qsort(c, (size_t)m, sizeof *c, cmp_cand_desc);
            sorted = true;
        } else {        /* every candidate kept: in id order, as without top-k */
            qsort(c, (size_t)m, sizeof *c, cmp_cand_id);
        }
        for (int i = 0; i < m; i++) sum += c[i].p;
    } else {
        for (int i = 0; i < n; i++) {
            float z = l[i] * inv_t - mx;
            if (!(z >= -40.0f)) continue;
            float e = expf(z);
            c[m].p = e;
            c[m].id = i;
            m++;
            sum += e;
        }
    }
    if (p->top_p < 1.0f) {
        /* the smallest head whose mass reaches top_p of the whole: sorted a growing head
         * at a time (after top-k the head is already sorted) */
        double acc = 0, lim = p->top_p * sum;
        int done = 0, t = sorted || m <= 256 ? m : 256, cut = m;
        if (!sorted) cand_head(c, m, t);
        for (;;) {
            for (; done < t; done++) {
                acc += c[done].p;
                if (acc >= lim) { cut = done + 1; break; }
            }
            if (done < t || t == m) break;
            /* extend the sorted head: select among the rest */
            int t2 = t * 4 < m ? t * 4 : m;
            cand_head(c + t, m - t, t2 - t);
            t = t2;
        }
        m = cut;
        sum = 0;
        for (int i = 0; i < m; i++) sum += c[i].p;
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
    return draw(s, c, &c[0].p, sizeof *c / sizeof(float), m, sum);
}

const char *tern_stop_reason_str(tern_stop_reason r) {
    /* indexed by the enum's values (tern.h: 0..5) */
    static const char *const name[] = {"none", "eog", "stop_string", "max_tokens", "context_full", "cancelled"};
    return (unsigned)r < sizeof name / sizeof name[0] ? name[r] : "unknown";
}
