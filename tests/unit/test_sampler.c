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

int main(void) {
    RUN(greedy);
    RUN(temperature_matches_softmax);
    RUN(top_k_never_outside);
    RUN(top_p_and_min_p);
    RUN(penalties);
    RUN(seed_reproducible);
    RUN(bad_params);
    RUN(stop_scan);
    return check_summary();
}
