/*
 * test_spec.c - speculative decoding (issue 24).
 *
 *   verify_rows      tern_session_verify over n = 1..12 tokens gives rows bit-identical to
 *                    evaluating them one at a time (every model: the embedded default,
 *                    qwen35-tiny PQ2_0 with GDN layers, qwen3-tiny Q2_0), and
 *                    tern_session_verify_keep(j) leaves the session bit-identical (KV
 *                    rows, GDN conv + recurrent states, logits) to one that evaluated only
 *                    the j kept tokens: the next token's logits and the states compared;
 *                    odd n with no buffer (the rows read through tern_session_verify_rows)
 *   verify_repeat    one session verifying 3 and 5 rows again and again (CUDA: op by op,
 *                    then its recorded verify graphs replayed), each pass bit-identical;
 *                    the last four with no buffer (on CUDA the graph's own rows)
 *   greedy_same      tern_generate with speculation (prompt lookup, k = 1..8, and a
 *                    draft model: the model drafting for itself) gives the same tokens as
 *                    plain greedy, on every model
 *   draft_tokenizer  a drafter whose tokenizer differs is refused, naming the difference
 *   sample_dist      rejection sampling keeps the distribution: tern_sampler_sample_draft
 *                    on fixed logits (chi-square against the exact probabilities), and
 *                    sampled generation with and without speculation (the second and third
 *                    tokens' frequencies over many seeds, two-sample chi-square)
 * TERN_TEST_DEVICE=cuda runs the models on the CUDA back-end (skipped without one).
 * TERN_SANITIZED=1 (the ASan/UBSan run) checks k = 1, 3, 8, row counts 1-3, 5, 8, 12 and 450
 * seeds instead of 700: the release run checks every one.
 */
#include "check.h"
#include "model/session.h"
#include "tern.h"

#include <stdint.h>

static const char *g_device; /* NULL: cpu */
static bool g_small;       /* TERN_SANITIZED: fewer k, row counts and seeds (the release run has them all) */
static bool g_no_device;

static const char *default_model_path(void) {
    static char p[1024];
    const char *src = getenv("TERN_SOURCE_DIR");
    if (!src || !*src) src = ".";
    snprintf(p, sizeof p, "%s/models/tern-default.gguf", src);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fclose(f);
    return p;
}

static bool g_no_repack; /* weights in the file layout (the AVX-512 GEMM from 10 rows) */

static tern_model *load(const char *path) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    mp.repack = !g_no_repack;
    mp.device = g_device;
    tern_model *m = NULL;
    tern_status st = tern_model_load(path, &mp, &m);
    if (st == TERN_ERR_UNSUPPORTED && g_device) {
        g_no_device = true;
        return NULL;
    }
    CHECK_MSG(st == TERN_OK, "load %s: %s", path, tern_last_error());
    return st ? NULL : m;
}

static tern_session *new_session(tern_model *m, int n_ctx) {
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    tern_session *s = NULL;
    tern_status st = tern_session_new(m, &sp, &s);
    CHECK_MSG(st == TERN_OK, "session: %s", tern_last_error());
    return s;
}

/* The models: path list (NULL-terminated). */
static int model_paths(const char *out[8]) {
    int n = 0;
    const char *d = default_model_path();
    if (d) out[n++] = d;
    const char *fx = fixtures_dir();
    static char p1[1024], p2[1024];
    if (fx) {
        snprintf(p1, sizeof p1, "%s/qwen35-tiny/model-pq2_0.gguf", fx);
        snprintf(p2, sizeof p2, "%s/qwen3-tiny/model-q2_0.gguf", fx);
        out[n++] = p1;
        out[n++] = p2;
    }
    out[n] = NULL;
    return n;
}

/* GDN states and the KV rows [0, pos) of a session, as host bytes (malloc'd). */
static unsigned char *state_bytes(tern_session *s, size_t *n) {
    const tm_hparams *hp = &s->m->hp;
    tm_backend *be = s->m->be;
    size_t conv = 0, ssm = 0;
    if (hp->n_gdn_layers) {
        size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
        conv = (size_t)hp->n_gdn_layers * (hp->conv_k - 1) * C * sizeof(float);
        ssm = (size_t)hp->n_gdn_layers * be->vt->gdn_state_floats(be, hp) * sizeof(float);
    }
    size_t kv = (size_t)hp->n_attn_layers * s->pos * (s->k_row + s->v_row);
    *n = conv + ssm + kv;
    unsigned char *b = malloc(*n + 1), *at = b;
    if (conv) tm_be_download(be, at, s->conv_state, conv), at += conv;
    if (ssm) tm_be_download(be, at, s->ssm_state, ssm), at += ssm;
    for (int l = 0; l < hp->n_attn_layers; l++) {
        tm_be_download(be, at, (char *)s->kcache + (size_t)l * s->n_ctx * s->k_row, s->pos * s->k_row);
        at += s->pos * s->k_row;
        tm_be_download(be, at, (char *)s->vcache + (size_t)l * s->n_ctx * s->v_row, s->pos * s->v_row);
        at += s->pos * s->v_row;
    }
    return b;
}

static const int32_t PROMPT[] = {9, 120, 33, 400, 7, 81, 256, 12, 5, 77, 300, 2, 19};
#define NP ((int)(sizeof PROMPT / sizeof PROMPT[0]))

TEST(verify_rows) {
    const char *paths[8];
    if (!model_paths(paths)) SKIP("no model (models/tern-default.gguf, fixtures)");
    /* fb = 1: the back-end's TM_CAP_EXACT_ROWS cleared (a copy of its table): the verify
     * runs its rows as single-token steps, the path of back-ends without exact rows;
     * fb = 2: the weights in the file layout, whose AVX-512 kernels switch to the GEMM at
     * 10 rows (the verify splits its matmuls there: tern_matmul_exact_batch) */
    for (int fb = 0; fb < (g_device ? 1 : 3); fb++) /* a device: its own path only */
    for (int mi = 0; paths[mi]; mi++) {
        g_no_repack = fb == 2;
        tern_model *m = load(paths[mi]);
        g_no_repack = false;
        if (!m) {
            if (g_no_device) SKIP("no %s device", g_device);
            continue;
        }
        tm_backend_vt vt_copy = *m->be->vt;
        const tm_backend_vt *vt_own = m->be->vt;
        if (fb) {
            vt_copy.caps &= ~(unsigned)TM_CAP_EXACT_ROWS;
            m->be->vt = &vt_copy;
        }
        const int V = tern_model_get_info(m)->n_vocab;
        enum { NMAX = 34 }; /* 1..12, then 34: the most a verify holds (2 * 16 + 2: deferred
                             * tokens, the pending one, 16 drafts) */
        float *rows = malloc((size_t)NMAX * V * sizeof(float)), *alone = malloc((size_t)NMAX * V * sizeof(float));
        int32_t d[NMAX];
        for (int i = 0; i < NMAX; i++) d[i] = (int32_t)((i * 7919 + mi * 31 + 11) % (V < 500 ? V : 500));
        for (int n = 1; n <= NMAX; n = n < 12 ? n + 1 : n == 12 && fb == 0 ? NMAX : NMAX + 1) {
            if (g_small && n > 3 && n < 12 && n != 5 && n != 8) continue;
            tern_session *a = new_session(m, 128), *b = new_session(m, 128);
            CHECK(tern_session_eval(a, PROMPT, NP, NULL) == TERN_OK);
            CHECK(tern_session_eval(b, PROMPT, NP, NULL) == TERN_OK);
            for (int i = 0; i < n; i++) {
                CHECK(tern_session_eval(a, &d[i], 1, NULL) == TERN_OK);
                memcpy(alone + (size_t)i * V, tern_session_logits(a), (size_t)V * sizeof(float));
            }
            /* odd n: no buffer, the rows read where the session left them */
            CHECK(tern_session_verify_rows(b) == NULL);
            CHECK(tern_session_verify(b, d, (size_t)n, n & 1 ? NULL : rows) == TERN_OK);
            const float *got = tern_session_verify_rows(b);
            CHECK(got != NULL && (n & 1 || got == rows));
            if (!got) got = rows;
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (memcmp(got + (size_t)i * V, alone + (size_t)i * V, (size_t)V * sizeof(float))) bad = i;
            CHECK_MSG(bad < 0, "%s%s: verify of %d rows%s: row %d differs from single-token decode", paths[mi],
                      fb == 1 ? " (rows one at a time)" : fb == 2 ? " (file layout)" : "", n,
                      n & 1 ? " (no buffer)" : "", bad);
            CHECK(tern_session_pos(b) == NP + n);
            /* keep j of n: the same as a session that evaluated only the j */
            int j = (n * 5) % (n + 1);
            CHECK(tern_session_verify_keep(b, j) == TERN_OK);
            CHECK(tern_session_verify_rows(b) == NULL); /* kept: no rows */
            CHECK(tern_session_verify_keep(b, j) == TERN_ERR_INVALID_ARG); /* settled already */
            tern_session *c = new_session(m, 128);
            CHECK(tern_session_eval(c, PROMPT, NP, NULL) == TERN_OK);
            for (int i = 0; i < j; i++) CHECK(tern_session_eval(c, &d[i], 1, NULL) == TERN_OK);
            CHECK(tern_session_pos(b) == tern_session_pos(c));
            CHECK_MSG(!memcmp(tern_session_logits(b), tern_session_logits(c), (size_t)V * sizeof(float)),
                      "%s: n %d keep %d: logits after the rollback differ", paths[mi], n, j);
            size_t nb, nc;
            unsigned char *sb = state_bytes(b, &nb), *sc = state_bytes(c, &nc);
            CHECK_MSG(nb == nc && !memcmp(sb, sc, nb), "%s: n %d keep %d: states after the rollback differ", paths[mi],
                      n, j);
            free(sb);
            free(sc);
            int32_t x = 3;
            CHECK(tern_session_eval(b, &x, 1, NULL) == TERN_OK);
            CHECK(tern_session_eval(c, &x, 1, NULL) == TERN_OK);
            CHECK_MSG(!memcmp(tern_session_logits(b), tern_session_logits(c), (size_t)V * sizeof(float)),
                      "%s: n %d keep %d: the next token's logits differ", paths[mi], n, j);
            tern_session_free(a);
            tern_session_free(b);
            tern_session_free(c);
        }
        free(rows);
        free(alone);
        m->be->vt = vt_own;
        tern_model_free(m);
    }
}


/* verify_repeat: one session verifies rows of the same counts again and again (a
 * back-end may run the first op by op, record the second into a graph and replay the
 * rest: CUDA), every pass's rows bit-identical to single-token decode, all kept. */
TEST(verify_repeat) {
    const char *paths[8];
    if (!model_paths(paths)) SKIP("no model (models/tern-default.gguf, fixtures)");
    for (int mi = 0; paths[mi]; mi++) {
        tern_model *m = load(paths[mi]);
        if (!m) {
            if (g_no_device) SKIP("no %s device", g_device);
            continue;
        }
        const int V = tern_model_get_info(m)->n_vocab;
        enum { NR = 5 };
        float *rows = malloc((size_t)NR * V * sizeof(float)), *alone = malloc((size_t)NR * V * sizeof(float));
        tern_session *a = new_session(m, 128), *b = new_session(m, 128);
        CHECK(tern_session_eval(a, PROMPT, NP, NULL) == TERN_OK);
        CHECK(tern_session_eval(b, PROMPT, NP, NULL) == TERN_OK);
        int tok = 0;
        for (int pass = 0; pass < 8; pass++) {
            const int n = pass & 1 ? NR : 3;
            int32_t d[NR];
            for (int i = 0; i < n; i++) d[i] = (int32_t)((tok++ * 7919 + mi * 31 + 5) % (V < 500 ? V : 500));
            for (int i = 0; i < n; i++) {
                CHECK(tern_session_eval(a, &d[i], 1, NULL) == TERN_OK);
                memcpy(alone + (size_t)i * V, tern_session_logits(a), (size_t)V * sizeof(float));
            }
            /* passes 4..7 with no buffer: the rows read where the session left them (on a
             * device, in the replayed graph's page-locked buffer) */
            CHECK(tern_session_verify(b, d, (size_t)n, pass >= 4 ? NULL : rows) == TERN_OK);
            const float *got = tern_session_verify_rows(b);
            CHECK(got != NULL);
            if (!got) got = rows;
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (memcmp(got + (size_t)i * V, alone + (size_t)i * V, (size_t)V * sizeof(float))) bad = i;
            CHECK_MSG(bad < 0, "%s: pass %d (%d rows): row %d differs from single-token decode", paths[mi], pass, n,
                      bad);
            CHECK(tern_session_verify_keep(b, n) == TERN_OK);
            CHECK_MSG(!memcmp(tern_session_logits(a), tern_session_logits(b), (size_t)V * sizeof(float)),
                      "%s: pass %d: the session's logits differ", paths[mi], pass);
        }
        tern_session_free(a);
        tern_session_free(b);
        free(rows);
        free(alone);
        tern_model_free(m);
    }
}

/* ------------------------------------------------------------ generation */

typedef struct run_cfg {
    tern_drafter *d;
    int k;
    float temp;
    uint64_t seed;
    int n;
} run_cfg;

/* Generate from a fresh session; returns the ids (malloc'd, *n_out) and the stats. */
static int32_t *gen_ids(tern_model *m, const tern_tokenizer *t, const int32_t *prompt, size_t np, const run_cfg *c,
                        size_t *n_out, tern_gen_result *stats) {
    tern_session *s = new_session(m, 512);
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = c->temp;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.02f;
    sp.repeat_penalty = 1.1f;
    sp.seed = c->seed;
    tern_sampler *smp = NULL;
    CHECK(tern_sampler_new(&sp, tern_model_get_info(m)->n_vocab, &smp) == TERN_OK);
    tern_gen_params gp;
    memset(&gp, 0, sizeof gp);
    gp.max_tokens = c->n;
    gp.ignore_eos = true;
    gp.drafter = c->d;
    gp.spec_k = c->k;
    gp.spec_always = true; /* the same drafts whatever the timing */
    tern_gen_result r;
    tern_status st = tern_generate(s, t, smp, prompt, np, &gp, &r);
    CHECK_MSG(st == TERN_OK, "generate: %s", tern_last_error());
    int32_t *ids = malloc((r.tokens.n + 1) * sizeof *ids);
    memcpy(ids, r.tokens.ids, r.tokens.n * sizeof *ids);
    *n_out = r.tokens.n;
    if (stats) *stats = r, memset(&stats->tokens, 0, sizeof stats->tokens), memset(&stats->text, 0, sizeof stats->text);
    /* the session holds exactly the prompt and the reply, as without speculation (each
     * chosen id is evaluated before max_tokens stops the next choice) */
    CHECK_EQ_INT(tern_session_pos(s), (long long)(np + r.tokens.n));
    tern_gen_result_free(&r);
    tern_sampler_free(smp);
    tern_session_free(s);
    return ids;
}

static const char *REPEAT_TEXT =
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick";

TEST(greedy_same) {
    const char *paths[8];
    if (!model_paths(paths)) SKIP("no model (models/tern-default.gguf, fixtures)");
    for (int mi = 0; paths[mi]; mi++) {
        tern_model *m = load(paths[mi]);
        if (!m) {
            if (g_no_device) SKIP("no %s device", g_device);
            continue;
        }
        tern_tokenizer *t = NULL;
        CHECK(tern_tokenizer_load(paths[mi], &t) == TERN_OK);
        tern_tokens ids = {0};
        CHECK(tern_tokenize(t, REPEAT_TEXT, strlen(REPEAT_TEXT), false, &ids) == TERN_OK);
        run_cfg c = {NULL, 0, 0.0f, 1, 64};
        size_t n0;
        int32_t *plain = gen_ids(m, t, ids.ids, ids.n, &c, &n0, NULL);
        /* prompt lookup at every k, and the model drafting for itself (long accepted runs) */
        tern_drafter *ng = NULL, *self = NULL, *sib = NULL;
        CHECK(tern_drafter_ngram_new(0, 0, &ng) == TERN_OK);
        CHECK(tern_drafter_model_new(m, t, t, 512, &self) == TERN_OK);
        /* a sibling (another quantisation of the same weights, the same tokenizer):
         * drafts that are often rejected (the rollback path, GDN states included) */
        char sp[1100];
        const char *slash = strrchr(paths[mi], '/');
        tern_model *sm = NULL;
        tern_tokenizer *st_ = NULL;
        if (strstr(paths[mi], "qwen35-tiny/")) snprintf(sp, sizeof sp, "%.*s/model-ptq1_0.gguf", (int)(slash - paths[mi]), paths[mi]);
        else if (strstr(paths[mi], "qwen3-tiny/")) snprintf(sp, sizeof sp, "%.*s/../qwen3-q1-tiny/model-q1_0.gguf", (int)(slash - paths[mi]), paths[mi]);
        else sp[0] = 0;
        FILE *sf = sp[0] ? fopen(sp, "rb") : NULL; /* optional: absent from a partial fixture copy */
        if (sf) fclose(sf);
        if (sf && (sm = load(sp)) && tern_tokenizer_load(sp, &st_) == TERN_OK) {
            tern_status dst = tern_drafter_model_new(sm, st_, t, 512, &sib);
            CHECK_MSG(dst == TERN_OK, "sibling drafter %s: %s", sp, tern_last_error());
        }
        size_t drafted = 0, accepted = 0, sib_d = 0, sib_a = 0;
        for (int k = 1; k <= 8; k++)
            for (int w = 0; w < 3; w++) {
                if (w == 2 && !sib) continue;
                if (g_small && k != 1 && k != 3 && k != 8) continue;
                c.d = w == 2 ? sib : w ? self : ng;
                c.k = k;
                size_t n1;
                tern_gen_result r;
                int32_t *spec = gen_ids(m, t, ids.ids, ids.n, &c, &n1, &r);
                drafted += r.spec_drafted;
                accepted += r.spec_accepted;
                size_t at = 0;
                while (at < n0 && at < n1 && plain[at] == spec[at]) at++;
                CHECK_MSG(n0 == n1 && at == n0, "%s: %s k %d: differs from plain greedy at token %zu of %zu", paths[mi],
                          w == 2 ? "sibling draft model" : w ? "draft model" : "ngram", k, at, n0);
                if (w == 2) sib_d += r.spec_drafted, sib_a += r.spec_accepted;
                if (w == 1) CHECK_MSG(r.spec_accepted > 0, "%s: k %d: the model drafting for itself was never accepted", paths[mi], k);
                free(spec);
            }
        printf("  %s: %zu drafted, %zu accepted (sibling draft model: %zu, %zu)\n", paths[mi], drafted, accepted, sib_d,
               sib_a);
        /* the embedded model (qwen35: GDN layers) rejects drafts: the rollback path of the loop */
        if (mi == 0 && paths[mi] == default_model_path())
            CHECK_MSG(accepted < drafted, "%s: every draft accepted: no rollback tested", paths[mi]);
        tern_drafter_free(sib);
        tern_model_free(sm);
        tern_tokenizer_free(st_);
        tern_drafter_free(ng);
        tern_drafter_free(self);
        free(plain);
        tern_tokens_free(&ids);
        tern_tokenizer_free(t);
        tern_model_free(m);
    }
}

/* Another model's tokenizer as a drafter: refused, naming the difference. */
TEST(draft_tokenizer) {
    const char *fx = fixtures_dir();
    if (!fx) SKIP("no fixtures");
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/qwen3-tiny/model-q2_0.gguf", fx);
    snprintf(b, sizeof b, "%s/qwen35-tiny/model-pq2_0.gguf", fx);
    tern_tokenizer *ta = NULL, *tb = NULL;
    CHECK(tern_tokenizer_load(a, &ta) == TERN_OK);
    CHECK(tern_tokenizer_load(b, &tb) == TERN_OK);
    CHECK(tern_tokenizer_compare(ta, ta) == TERN_OK);
    tern_model *mb = load(b);
    if (!mb) {
        if (g_no_device) SKIP("no %s device", g_device);
        return;
    }
    tern_drafter *d = NULL;
    tern_status st = tern_drafter_model_new(mb, tb, ta, 256, &d);
    CHECK(st == TERN_ERR_INVALID_ARG && !d);
    const char *msg = tern_last_error();
    CHECK_MSG(strstr(msg, "tokenizers differ") && (strstr(msg, "token ") || strstr(msg, "vocabulary") || strstr(msg, "merge") ||
                                                    strstr(msg, "pre-tokenizer")),
              "message: %s", msg);
    printf("  refused: %s\n", msg);
    /* the embedded model's tokenizer against a fixture's: the vocabulary size */
    const char *dp = default_model_path();
    if (dp) {
        tern_tokenizer *tc = NULL;
        CHECK(tern_tokenizer_load(dp, &tc) == TERN_OK);
        st = tern_tokenizer_compare(ta, tc);
        CHECK(st == TERN_ERR_INVALID_ARG && strstr(tern_last_error(), "vocabulary"));
        tern_tokenizer_free(tc);
    }
    tern_model_free(mb);
    tern_tokenizer_free(ta);
    tern_tokenizer_free(tb);
}

/* ------------------------------------------------------------ distributions */

/* The upper critical value of chi-square with df degrees of freedom at p = 1e-6
 * (Wilson-Hilferty; z = 4.753): the draws are deterministic (fixed seeds), so a rare
 * false alarm would fail every run; a real bias of a draft's probability by 0.5% already
 * gives a statistic of about 3x this at 60000 draws. */
static double chi2_crit(int df) {
    double z = 4.753, a = 2.0 / (9.0 * df);
    double c = 1 - a + z * sqrt(a);
    return df * c * c * c;
}

/* Two-sample chi-square over categories (counts a[i], b[i]), pooling those with fewer
 * than 10 expected into one; returns the statistic and *df. */
static double chi2_two(const int *a, const int *b, int n, int *df) {
    long na = 0, nb = 0;
    for (int i = 0; i < n; i++) na += a[i], nb += b[i];
    double stat = 0;
    long pa = 0, pb = 0;
    int cats = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] + b[i] < 20) { pa += a[i]; pb += b[i]; continue; }
        double t = a[i] + b[i], ea = t * na / (double)(na + nb), eb = t * nb / (double)(na + nb);
        stat += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
        cats++;
    }
    if (pa + pb >= 20) {
        double t = (double)(pa + pb), ea = t * na / (double)(na + nb), eb = t * nb / (double)(na + nb);
        stat += (pa - ea) * (pa - ea) / ea + (pb - eb) * (pb - eb) / eb;
        cats++;
    }
    *df = cats > 1 ? cats - 1 : 1;
    return stat;
}

TEST(sample_dist) {
    /* the sampler alone: fixed logits, drafts of a likely, an unlikely and an excluded id */
    enum { V = 64, N = 60000 };
    float logits[V];
    uint64_t x = 12345;
    for (int i = 0; i < V; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        logits[i] = (float)((x >> 11) % 1000) / 250.0f;
    }
    const char *orders[2] = {NULL, "top_k;typ_p;top_p;min_p;temperature"};
    for (int o = 0; o < 2; o++) {
        tern_sampler_params sp;
        tern_sampler_params_default(&sp);
        sp.temperature = 0.9f;
        sp.top_k = 30;
        sp.top_p = 0.9f;
        sp.min_p = 0.01f;
        sp.repeat_penalty = 1.2f;
        sp.samplers = orders[o];
        int drafts[3] = {0, 0, 0};
        { /* likely: the argmax; unlikely: the 10th; excluded: the least likely */
            int idx[V];
            for (int i = 0; i < V; i++) idx[i] = i;
            for (int i = 0; i < V; i++)
                for (int j = i + 1; j < V; j++)
                    if (logits[idx[j]] > logits[idx[i]]) { int t = idx[i]; idx[i] = idx[j]; idx[j] = t; }
            drafts[0] = idx[0], drafts[1] = idx[9], drafts[2] = idx[V - 1];
        }
        for (int dj = 0; dj < 3; dj++) {
            int ca[V] = {0}, cb[V] = {0};
            tern_sampler *a = NULL, *b = NULL;
            sp.seed = 7;
            CHECK(tern_sampler_new(&sp, V, &a) == TERN_OK);
            sp.seed = 99;
            CHECK(tern_sampler_new(&sp, V, &b) == TERN_OK);
            tern_sampler_accept(a, drafts[1]); /* a penalty on the unlikely draft, both */
            tern_sampler_accept(b, drafts[1]);
            int acc = 0;
            for (int i = 0; i < N; i++) {
                ca[tern_sampler_sample(a, logits)]++;
                int id = tern_sampler_sample_draft(b, logits, drafts[dj]);
                acc += id == drafts[dj];
                cb[id]++;
            }
            int df;
            double c2 = chi2_two(ca, cb, V, &df);
            CHECK_MSG(c2 < chi2_crit(df), "sampler order %d draft %d: chi-square %.1f over %d df (critical %.1f)", o, dj, c2,
                      df, chi2_crit(df));
            if (dj == 2) CHECK_EQ_INT(acc, 0); /* excluded by top-k: never kept */
            if (dj == 0) CHECK(acc > N / 20);
            tern_sampler_free(a);
            tern_sampler_free(b);
        }
    }
    /* generation: the second and third tokens (the first drafted ones) over many seeds */
    const char *fx = fixtures_dir();
    if (!fx) SKIP("no fixtures");
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen3-tiny/model-q2_0.gguf", fx);
    tern_model *m = load(path);
    if (!m) {
        if (g_no_device) SKIP("no %s device", g_device);
        return;
    }
    tern_tokenizer *t = NULL;
    CHECK(tern_tokenizer_load(path, &t) == TERN_OK);
    tern_tokens ids = {0};
    const char *txt = "The quick brown fox";
    CHECK(tern_tokenize(t, txt, strlen(txt), false, &ids) == TERN_OK);
    tern_drafter *self = NULL;
    CHECK(tern_drafter_model_new(m, t, t, 512, &self) == TERN_OK);
    const int V2 = tern_model_get_info(m)->n_vocab, SEEDS = g_small ? 450 : 700;
    int *c[2][2];
    for (int w = 0; w < 2; w++)
        for (int p = 0; p < 2; p++) c[w][p] = calloc((size_t)V2, sizeof(int));
    size_t acc = 0;
    for (int w = 0; w < 2; w++)
        for (int sd = 0; sd < SEEDS; sd++) {
            run_cfg rc = {w ? self : NULL, 4, 1.0f, (uint64_t)(sd * 2 + w) * 7919 + 1, 3};
            size_t n;
            tern_gen_result r;
            int32_t *out = gen_ids(m, t, ids.ids, ids.n, &rc, &n, &r);
            acc += r.spec_accepted;
            if (n == 3) c[w][0][out[1]]++, c[w][1][out[2]]++;
            free(out);
        }
    for (int p = 0; p < 2; p++) {
        int df;
        double c2 = chi2_two(c[0][p], c[1][p], V2, &df);
        printf("  token %d: chi-square %.1f over %d df (critical %.1f at p = 1e-6)\n", p + 2, c2, df, chi2_crit(df));
        CHECK_MSG(c2 < chi2_crit(df), "token %d: the sampled distribution moved with speculation", p + 2);
    }
    CHECK(acc > 0);
    for (int w = 0; w < 2; w++)
        for (int p = 0; p < 2; p++) free(c[w][p]);
    tern_drafter_free(self);
    tern_tokens_free(&ids);
    tern_tokenizer_free(t);
    tern_model_free(m);
}

/* Prompt lookup without a model: the latest match of the longest n-gram, its continuation,
 * and past the history's end the draft repeating itself (a loop of period 3). */
TEST(ngram_drafts) {
    tern_drafter *ng = NULL;
    CHECK(tern_drafter_ngram_new(3, 2, &ng) == TERN_OK);
    const int32_t h[] = {9, 5, 6, 7, 1, 2, 5, 6, 7, 5, 6};
    int32_t out[8];
    /* the 3-gram (7, 5, 6) occurs only at the end; the 2-gram (5, 6) last at 6..7: its
     * continuation 7, 5, 6 reaches the end, then the draft repeats it: 7, 5, 6, 7 */
    int n = tern_drafter_draft(ng, h, sizeof h / sizeof *h, 7, out);
    CHECK_EQ_INT(n, 7);
    const int32_t want[] = {7, 5, 6, 7, 5, 6, 7};
    CHECK(n == 7 && !memcmp(out, want, sizeof want));
    /* no match: no draft */
    const int32_t u[] = {1, 2, 3, 4};
    CHECK_EQ_INT(tern_drafter_draft(ng, u, 4, 5, out), 0);
    /* a long continuation inside the history is copied as is */
    const int32_t l[] = {1, 2, 3, 4, 5, 6, 1, 2};
    n = tern_drafter_draft(ng, l, 8, 3, out);
    CHECK(n == 3 && out[0] == 3 && out[1] == 4 && out[2] == 5);
    tern_drafter_free(ng);
}

int main(void) {
    g_device = getenv("TERN_TEST_DEVICE");
    g_small = getenv("TERN_SANITIZED") != NULL;
    if (g_device && (!*g_device || !strcmp(g_device, "cpu"))) g_device = NULL;
    RUN(ngram_drafts);
    RUN(verify_rows);
    RUN(verify_repeat);
    RUN(greedy_same);
    RUN(draft_tokenizer);
    RUN(sample_dist);
    return check_summary();
}
