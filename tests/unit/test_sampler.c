/*
 * test_sampler.c - sampling statistics and reproducibility. Expected values are
 * computed here in double precision from the definitions (softmax, top-k/p,
 * min-p, penalties), not by the sampler.
 */
#include "check.h"
#include "tern.h"

#include <math.h>
#include <string.h>

static tern_sampler *mk(float temp, int k, float top_p, float min_p, uint64_t seed, int nv) {
    tern_sampler_params p;
    tern_sampler_params_default(&p);
    p.temperature = temp; p.top_k = k; p.top_p = top_p; p.min_p = min_p; p.seed = seed;
    tern_sampler *s = NULL;
    CHECK(tern_sampler_new(&p, nv, &s) == TERN_OK);
    return s;
}

TEST(greedy) {
    float l[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, -5.0f};
    tern_sampler *s = mk(0.0f, 0, 1.0f, 0.0f, 1, 6);
    CHECK_EQ_INT(tern_sampler_sample(s, l), 1); /* tie between 1 and 3: lowest id */
    l[3] = 2.5f;
    CHECK_EQ_INT(tern_sampler_sample(s, l), 3);
    tern_sampler_free(s);
}

/* temperature: frequencies match softmax(l / T) */
TEST(temperature_matches_softmax) {
    enum { NV = 8, DRAWS = 200000 };
    float l[NV] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, 1.5f, -1.0f, 0.2f};
    const float temps[3] = {0.7f, 1.0f, 1.6f};
    for (int ti = 0; ti < 3; ti++) {
        double T = temps[ti], z = 0, pe[NV];
        for (int i = 0; i < NV; i++) z += exp(l[i] / T);
        for (int i = 0; i < NV; i++) pe[i] = exp(l[i] / T) / z;
        tern_sampler *s = mk(temps[ti], 0, 1.0f, 0.0f, 1234 + ti, NV);
        int cnt[NV] = {0};
        for (int d = 0; d < DRAWS; d++) cnt[tern_sampler_sample(s, l)]++;
        double chi2 = 0;
        for (int i = 0; i < NV; i++) {
            double f = (double)cnt[i] / DRAWS;
            CHECK_NEAR(f, pe[i], 0.006);
            chi2 += (cnt[i] - DRAWS * pe[i]) * (cnt[i] - DRAWS * pe[i]) / (DRAWS * pe[i]);
        }
        /* 7 degrees of freedom: P(chi2 > 30) < 1e-4 */
        fprintf(stderr, "  T=%.1f chi2=%.2f (7 dof)\n", T, chi2);
        CHECK(chi2 < 30.0);
        tern_sampler_free(s);
    }
}

TEST(top_k_never_outside) {
    enum { NV = 1000 };
    static float l[NV];
    for (int i = 0; i < NV; i++) l[i] = (float)((i * 7919) % 1000) / 100.0f; /* distinct */
    /* the 5 largest, found independently */
    int top[5];
    for (int r = 0; r < 5; r++) {
        int b = -1;
        for (int i = 0; i < NV; i++) {
            int used = 0;
            for (int q = 0; q < r; q++) used |= top[q] == i;
            if (!used && (b < 0 || l[i] > l[b])) b = i;
        }
        top[r] = b;
    }
    tern_sampler *s = mk(5.0f, 5, 1.0f, 0.0f, 99, NV); /* high T: flat, so k is what limits */
    int seen[5] = {0}, outside = 0;
    for (int d = 0; d < 20000; d++) {
        int id = tern_sampler_sample(s, l), in = 0;
        for (int q = 0; q < 5; q++) if (id == top[q]) { in = 1; seen[q]++; }
        outside += !in;
    }
    CHECK_EQ_INT(outside, 0);
    for (int q = 0; q < 5; q++) CHECK(seen[q] > 0);
    tern_sampler_free(s);
}

TEST(top_p_and_min_p) {
    /* probabilities 0.5, 0.3, 0.15, 0.05 at T = 1 */
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    tern_sampler *s = mk(1.0f, 0, 0.75f, 0.0f, 7, 4); /* 0.5 + 0.3 crosses 0.75: keep {0, 1} */
    int cnt[4] = {0};
    for (int d = 0; d < 50000; d++) cnt[tern_sampler_sample(s, l)]++;
    CHECK_EQ_INT(cnt[2] + cnt[3], 0);
    CHECK_NEAR(cnt[0] / 50000.0, 0.5 / 0.8, 0.01);
    tern_sampler_free(s);
    s = mk(1.0f, 0, 1.0f, 0.2f, 8, 4); /* keep p >= 0.2 * 0.5 = 0.1: {0, 1, 2} */
    memset(cnt, 0, sizeof cnt);
    for (int d = 0; d < 50000; d++) cnt[tern_sampler_sample(s, l)]++;
    CHECK_EQ_INT(cnt[3], 0);
    CHECK(cnt[2] > 0);
    CHECK_NEAR(cnt[2] / 50000.0, 0.15 / 0.95, 0.01);
    tern_sampler_free(s);
}

TEST(penalties) {
    tern_sampler_params p;
    tern_sampler_params_default(&p);
    p.temperature = 0;
    tern_sampler *s;
    /* repetition: positive logit divided, negative multiplied */
    p.repeat_penalty = 2.0f;
    CHECK(tern_sampler_new(&p, 3, &s) == TERN_OK);
    float l[3] = {2.0f, 1.5f, -3.0f};
    CHECK_EQ_INT(tern_sampler_sample(s, l), 0);
    tern_sampler_accept(s, 0);
    tern_sampler_accept(s, 0); /* applied once per distinct token */
    CHECK_EQ_INT(tern_sampler_sample(s, l), 1); /* 2.0 / 2 = 1.0 < 1.5 */
    tern_sampler_free(s);
    float l2[3] = {-1.0f, -1.5f, -3.0f};
    CHECK(tern_sampler_new(&p, 3, &s) == TERN_OK);
    tern_sampler_accept(s, 0);
    CHECK_EQ_INT(tern_sampler_sample(s, l2), 1); /* -1 * 2 = -2 < -1.5 */
    tern_sampler_free(s);
    /* presence */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.5f;
    float l3[3] = {1.0f, 0.9f, 0.0f};
    CHECK(tern_sampler_new(&p, 3, &s) == TERN_OK);
    tern_sampler_accept(s, 0);
    CHECK_EQ_INT(tern_sampler_sample(s, l3), 1);
    tern_sampler_free(s);
    /* frequency: count-weighted */
    p.presence_penalty = 0;
    p.frequency_penalty = 0.08f;
    CHECK(tern_sampler_new(&p, 3, &s) == TERN_OK);
    tern_sampler_accept(s, 0);
    CHECK_EQ_INT(tern_sampler_sample(s, l3), 0); /* 1.0 - 0.08 = 0.92 > 0.9 */
    tern_sampler_accept(s, 0);
    CHECK_EQ_INT(tern_sampler_sample(s, l3), 1); /* 1.0 - 0.16 = 0.84 < 0.9 */
    tern_sampler_free(s);
    /* window: only the last n count */
    p.frequency_penalty = 0;
    p.presence_penalty = 0.5f;
    p.penalty_last_n = 2;
    CHECK(tern_sampler_new(&p, 3, &s) == TERN_OK);
    tern_sampler_accept(s, 0);
    tern_sampler_accept(s, 2);
    tern_sampler_accept(s, 2); /* 0 left the window */
    CHECK_EQ_INT(tern_sampler_sample(s, l3), 0);
    tern_sampler_free(s);
}

TEST(seed_reproducible) {
    enum { NV = 50 };
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = sinf((float)i) * 2.0f;
    tern_sampler *a = mk(1.0f, 20, 0.9f, 0.01f, 42, NV), *b = mk(1.0f, 20, 0.9f, 0.01f, 42, NV),
                 *c = mk(1.0f, 20, 0.9f, 0.01f, 43, NV);
    int same_ab = 1, same_ac = 1;
    int32_t first[200];
    for (int d = 0; d < 200; d++) {
        int32_t x = tern_sampler_sample(a, l), y = tern_sampler_sample(b, l), z = tern_sampler_sample(c, l);
        first[d] = x;
        same_ab &= x == y;
        same_ac &= x == z;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
    tern_sampler_reset(a); /* reset reseeds: the same sequence again */
    int again = 1;
    for (int d = 0; d < 200; d++) again &= tern_sampler_sample(a, l) == first[d];
    CHECK(again);
    tern_sampler_free(a); tern_sampler_free(b); tern_sampler_free(c);
}

TEST(bad_params) {
    tern_sampler_params p;
    tern_sampler_params_default(&p);
    tern_sampler *s = NULL;
    p.top_p = 0;
    CHECK(tern_sampler_new(&p, 10, &s) == TERN_ERR_INVALID_ARG);
    tern_sampler_params_default(&p);
    p.top_k = -1;
    CHECK(tern_sampler_new(&p, 10, &s) == TERN_ERR_INVALID_ARG);
    tern_sampler_params_default(&p);
    p.repeat_penalty = 0;
    CHECK(tern_sampler_new(&p, 10, &s) == TERN_ERR_INVALID_ARG);
    tern_sampler_params_default(&p);
    CHECK(tern_sampler_new(&p, 0, &s) == TERN_ERR_INVALID_ARG);
    CHECK(s == NULL);
    CHECK_STR(tern_stop_reason_str(TERN_STOP_CONTEXT_FULL), "context_full");
    CHECK_STR(tern_stop_reason_str(TERN_STOP_NONE), "none");
    CHECK_STR(tern_stop_reason_str(TERN_STOP_EOG), "eog");
    CHECK_STR(tern_stop_reason_str(TERN_STOP_STRING), "stop_string");
    CHECK_STR(tern_stop_reason_str(TERN_STOP_MAX_TOKENS), "max_tokens");
    CHECK_STR(tern_stop_reason_str(TERN_STOP_CANCELLED), "cancelled");
    CHECK_STR(tern_stop_reason_str((tern_stop_reason)99), "unknown");
}

/* The stop-string rule shared by tern_generate and the server, on hand-made cases. */
TEST(stop_scan) {
    const char *stops[] = {"END", "", "\n\n", "xyz"};
    bool m;
    /* no stop string, no prefix at the end: all safe */
    CHECK_EQ_INT(tern_stop_scan("hello", 5, 0, stops, 4, &m), 5);
    CHECK(!m);
    /* "EN" could become "END": held back */
    CHECK_EQ_INT(tern_stop_scan("hello EN", 8, 5, stops, 4, &m), 6);
    CHECK(!m);
    /* "x" and "xy" held ("xyz"), "\n" held ("\n\n") */
    CHECK_EQ_INT(tern_stop_scan("abxy", 4, 2, stops, 4, &m), 2);
    CHECK_EQ_INT(tern_stop_scan("ab\n", 3, 2, stops, 4, &m), 2);
    CHECK(!m);
    /* a match that spans the old and the new text */
    CHECK_EQ_INT(tern_stop_scan("done EN" "D more", 13, 7, stops, 4, &m), 5);
    CHECK(m);
    /* a match wholly inside the old text is not new: not reported again */
    CHECK_EQ_INT(tern_stop_scan("END and more", 12, 11, stops, 4, &m), 12);
    CHECK(!m);
    /* two stop strings in the new text: the earliest wins whatever their order */
    CHECK_EQ_INT(tern_stop_scan("a xyz b\n\nc", 10, 0, stops + 2, 2, &m), 2);
    CHECK(m);
    CHECK_EQ_INT(tern_stop_scan("a\n\nb xyz", 8, 0, stops + 2, 2, &m), 1);
    CHECK(m);
    /* the empty string never matches; no stop strings at all */
    CHECK_EQ_INT(tern_stop_scan("abc", 3, 0, stops + 1, 1, &m), 3);
    CHECK(!m);
    CHECK_EQ_INT(tern_stop_scan("", 0, 0, NULL, 0, &m), 0);
    CHECK(!m);
}

/* ---- llama.cpp's stages: each against a hand-computed expectation */

/* Which ids `draws` samples give (bitmask over nv <= 32 ids). */
static unsigned seen_ids(tern_sampler *s, const float *l, int draws) {
    unsigned m = 0;
    for (int d = 0; d < draws; d++) m |= 1u << tern_sampler_sample(s, l);
    return m;
}

static tern_sampler *mk_p(const tern_sampler_params *p, int nv) {
    tern_sampler *s = NULL;
    CHECK(tern_sampler_new(p, nv, &s) == TERN_OK);
    return s;
}

static void plain(tern_sampler_params *p) {
    tern_sampler_params_default(p);
    p->temperature = 1; p->top_k = 0; p->top_p = 1; p->min_p = 0; p->seed = 7;
}

/* p = (1/2, 1/4, 1/8, 1/8): entropy H = 1.75 ln2; |-ln p - H| = (0.75, 0.25, 1.25, 1.25) ln2, so the
 * typical order is 1, 0, {2, 3}: typical_p 0.2 keeps {1} (0.25 >= 0.2), 0.5 keeps {1, 0} (0.75),
 * 0.8 keeps all four (0.75 < 0.8, then 0.875 with token 2 and token 3 as the tie's second). */
TEST(typical_p) {
    float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    tern_sampler_params p;
    plain(&p);
    p.typical_p = 0.2f;
    tern_sampler *s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0x2);
    tern_sampler_free(s);
    p.typical_p = 0.5f;
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0x3);
    tern_sampler_free(s);
    p.typical_p = 0.8f;
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 4000), 0x7);    /* 2 enters with 0.875 >= 0.8; 3 (after 2) does not */
    tern_sampler_free(s);
    p.typical_p = 0.2f; p.min_keep = 3;         /* min_keep: three kept: 1, 0, 2 */
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 4000), 0x7);
    tern_sampler_free(s);
}

/* XTC with probability 1: tokens with p >= 0.2 are 0 (0.5) and 1 (0.25): 0 goes, 1 stays; with
 * threshold 0.3 only token 0 qualifies (fewer than two): nothing goes. */
TEST(xtc) {
    float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    tern_sampler_params p;
    plain(&p);
    p.xtc_probability = 1; p.xtc_threshold = 0.2f;
    tern_sampler *s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0xE);
    tern_sampler_free(s);
    p.xtc_threshold = 0.3f;
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0xF);
    tern_sampler_free(s);
    /* frequencies with threshold 0.2: the renormalised (0, 0.5, 0.25, 0.25) */
    p.xtc_threshold = 0.2f;
    s = mk_p(&p, 4);
    int cnt[4] = {0};
    for (int d = 0; d < 40000; d++) cnt[tern_sampler_sample(s, l)]++;
    CHECK_NEAR(cnt[1] / 40000.0, 0.5, 0.015);
    CHECK_NEAR(cnt[2] / 40000.0, 0.25, 0.015);
    tern_sampler_free(s);
}

/* top_n_sigma on logits (4, 3, 0, 0): mean 1.75, sigma = sqrt(12.75 / 4) = 1.785; n = 1 keeps
 * logits >= 2.215 (ids 0, 1), n = 0.5 keeps >= 3.107 (id 0 only), n = 3 keeps all. */
TEST(top_n_sigma) {
    float l[4] = {4, 3, 0, 0};
    tern_sampler_params p;
    plain(&p);
    p.top_n_sigma = 1;
    tern_sampler *s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0x3);
    tern_sampler_free(s);
    p.top_n_sigma = 0.5f;
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0x1);
    tern_sampler_free(s);
    p.top_n_sigma = 3;
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 20000), 0xF);
    tern_sampler_free(s);
}

/* DRY, greedy: history 1 2 3 4 1 2 3: token 4 would extend the repeat "1 2 3" (n = 3): with
 * multiplier 1, base 2, allowed length 2 it loses 1 * 2^(3-2) = 2: its 1.5 becomes -0.5 and the
 * argmax is id 0 (logit 0). With 2 a breaker the repeat is "3" only (n = 1 < 2): no penalty. */
TEST(dry) {
    float l[6] = {0, 0, 0, 0, 1.5f, 0};
    const int32_t hist[7] = {1, 2, 3, 4, 1, 2, 3};
    tern_sampler_params p;
    plain(&p);
    p.temperature = 0;
    p.dry_multiplier = 1; p.dry_base = 2; p.dry_allowed_length = 2;
    tern_sampler *s = mk_p(&p, 6);
    for (int i = 0; i < 7; i++) tern_sampler_accept(s, hist[i]);
    CHECK_EQ_INT(tern_sampler_sample(s, l), 0);
    l[4] = 2.1f;                                /* 2.1 - 2 = 0.1 > 0: 4 again */
    CHECK_EQ_INT(tern_sampler_sample(s, l), 4);
    tern_sampler_free(s);
    l[4] = 1.5f;
    const int32_t br[1] = {2};
    p.dry_breakers = br; p.n_dry_breakers = 1;
    s = mk_p(&p, 6);
    for (int i = 0; i < 7; i++) tern_sampler_accept(s, hist[i]);
    CHECK_EQ_INT(tern_sampler_sample(s, l), 4);
    tern_sampler_free(s);
    /* allowed length 4: n = 3 < 4, no penalty; "samplers" without dry: off */
    p.dry_breakers = NULL; p.n_dry_breakers = 0; p.dry_allowed_length = 4;
    s = mk_p(&p, 6);
    for (int i = 0; i < 7; i++) tern_sampler_accept(s, hist[i]);
    CHECK_EQ_INT(tern_sampler_sample(s, l), 4);
    tern_sampler_free(s);
    p.dry_allowed_length = 2; p.samplers = "top_k;temperature";
    s = mk_p(&p, 6);
    for (int i = 0; i < 7; i++) tern_sampler_accept(s, hist[i]);
    CHECK_EQ_INT(tern_sampler_sample(s, l), 4);
    tern_sampler_free(s);
}

/* samplers order: top_k 2 then temperature vs. min_p 0.3 before / after temperature 4 on
 * p = (0.5, 0.25, 0.125, 0.125): min_p first keeps p >= 0.15 (ids 0, 1); temperature 4 first
 * flattens to p ~ (0.297, 0.25, 0.210, 0.210) and min_p 0.3 * 0.297 keeps all four. */
TEST(samplers_order_and_min_keep) {
    float l[4] = {logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f)};
    tern_sampler_params p;
    plain(&p);
    p.temperature = 4; p.min_p = 0.3f;
    p.samplers = "min_p;temperature";
    tern_sampler *s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 2000), 0x3);
    tern_sampler_free(s);
    p.samplers = "temperature;min_p";
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 4000), 0xF);
    tern_sampler_free(s);
    p.samplers = "top_k;bogus";
    s = NULL;
    CHECK(tern_sampler_new(&p, 4, &s) == TERN_ERR_INVALID_ARG);
    CHECK(s == NULL);
    /* min_keep: top_p tiny keeps one token, min_keep 3 keeps three */
    plain(&p);
    p.top_p = 1e-6f;
    p.min_keep = 3;
    s = mk_p(&p, 4);
    CHECK_EQ_INT(seen_ids(s, l, 4000), 0x7);
    tern_sampler_free(s);
    /* bad values of the new fields */
    plain(&p);
    p.typical_p = 0;
    CHECK(tern_sampler_new(&p, 4, &s) == TERN_ERR_INVALID_ARG);
    plain(&p);
    p.xtc_probability = 2;
    CHECK(tern_sampler_new(&p, 4, &s) == TERN_ERR_INVALID_ARG);
}


/* ---- the fast paths (blocked argmax, top-k by heap, top-p by a growing sorted head) against
 * the plain algorithm written here from the definitions: every candidate's probability, one
 * full sort (probability descending, ties by id), top-k, top-p, min-p, then the draw with the
 * documented generator (xoshiro256** seeded by splitmix64, u in [0, 1) from 53 bits, times
 * the kept mass, first cumulative sum above it). */
static uint64_t ref_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t ref_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static double ref_unit(uint64_t *s) {
    uint64_t r = ref_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = ref_rotl(s[3], 45);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0);
}
struct rc { float p; int id; };
static int ref_cmp(const void *a, const void *b) {
    const struct rc *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}
static int ref_sample(const float *l, int n, float T, int k, float top_p, float min_p, uint64_t *rng, struct rc *c) {
    int best = 0;
    for (int i = 1; i < n; i++) if (l[i] > l[best]) best = i;
    if (T <= 0) return best;
    float inv_t = 1.0f / T, mx = l[best] * inv_t;
    int m = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float z = l[i] * inv_t - mx;
        if (!(z >= -40.0f)) continue;
        c[m].p = expf(z); c[m].id = i; sum += c[m].p; m++;
    }
    /* sorted when top-k cuts or top-p applies; otherwise the draw walks the ids in order and
     * the whole mass is summed in id order */
    if ((k > 0 && k < m) || top_p < 1) qsort(c, (size_t)m, sizeof *c, ref_cmp);
    if (k > 0 && k < m) {                 /* the kept head's mass, summed in order */
        m = k;
        sum = 0;
        for (int i = 0; i < m; i++) sum += c[i].p;
    }
    if (top_p < 1) {
        double acc = 0, lim = top_p * sum;
        for (int i = 0; i < m; i++) { acc += c[i].p; if (acc >= lim) { m = i + 1; break; } }
        sum = 0;
        for (int i = 0; i < m; i++) sum += c[i].p;
    }
    if (min_p > 0) {
        int j = 0;
        sum = 0;
        for (int i = 0; i < m; i++) if (c[i].p >= min_p) { c[j++] = c[i]; sum += c[i].p; }
        m = j;
    }
    double u = ref_unit(rng) * sum, acc = 0;
    for (int i = 0; i < m; i++) { acc += c[i].p; if (u < acc) return c[i].id; }
    return c[m - 1].id;
}

TEST(fast_paths_equal_full_sort) {
    enum { NMAX = 50021 };               /* not a multiple of the argmax's block */
    static float l[NMAX];
    static struct rc c[NMAX];
    const int sizes[] = {300, NMAX};
    const float temps[] = {0.5f, 1.0f, 2.0f};
    const int ks[] = {0, 1, 40, 3000};
    const float tps[] = {1.0f, 0.9f, 0.3f}, mps[] = {0.0f, 0.05f};
    int cases = 0, draws = 0;
    for (int si = 0; si < 2; si++) {
        int n = sizes[si];
        /* 97 distinct values a multiple of 1/8 apart (many ties; exp keeps them apart), and a
         * wide low tail below the 40 cut */
        for (int i = 0; i < n; i++) l[i] = (float)((i * 7919 + 13) % 97) / 8.0f - 6.0f - (i % 5 == 0 ? 60.0f : 0.0f);
        for (int ti = 0; ti < 3; ti++)
            for (int ki = 0; ki < 4; ki++)
                for (int pi = 0; pi < 3; pi++)
                    for (int mi = 0; mi < 2; mi++) {
                        uint64_t seed = 1000u + (uint64_t)cases, x = seed, rng[4];
                        for (int r = 0; r < 4; r++) rng[r] = ref_splitmix(&x);
                        tern_sampler *s = mk(temps[ti], ks[ki], tps[pi], mps[mi], seed, n);
                        for (int d = 0; d < 20; d++) {
                            int want = ref_sample(l, n, temps[ti], ks[ki], tps[pi], mps[mi], rng, c);
                            int got = tern_sampler_sample(s, l);
                            CHECK_MSG(got == want, "n %d T %.1f top_k %d top_p %.1f min_p %.2f draw %d: %d, the plain "
                                      "algorithm %d", n, temps[ti], ks[ki], tps[pi], mps[mi], d, got, want);
                            if (got != want) break;
                            draws++;
                        }
                        tern_sampler_free(s);
                        cases++;
                    }
    }
    fprintf(stderr, "  %d settings, %d draws equal\n", cases, draws);
    /* greedy: ties, the last block, the tail, -inf and a NaN first */
    for (int i = 0; i < NMAX; i++) l[i] = (float)(i % 1000) / 1000.0f;
    tern_sampler *s = mk(0.0f, 0, 1.0f, 0.0f, 1, NMAX);
    CHECK_EQ_INT(tern_sampler_sample(s, l), 999);           /* the first of many equal maxima */
    l[NMAX - 1] = 5.0f;
    CHECK_EQ_INT(tern_sampler_sample(s, l), NMAX - 1);      /* in the tail after the blocks */
    l[NMAX - 1] = 0.0f;
    l[40000] = NAN; l[40001] = 7.0f;
    CHECK_EQ_INT(tern_sampler_sample(s, l), 40001);          /* a NaN never wins */
    l[0] = NAN;
    CHECK_EQ_INT(tern_sampler_sample(s, l), 0);              /* a NaN at 0: 0, as a scan from 0 */
    for (int i = 0; i < NMAX; i++) l[i] = -INFINITY;
    l[777] = -1e30f;
    CHECK_EQ_INT(tern_sampler_sample(s, l), 777);
    tern_sampler_free(s);
}

int main(void) {
    RUN(greedy);
    RUN(temperature_matches_softmax);
    RUN(top_k_never_outside);
    RUN(top_p_and_min_p);
    RUN(penalties);
    RUN(seed_reproducible);
    RUN(bad_params);
    RUN(stop_scan);
    RUN(typical_p);
    RUN(xtc);
    RUN(top_n_sigma);
    RUN(dry);
    RUN(samplers_order_and_min_keep);
    RUN(fast_paths_equal_full_sort);
    return check_summary();
}
