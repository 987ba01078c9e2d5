/*
 * test_hadamard_meta.c - the prism.hadamard contract (GGUF keys and
 * hadamard.json): fixture values from the qwen35-tiny README and file bytes,
 * one mutation per rule (each must be refused with the offending key named),
 * and byte-identical write-back (hadamard.json text, GGUF keys).
 */
#include "check.h"
#include "formats/hadamard.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int count_neg(const float *s, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += s[i] < 0;
    return c;
}

/* README: widths [1024, 3072, 2048]; counts of -1 and first values from the file bytes. */
static void check_contract(const tern_hadamard_meta *h) {
    CHECK_EQ_INT(h->version, 1);
    CHECK_EQ_INT(h->block_size, 1024);
    CHECK_EQ_INT(h->n_widths, 3);
    CHECK_EQ_INT(h->widths[0], 1024);
    CHECK_EQ_INT(h->widths[1], 3072);
    CHECK_EQ_INT(h->widths[2], 2048);
    CHECK(h->gdn_v_grouped);
    CHECK_EQ_INT(h->n_weights, 26);
    CHECK_EQ_INT(h->n_inverse, 1);
    const float *s = tern_hadamard_signs_for_width(h, 1024);
    CHECK(s && s[0] == 1 && s[1] == -1 && s[2] == 1 && s[3] == 1);
    if (s) CHECK_EQ_INT(count_neg(s, 1024), 511);
    s = tern_hadamard_signs_for_width(h, 3072);
    CHECK(s && s[0] == -1 && s[1] == -1 && s[2] == 1);
    if (s) CHECK_EQ_INT(count_neg(s, 3072), 1525);
    s = tern_hadamard_signs_for_width(h, 2048);
    CHECK(s && s[0] == -1 && s[1] == 1);
    if (s) CHECK_EQ_INT(count_neg(s, 2048), 1018);
    CHECK(tern_hadamard_signs_for_width(h, 4096) == NULL);
}

TEST(gguf_fixture) {
    const char *p = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open(p, &g), TERN_OK);
    if (!g) return;
    tern_hadamard_meta *h = NULL;
    CHECK_EQ_INT(tern_hadamard_from_gguf(g, &h), TERN_OK);
    CHECK(h != NULL);
    if (h) {
        check_contract(h);
        CHECK(tern_hadamard_is_inverse(h, "token_embd.weight"));
        CHECK(!tern_hadamard_is_folded(h, "token_embd.weight"));
        /* README: weight_names = every PQ2_0 tensor except token_embd */
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const tern_gguf_tensor *t = &g->tensors[i];
            bool want = t->type == TERN_DT_PQ2_0 && strcmp(t->name, "token_embd.weight");
            CHECK_MSG(tern_hadamard_is_folded(h, t->name) == want, "%s", t->name);
        }
        CHECK_EQ_INT(tern_hadamard_validate_gguf(h, g), TERN_OK);
        tern_hadamard_free(h);
    }
    tern_gguf_close(g);
    /* the PTQ1_0 file carries the same contract and validates (PTQ1_0 is ternary) */
    g = NULL;
    CHECK_EQ_INT(tern_gguf_open(fixture_path("qwen35-tiny/model-ptq1_0.gguf"), &g), TERN_OK);
    h = NULL;
    if (g) CHECK_EQ_INT(tern_hadamard_from_gguf(g, &h), TERN_OK);
    if (h) { check_contract(h); CHECK_EQ_INT(tern_hadamard_validate_gguf(h, g), TERN_OK); tern_hadamard_free(h); }
    tern_gguf_close(g);
    /* model C has no prism keys: NULL, no error */
    g = NULL;
    CHECK_EQ_INT(tern_gguf_open(fixture_path("qwen35-tiny/model-q2_0-nohadamard.gguf"), &g), TERN_OK);
    h = (tern_hadamard_meta *)1;
    if (g) { CHECK_EQ_INT(tern_hadamard_from_gguf(g, &h), TERN_OK); CHECK(h == NULL); }
    tern_gguf_close(g);
}

static bool skip_prism(const char *key, void *u) { (void)u; return !strncmp(key, "prism.hadamard.", 15); }

TEST(gguf_write_back_byte_identical) {
    const char *p = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_gguf *g = NULL;
    tern_hadamard_meta *h = NULL;
    CHECK_EQ_INT(tern_gguf_open(p, &g), TERN_OK);
    if (!g) return;
    CHECK_EQ_INT(tern_hadamard_from_gguf(g, &h), TERN_OK);
    char out[256];
    snprintf(out, sizeof out, "/tmp/tern_test_had_%d.gguf", (int)getpid());
    tern_gguf_writer *w = NULL;
    CHECK_EQ_INT(tern_gguf_writer_new(&w), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_copy_kv(w, g, skip_prism, NULL), TERN_OK);
    CHECK_EQ_INT(tern_hadamard_to_gguf(h, w), TERN_OK);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        CHECK_EQ_INT(tern_gguf_w_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL, NULL), TERN_OK);
    }
    CHECK_EQ_INT(tern_gguf_w_write(w, out, NULL, NULL), TERN_OK);
    tern_gguf_writer_free(w);
    size_t na, nb;
    char *a = check_slurp(p, &na), *b = check_slurp(out, &nb);
    CHECK_MSG(a && b && na == nb && !memcmp(a, b, na), "re-emitted contract differs from the fixture");
    free(a);
    free(b);
    unlink(out);
    tern_hadamard_free(h);
    tern_gguf_close(g);
}

/* Write a GGUF holding only the given (possibly broken) contract keys. */
static tern_status contract_file(const char *out, const tern_hadamard_meta *h, void (*mutate)(tern_gguf_writer *)) {
    tern_gguf_writer *w = NULL;
    tern_status st = tern_gguf_writer_new(&w);
    if (!st) st = tern_hadamard_to_gguf(h, w);
    if (!st && mutate) mutate(w);
    if (!st) st = tern_gguf_w_write(w, out, NULL, NULL);
    tern_gguf_writer_free(w);
    return st;
}
static void m_version(tern_gguf_writer *w) { tern_gguf_w_set_u32(w, "prism.hadamard.version", 2); }
static void m_block(tern_gguf_writer *w) { tern_gguf_w_set_u32(w, "prism.hadamard.block_size", 1000); }
static void m_block2(tern_gguf_writer *w) { tern_gguf_w_set_u32(w, "prism.hadamard.block_size", 2048); }
static void m_transform(tern_gguf_writer *w) { tern_gguf_w_set_str(w, "prism.hadamard.transform", "walsh-hadamard"); }
static void m_axis(tern_gguf_writer *w) { tern_gguf_w_set_str(w, "prism.hadamard.axis", "output"); }
static void m_mode(tern_gguf_writer *w) { tern_gguf_w_set_str(w, "prism.hadamard.sign_mode", "seeded"); }
static void m_widths_type(tern_gguf_writer *w) { tern_gguf_w_set_str(w, "prism.hadamard.sign_widths", "1024"); }
static void m_widths_sum(tern_gguf_writer *w) {
    int32_t v[3] = {1024, 3072, 1024};
    tern_gguf_w_set_arr(w, "prism.hadamard.sign_widths", TERN_GGUF_INT32, v, 3);
}
static void m_sign_value(tern_gguf_writer *w) {
    static int32_t v[6144];
    for (int i = 0; i < 6144; i++) v[i] = 1;
    v[100] = 0;
    tern_gguf_w_set_arr(w, "prism.hadamard.sign_values", TERN_GGUF_INT32, v, 6144);
}
static void m_grouped(tern_gguf_writer *w) { tern_gguf_w_set_u32(w, "prism.hadamard.gdn_v_grouped", 1); }
static void m_dup(tern_gguf_writer *w) {
    const char *n[2] = {"a.weight", "a.weight"};
    tern_gguf_w_set_arr_str(w, "prism.hadamard.weight_names", n, NULL, 2);
}
static void m_both(tern_gguf_writer *w) {
    const char *n[1] = {"token_embd.weight"};
    tern_gguf_w_set_arr_str(w, "prism.hadamard.weight_names", n, NULL, 1);
}

TEST(gguf_mutations) {
    const char *p = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_gguf *g = NULL;
    tern_hadamard_meta *h = NULL;
    CHECK_EQ_INT(tern_gguf_open(p, &g), TERN_OK);
    if (!g) return;
    CHECK_EQ_INT(tern_hadamard_from_gguf(g, &h), TERN_OK);
    tern_gguf_close(g);
    if (!h) return;
    char out[256];
    snprintf(out, sizeof out, "/tmp/tern_test_hmut_%d.gguf", (int)getpid());
    struct { void (*m)(tern_gguf_writer *); const char *key; } cases[] = {
        {m_version, "prism.hadamard.version"}, {m_block, "prism.hadamard.block_size"},
        {m_block2, "prism.hadamard.sign_widths"}, {m_transform, "prism.hadamard.transform"},
        {m_axis, "prism.hadamard.axis"}, {m_mode, "prism.hadamard.sign_mode"},
        {m_widths_type, "prism.hadamard.sign_widths"}, {m_widths_sum, "prism.hadamard.sign_widths"},
        {m_sign_value, "prism.hadamard.sign_values"}, {m_grouped, "prism.hadamard.gdn_v_grouped"},
        {m_dup, "prism.hadamard.weight_names"}, {m_both, "token_embd.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(contract_file(out, h, cases[i].m), TERN_OK);
        g = NULL;
        CHECK_EQ_INT(tern_gguf_open(out, &g), TERN_OK);
        tern_hadamard_meta *x = NULL;
        tern_status st = g ? tern_hadamard_from_gguf(g, &x) : TERN_ERR_IO;
        CHECK_MSG(st == TERN_ERR_FORMAT, "case %zu (%s) accepted", i, cases[i].key);
        CHECK_MSG(strstr(tern_last_error(), cases[i].key) && strstr(tern_last_error(), out),
                  "case %zu: message lacks '%s' or the file: %s", i, cases[i].key, tern_last_error());
        tern_hadamard_free(x);
        tern_gguf_close(g);
    }
    /* a missing key: drop gdn_v_grouped by writing a contract without it */
    tern_gguf_writer *w = NULL;
    CHECK_EQ_INT(tern_gguf_writer_new(&w), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u32(w, "prism.hadamard.version", 1), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_write(w, out, NULL, NULL), TERN_OK);
    tern_gguf_writer_free(w);
    g = NULL;
    CHECK_EQ_INT(tern_gguf_open(out, &g), TERN_OK);
    tern_hadamard_meta *x = NULL;
    if (g) CHECK_EQ_INT(tern_hadamard_from_gguf(g, &x), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "prism.hadamard.block_size") != NULL);
    tern_gguf_close(g);
    /* tensor cross-checks: the contract-only file has no tensors */
    CHECK_EQ_INT(contract_file(out, h, NULL), TERN_OK);
    g = NULL;
    CHECK_EQ_INT(tern_gguf_open(out, &g), TERN_OK);
    if (g) {
        CHECK_EQ_INT(tern_hadamard_validate_gguf(h, g), TERN_ERR_FORMAT);
        CHECK(strstr(tern_last_error(), "output.weight") && strstr(tern_last_error(), "prism.hadamard.weight_names"));
    }
    tern_gguf_close(g);
    unlink(out);
    tern_hadamard_free(h);
}

/* ------------------------------------------------------------ JSON */

static bool lk_float(const char *name, uint64_t *K, bool *t, void *u) { (void)name; (void)u; *K = 1024; *t = false; return true; }
static bool lk_wide(const char *name, uint64_t *K, bool *t, void *u) { (void)name; (void)u; *K = 4096; *t = true; return true; }
static bool lk_odd(const char *name, uint64_t *K, bool *t, void *u) { (void)name; (void)u; *K = 1536; *t = true; return true; }
static bool lk_none(const char *name, uint64_t *K, bool *t, void *u) { (void)name; (void)K; (void)t; (void)u; return false; }

/* Replace the first occurrence of `from` by `to` in text (malloc'd copy). */
static char *subst(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) return NULL;
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *r = malloc(n + 1);
    size_t pre = at - text;
    memcpy(r, text, pre);
    strcpy(r + pre, to);
    strcat(r, at + strlen(from));
    return r;
}

TEST(json_fixture_and_mutations) {
    const char *p = fixture_path("qwen35-tiny/mlx-pack/hadamard.json");
    if (!p) SKIP("fixtures missing");
    tern_hadamard_meta *h = NULL;
    CHECK_EQ_INT(tern_hadamard_from_json_file(p, &h), TERN_OK);
    if (!h) { fprintf(stderr, "%s\n", tern_last_error()); return; }
    check_contract(h);
    CHECK(tern_hadamard_is_inverse(h, "language_model.model.embed_tokens.weight"));
    CHECK(tern_hadamard_is_folded(h, "language_model.lm_head.weight"));
    CHECK(tern_hadamard_is_folded(h, "language_model.model.layers.0.linear_attn.out_proj.weight"));
    CHECK(!tern_hadamard_is_folded(h, "language_model.model.layers.0.linear_attn.in_proj_a.weight"));
    /* signs agree with the GGUF's contract */
    tern_gguf *g = NULL;
    tern_hadamard_meta *hg = NULL;
    if (tern_gguf_open(fixture_path("qwen35-tiny/model-pq2_0.gguf"), &g) == TERN_OK && tern_hadamard_from_gguf(g, &hg) == TERN_OK) {
        for (uint32_t i = 0; i < 3; i++)
            CHECK(!memcmp(tern_hadamard_signs_for_width(h, h->widths[i]), tern_hadamard_signs_for_width(hg, h->widths[i]),
                          h->widths[i] * sizeof(float)));
    }
    tern_hadamard_free(hg);
    tern_gguf_close(g);
    /* write back: byte-identical to the pack's file */
    char *js = NULL;
    CHECK_EQ_INT(tern_hadamard_to_json(h, &js), TERN_OK);
    size_t n;
    char *orig = check_slurp(p, &n);
    CHECK_MSG(js && orig && strlen(js) == n && !memcmp(js, orig, n), "to_json differs from the pack's hadamard.json");
    free(js);
    /* validation failures */
    CHECK_EQ_INT(tern_hadamard_validate(h, lk_float, NULL, "x.json"), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "not ternary"));
    CHECK_EQ_INT(tern_hadamard_validate(h, lk_wide, NULL, "x.json"), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "prism.hadamard.sign_widths") && strstr(tern_last_error(), "4096"));
    CHECK_EQ_INT(tern_hadamard_validate(h, lk_odd, NULL, "x.json"), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "prism.hadamard.block_size"));
    CHECK_EQ_INT(tern_hadamard_validate(h, lk_none, NULL, "x.json"), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "not a tensor"));
    tern_hadamard_free(h);
    /* text mutations: each names its key */
    struct { const char *from, *to, *key; } m[] = {
        {"\"prism.hadamard.version\": 1", "\"prism.hadamard.version\": 2", "prism.hadamard.version"},
        {"\"prism.hadamard.version\": 1", "\"prism.hadamard.version\": \"1\"", "prism.hadamard.version"},
        {"\"prism.hadamard.block_size\": 1024", "\"prism.hadamard.block_size\": 1000", "prism.hadamard.block_size"},
        {"normalized-sylvester-walsh-hadamard", "sylvester", "prism.hadamard.transform"},
        {"input-last-dimension", "output-dimension", "prism.hadamard.axis"},
        {"\"explicit\"", "\"random\"", "prism.hadamard.sign_mode"},
        {"  1024,\n  3072", "  1024,\n  4096", "prism.hadamard.sign_values"},
        {"  1024,\n  3072", "  1024,\n  1024", "prism.hadamard.sign_widths"},
        {"[\n  1,\n  -1,", "[\n  1,\n  0,", "prism.hadamard.sign_values"},
        {"[\n  1,\n  -1,", "[\n  1,\n  -1.5,", "prism.hadamard.sign_values"},
        {"[\n  1,\n  -1,", "[\n  true,\n  -1,", "prism.hadamard.sign_values"},
        {"\"prism.hadamard.gdn_v_grouped\": true", "\"prism.hadamard.gdn_v_grouped\": 1", "prism.hadamard.gdn_v_grouped"},
        {"\"prism.hadamard.gdn_v_grouped\": true", "\"x\": true", "prism.hadamard.gdn_v_grouped"},
        {"\"language_model.lm_head.weight\"", "\"language_model.model.layers.0.linear_attn.in_proj_qkv.weight\"",
         "prism.hadamard.weight_names"},
        {"\"language_model.lm_head.weight\"", "\"\"", "prism.hadamard.weight_names"},
        {"\"language_model.lm_head.weight\"", "7", "prism.hadamard.weight_names"},
        {"\"prism.hadamard.inverse_weight_names\": [", "\"prism.hadamard.inverse_weight_names\": {", NULL},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char *t = subst(orig, m[i].from, m[i].to);
        CHECK_MSG(t != NULL, "case %zu: pattern not found", i);
        if (!t) continue;
        tern_hadamard_meta *x = NULL;
        tern_status st = tern_hadamard_from_json(t, strlen(t), "mut.json", &x);
        CHECK_MSG(st == TERN_ERR_FORMAT, "case %zu accepted", i);
        CHECK_MSG(strstr(tern_last_error(), "mut.json"), "case %zu: %s", i, tern_last_error());
        if (m[i].key) CHECK_MSG(strstr(tern_last_error(), m[i].key), "case %zu lacks '%s': %s", i, m[i].key, tern_last_error());
        tern_hadamard_free(x);
        free(t);
    }
    /* truncations never crash and always fail */
    for (size_t k = 0; k < n; k += 37) {
        tern_hadamard_meta *x = NULL;
        CHECK(tern_hadamard_from_json(orig, k, "cut.json", &x) != TERN_OK);
        CHECK(x == NULL);
    }
    free(orig);
}

static char *to_gguf_name(const char *name, void *u) {
    (void)u;
    if (!strcmp(name, "language_model.lm_head.weight")) return strdup("output.weight");
    return NULL;
}

TEST(clone_renames) {
    const char *p = fixture_path("qwen35-tiny/mlx-pack/hadamard.json");
    if (!p) SKIP("fixtures missing");
    tern_hadamard_meta *h = NULL, *c = NULL;
    CHECK_EQ_INT(tern_hadamard_from_json_file(p, &h), TERN_OK);
    if (!h) return;
    CHECK_EQ_INT(tern_hadamard_clone(h, to_gguf_name, NULL, &c), TERN_OK);
    if (c) {
        CHECK(tern_hadamard_is_folded(c, "output.weight"));
        CHECK(!tern_hadamard_is_folded(c, "language_model.lm_head.weight"));
        CHECK(tern_hadamard_is_inverse(c, "language_model.model.embed_tokens.weight"));
        CHECK_EQ_INT(c->n_weights, 26);
        CHECK(!memcmp(c->signs[2], h->signs[2], 2048 * sizeof(float)));
    }
    tern_hadamard_free(c);
    tern_hadamard_free(h);
}

/* The signs-only reader (tern quantize --signs): a whole contract and a bare sign
 * file both read; each broken rule refused with the key named. */
static tern_status signs_json(const char *text, tern_hadamard_meta **h) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/tern_test_signs_%d.json", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return TERN_ERR_IO;
    fputs(text, f);
    fclose(f);
    tern_status st = tern_hadamard_signs_from_file(path, h);
    unlink(path);
    return st;
}

TEST(signs_only) {
    tern_hadamard_meta *h = NULL;
    CHECK_EQ_INT(signs_json("{\"block_size\": 2, \"sign_widths\": [2, 4], \"sign_values\": [1,-1, -1,-1,1,1]}", &h), TERN_OK);
    if (h) {
        CHECK_EQ_INT(h->block_size, 2);
        CHECK_EQ_INT(h->n_widths, 2);
        CHECK(tern_hadamard_signs_for_width(h, 4) && tern_hadamard_signs_for_width(h, 4)[2] == 1.0f);
        CHECK(tern_hadamard_signs_for_width(h, 2) && tern_hadamard_signs_for_width(h, 2)[1] == -1.0f);
        tern_hadamard_free(h);
        h = NULL;
    }
    /* block_size absent: 1024, so a width of 1024 is fine and 512 is not */
    char *big = malloc(16 + 1024 * 3 + 64);
    strcpy(big, "{\"sign_widths\": [1024], \"sign_values\": [");
    for (int i = 0; i < 1024; i++) strcat(big, i ? ",1" : "1");
    strcat(big, "]}");
    CHECK_EQ_INT(signs_json(big, &h), TERN_OK);
    if (h) { CHECK_EQ_INT(h->block_size, 1024); tern_hadamard_free(h); h = NULL; }
    free(big);
    static const struct { const char *text, *needle; } bad[] = {
        {"{\"block_size\": 2, \"sign_widths\": [2], \"sign_values\": [1, 0]}", "sign_values"},
        {"{\"block_size\": 2, \"sign_widths\": [2], \"sign_values\": [1, 1, 1]}", "sign_values"},
        {"{\"block_size\": 3, \"sign_widths\": [3], \"sign_values\": [1, 1, 1]}", "block_size"},
        {"{\"block_size\": 2, \"sign_widths\": [3], \"sign_values\": [1, 1, 1]}", "sign_widths"},
        {"{\"block_size\": 2, \"sign_widths\": [2, 2], \"sign_values\": [1, 1, 1, 1]}", "twice"},
        {"{\"block_size\": 2, \"sign_values\": [1, 1]}", "sign_widths"},
        {"[1, 2]", "JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tern_status st = signs_json(bad[i].text, &h);
        CHECK_MSG(st != TERN_OK && !h, "bad signs file %zu accepted", i);
        CHECK_MSG(strstr(tern_last_error(), bad[i].needle), "case %zu: '%s' does not name '%s'", i, tern_last_error(),
                  bad[i].needle);
    }
    /* the fixture GGUF's whole contract reads as signs, equal to the full parse */
    const char *p = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_gguf *g = NULL;
    tern_hadamard_meta *full = NULL;
    CHECK_EQ_INT(tern_hadamard_signs_from_file(p, &h), TERN_OK);
    if (h && tern_gguf_open(p, &g) == TERN_OK && tern_hadamard_from_gguf(g, &full) == TERN_OK && full) {
        CHECK_EQ_INT(h->n_widths, full->n_widths);
        CHECK_EQ_INT(h->block_size, full->block_size);
        for (uint32_t i = 0; i < h->n_widths && i < full->n_widths; i++)
            CHECK(!memcmp(h->signs[i], full->signs[i], h->widths[i] * sizeof(float)));
    }
    tern_hadamard_free(full);
    tern_hadamard_free(h);
    if (g) tern_gguf_close(g);
}

int main(void) {
    RUN(gguf_fixture);
    RUN(gguf_write_back_byte_identical);
    RUN(gguf_mutations);
    RUN(json_fixture_and_mutations);
    RUN(clone_renames);
    RUN(signs_only);
    return check_summary();
}
