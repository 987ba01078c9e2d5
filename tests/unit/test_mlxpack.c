/*
 * test_mlxpack.c - the MLX 2-bit pack reader.
 *
 * Oracles: the qwen35-tiny README (config, module list, conventions), and the
 * model-pq2_0.gguf fixture: README says the pack's words are the PQ2_0 qs bytes
 * read as little-endian u32 and the scales are the same fp16 values, so every
 * untransposed module must match its GGUF tensor byte for byte. Broken packs
 * (biases != -scales, code 3, bad config, bad signs) are built in a temp dir.
 */
#include "check.h"
#include "formats/gguf.h"
#include "formats/mlxpack.h"

#include <sys/stat.h>
#include <unistd.h>

static void spit(const char *dir, const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) { fwrite(p, 1, n, f); fclose(f); }
}

TEST(fixture_pack) {
    const char *dir = fixture_path("qwen35-tiny/mlx-pack");
    if (!dir) SKIP("fixtures missing");
    CHECK(tern_mlxpack_is_dir(dir));
    CHECK(!tern_mlxpack_is_dir(fixture_path("qwen35-tiny")));
    tern_mlxpack *p = NULL;
    CHECK_EQ_INT(tern_mlxpack_open(dir, &p), TERN_OK);
    if (!p) { fprintf(stderr, "%s\n", tern_last_error()); return; }
    CHECK_STR(p->model_type, "prism_hadamard_qwen35");
    CHECK_STR(p->text_model_type, "qwen3_5_text");
    CHECK_STR(p->tensor_prefix, "language_model.");
    CHECK_EQ_INT(p->bits, 2);
    CHECK_EQ_INT(p->group_size, 128);
    CHECK_EQ_INT(p->n_modules, 27);
    CHECK(p->hadamard != NULL);
    const tern_mlx_module *m = tern_mlxpack_module(p, "model.embed_tokens");
    CHECK(m && m->embedding && m->block == 1024 && !strcmp(m->dtype, "float16"));
    CHECK(tern_mlxpack_module(p, "language_model.lm_head") == tern_mlxpack_module(p, "lm_head"));
    int64_t v = 0;
    CHECK_EQ_INT(tern_mlxpack_cfg_i64(p, "hidden_size", &v), TERN_OK);
    CHECK_EQ_INT(v, 1024);
    CHECK_EQ_INT(tern_mlxpack_cfg_i64(p, "linear_num_value_heads", &v), TERN_OK);
    CHECK_EQ_INT(v, 24);
    CHECK_EQ_INT(tern_mlxpack_cfg_i64(p, "no_such_key", &v), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "no_such_key"));
    double eps = 0;
    CHECK_EQ_INT(tern_mlxpack_cfg_f64(p, "rms_norm_eps", &eps), TERN_OK);
    CHECK_NEAR(eps, 1e-6, 1e-12);
    /* plain tensors by HF name, with or without the namespace prefix */
    const tern_st_tensor *t = tern_mlxpack_tensor(p, "model.layers.0.linear_attn.A_log");
    CHECK(t && !strcmp(t->dtype, "F32") && t->shape[0] == 24);
    CHECK(tern_mlxpack_tensor(p, "language_model.model.norm.weight") != NULL);
    /* every module validates (no code 3, biases = -scales, signs = contract) */
    for (size_t i = 0; i < p->n_modules; i++) {
        tern_mlx_ternary tm;
        tern_status st = tern_mlxpack_ternary(p, &p->modules[i], &tm);
        CHECK_MSG(st == TERN_OK, "%s: %s", p->modules[i].path, tern_last_error());
        if (st) continue;
        CHECK(tm.signs != NULL);
        CHECK_EQ_INT(tm.group_size, 128);
    }
    tern_mlx_ternary lm;
    CHECK_EQ_INT(tern_mlxpack_ternary(p, tern_mlxpack_module(p, "lm_head"), &lm), TERN_OK);
    CHECK_EQ_INT(lm.N, 4096);
    CHECK_EQ_INT(lm.K, 1024);
    tern_mlxpack_close(p);
}

/* README: words = PQ2_0 qs bytes as LE u32, same scales; no row permutation for these. */
TEST(pack_words_equal_gguf_blocks) {
    const char *dir = fixture_path("qwen35-tiny/mlx-pack");
    if (!dir) SKIP("fixtures missing");
    tern_mlxpack *p = NULL;
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_mlxpack_open(dir, &p), TERN_OK);
    CHECK_EQ_INT(tern_gguf_open(fixture_path("qwen35-tiny/model-pq2_0.gguf"), &g), TERN_OK);
    if (!p || !g) { tern_mlxpack_close(p); tern_gguf_close(g); return; }
    const char *pairs[][2] = {
        {"lm_head", "output.weight"},
        {"model.embed_tokens", "token_embd.weight"},
        {"model.layers.0.mlp.down_proj", "blk.0.ffn_down.weight"},
        {"model.layers.2.mlp.up_proj", "blk.2.ffn_up.weight"},
        {"model.layers.3.self_attn.q_proj", "blk.3.attn_q.weight"},
        {"model.layers.3.self_attn.o_proj", "blk.3.attn_output.weight"},
        {"model.layers.1.linear_attn.out_proj", "blk.1.ssm_out.weight"}, /* columns grouped in both (gdn_v_grouped) */
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        tern_mlx_ternary tm;
        const tern_gguf_tensor *gt = tern_gguf_find_tensor(g, pairs[i][1]);
        CHECK_MSG(gt != NULL, "%s", pairs[i][1]);
        CHECK_EQ_INT(tern_mlxpack_ternary(p, tern_mlxpack_module(p, pairs[i][0]), &tm), TERN_OK);
        if (!gt) continue;
        CHECK_EQ_INT(tm.N, gt->ne[1]);
        CHECK_EQ_INT(tm.K, gt->ne[0]);
        uint64_t bad = 0, nb = tm.K / 128;
        for (uint64_t n = 0; n < tm.N; n++)
            for (uint64_t b = 0; b < nb; b++) {
                const uint8_t *blk = gt->data + (n * nb + b) * 34;
                bad += memcmp(blk, tm.scales + (n * nb + b) * 2, 2) != 0;
                bad += memcmp(blk + 2, tm.words + (n * (tm.K / 16) + b * 8) * 4, 32) != 0;
            }
        CHECK_MSG(bad == 0, "%s vs %s: %llu mismatching blocks", pairs[i][0], pairs[i][1], (unsigned long long)bad);
    }
    tern_mlxpack_close(p);
    tern_gguf_close(g);
}

typedef struct { char key[96]; double v; bool is_int; } hp;
typedef struct { hp e[64]; int n; int64_t sec[4]; bool have_sec; } hps;
static void emit(const char *k, double v, bool is_int, void *u) {
    hps *h = u;
    if (h->n < 64) { snprintf(h->e[h->n].key, 96, "%s", k); h->e[h->n].v = v; h->e[h->n].is_int = is_int; h->n++; }
}
static void emit_arr(const char *k, const int64_t *v, size_t n, void *u) {
    hps *h = u;
    (void)k;
    for (size_t i = 0; i < n && i < 4; i++) h->sec[i] = v[i];
    h->have_sec = true;
}

/* Every qwen35.* hyperparameter of the converter-written GGUF is derived from the pack's text_config. */
TEST(hparams_match_gguf) {
    const char *dir = fixture_path("qwen35-tiny/mlx-pack");
    if (!dir) SKIP("fixtures missing");
    tern_mlxpack *p = NULL;
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_mlxpack_open(dir, &p), TERN_OK);
    CHECK_EQ_INT(tern_gguf_open(fixture_path("qwen35-tiny/model-q2_0-nohadamard.gguf"), &g), TERN_OK);
    if (!p || !g) { tern_mlxpack_close(p); tern_gguf_close(g); return; }
    static hps h;
    memset(&h, 0, sizeof h);
    const char *arch = NULL;
    CHECK_EQ_INT(tern_mlxpack_gguf_hparams(p, &arch, emit, emit_arr, &h), TERN_OK);
    CHECK_STR(arch, "qwen35");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const tern_gguf_kv *kv = &g->kv[i];
        if (strncmp(kv->key, "qwen35.", 7)) continue;
        if (kv->type == TERN_GGUF_ARRAY) {
            CHECK(h.have_sec);
            for (uint64_t j = 0; j < kv->arr_n && j < 4; j++) CHECK_EQ_INT(h.sec[j], tern_gguf_arr_i64(kv, j));
            continue;
        }
        int found = -1;
        for (int j = 0; j < h.n; j++) if (!strcmp(h.e[j].key, kv->key)) found = j;
        CHECK_MSG(found >= 0, "%s not derived from config.json", kv->key);
        if (found < 0) continue;
        double want = kv->type == TERN_GGUF_FLOAT32 || kv->type == TERN_GGUF_FLOAT64 ? kv->v.f64 : (double)kv->v.u64;
        CHECK_MSG(fabs(h.e[found].v - want) <= 1e-6 * fabs(want), "%s: %g vs %g", kv->key, h.e[found].v, want);
    }
    tern_mlxpack_close(p);
    tern_gguf_close(g);
}

/* ------------------------------------------------------------ broken packs */

static char g_tmp[256];
static char *g_cfg, *g_had, *g_st;
static size_t g_cfg_n, g_had_n, g_st_n;

static char *subst(const char *text, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) return NULL;
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *r = malloc(n + 1);
    memcpy(r, text, at - text);
    strcpy(r + (at - text), to);
    strcat(r, at + strlen(from));
    return r;
}

/* Write a pack with optional replaced texts / patched safetensors bytes; open it. */
static tern_status try_pack(const char *cfg, const char *had, const uint8_t *st, tern_mlxpack **out) {
    spit(g_tmp, "config.json", cfg ? cfg : g_cfg, cfg ? strlen(cfg) : g_cfg_n);
    spit(g_tmp, "hadamard.json", had ? had : g_had, had ? strlen(had) : g_had_n);
    spit(g_tmp, "model.safetensors", st ? (const char *)st : g_st, g_st_n);
    return tern_mlxpack_open(g_tmp, out);
}

static uint64_t tensor_off(const char *name) {
    tern_st *st = NULL;
    uint64_t off = 0;
    if (tern_st_open_mem(g_st, g_st_n, "x", &st) == TERN_OK) {
        const tern_st_tensor *t = tern_st_find(st, name);
        if (t) off = st->data_offset + t->begin;
        tern_st_close(st);
    }
    return off;
}

TEST(broken_packs) {
    const char *dir = fixture_path("qwen35-tiny/mlx-pack");
    if (!dir) SKIP("fixtures missing");
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    g_cfg = check_slurp(path, &g_cfg_n);
    snprintf(path, sizeof path, "%s/hadamard.json", dir);
    g_had = check_slurp(path, &g_had_n);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    g_st = check_slurp(path, &g_st_n);
    CHECK(g_cfg && g_had && g_st);
    if (!g_cfg || !g_had || !g_st) return;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tern_test_pack_%d", (int)getpid());
    mkdir(g_tmp, 0700);
    tern_mlxpack *p = NULL;
    CHECK_EQ_INT(try_pack(NULL, NULL, NULL, &p), TERN_OK);
    tern_mlxpack_close(p);
    uint8_t *st = malloc(g_st_n);
    /* biases != -scales */
    memcpy(st, g_st, g_st_n);
    uint64_t off = tensor_off("language_model.model.layers.2.mlp.gate_proj.biases");
    CHECK(off > 0);
    st[off + 2 * 77 + 1] ^= 0x80; /* flip the sign of one bias: now == +scale */
    p = NULL;
    CHECK_EQ_INT(try_pack(NULL, NULL, st, &p), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "not ternary") && strstr(tern_last_error(), "model.layers.2.mlp.gate_proj"));
    /* code 3: open works (structure), the module is refused */
    memcpy(st, g_st, g_st_n);
    off = tensor_off("language_model.lm_head.weight");
    st[off + 4 * 1000] |= 0x0c; /* element 1 of word 1000 -> code 3 */
    p = NULL;
    CHECK_EQ_INT(try_pack(NULL, NULL, st, &p), TERN_OK);
    if (p) {
        tern_mlx_ternary tm;
        CHECK_EQ_INT(tern_mlxpack_ternary(p, tern_mlxpack_module(p, "lm_head"), &tm), TERN_ERR_FORMAT);
        CHECK(strstr(tern_last_error(), "code 3") && strstr(tern_last_error(), "row 15"));
        tern_mlxpack_close(p);
    }
    /* a sign that disagrees with hadamard.json */
    memcpy(st, g_st, g_st_n);
    off = tensor_off("language_model.lm_head.signs");
    st[off + 1] ^= 0x80;
    p = NULL;
    CHECK_EQ_INT(try_pack(NULL, NULL, st, &p), TERN_OK);
    if (p) {
        tern_mlx_ternary tm;
        CHECK_EQ_INT(tern_mlxpack_ternary(p, tern_mlxpack_module(p, "lm_head"), &tm), TERN_ERR_FORMAT);
        CHECK(strstr(tern_last_error(), "signs") && strstr(tern_last_error(), "element 0"));
        tern_mlxpack_close(p);
    }
    /* config mutations */
    struct { const char *from, *to, *must; tern_status want; } m[] = {
        {"\"bits\": 2", "\"bits\": 4", "bits", TERN_ERR_UNSUPPORTED},
        {"\"mode\": \"affine\"", "\"mode\": \"mxfp4\"", "mode", TERN_ERR_UNSUPPORTED},
        {"\"group_size\": 128", "\"group_size\": 100", "group_size", TERN_ERR_FORMAT},
        {"\"group_size\": 128", "\"group_size\": 256", "scales", TERN_ERR_SHAPE},
        {"\"modules\"", "\"modulez\"", "modules", TERN_ERR_FORMAT},
        {"\"path\": \"lm_head\"", "\"path\": \"lm_tail\"", "lm_tail", TERN_ERR_FORMAT},
        {"\"path\": \"lm_head\"", "\"path\": \"model.layers.0.input_layernorm\"", "input_layernorm", TERN_ERR_FORMAT},
        {"\"model_type\": \"prism_hadamard_qwen35\"", "\"model_typo\": 1", "model_type", TERN_ERR_FORMAT},
        {"\"hadamard_config\": \"hadamard.json\"", "\"hadamard_config\": \"../x.json\"", "hadamard_config", TERN_ERR_FORMAT},
        {"{", "[", "config.json", TERN_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char *c = subst(g_cfg, m[i].from, m[i].to);
        CHECK_MSG(c != NULL, "case %zu pattern", i);
        if (!c) continue;
        p = NULL;
        tern_status s = try_pack(c, NULL, NULL, &p);
        CHECK_MSG(s == m[i].want, "case %zu: status %d, %s", i, s, tern_last_error());
        CHECK_MSG(strstr(tern_last_error(), m[i].must) && strstr(tern_last_error(), g_tmp), "case %zu: %s", i, tern_last_error());
        tern_mlxpack_close(p);
        free(c);
    }
    /* partial_rotary_factor outside (0, 1] (fuzz_json: 5.7e57 overflowed head_dim x it
     * into an int64 conversion, UB): refused by the hyperparameters, naming the field */
    static const char *prfs[] = {"5.71111e+57", "0", "-0.5", "1.5"};
    for (int i = 0; i < 4; i++) {
        char to[64];
        snprintf(to, sizeof to, "\"partial_rotary_factor\": %s", prfs[i]);
        char *c = subst(g_cfg, "\"partial_rotary_factor\": 0.25", to);
        CHECK(c != NULL);
        if (!c) continue;
        p = NULL;
        CHECK_EQ_INT(try_pack(c, NULL, NULL, &p), TERN_OK);
        if (p) {
            static hps h;
            memset(&h, 0, sizeof h);
            const char *arch = NULL;
            CHECK_EQ_INT(tern_mlxpack_gguf_hparams(p, &arch, emit, emit_arr, &h), TERN_ERR_FORMAT);
            CHECK_MSG(strstr(tern_last_error(), "partial_rotary_factor") != NULL, "%s: %s", prfs[i], tern_last_error());
            tern_mlxpack_close(p);
        }
        free(c);
    }
    /* hadamard.json naming a tensor the pack lacks */
    char *h = subst(g_had, "language_model.lm_head.weight", "language_model.lm_head2.weight");
    p = NULL;
    CHECK_EQ_INT(try_pack(NULL, h, NULL, &p), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "lm_head2") && strstr(tern_last_error(), "hadamard.json"));
    free(h);
    /* a float tensor listed as folded */
    h = subst(g_had, "language_model.lm_head.weight", "language_model.model.norm.weight");
    p = NULL;
    CHECK_EQ_INT(try_pack(NULL, h, NULL, &p), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "not ternary"));
    free(h);
    /* truncated safetensors */
    p = NULL;
    spit(g_tmp, "config.json", g_cfg, g_cfg_n);
    spit(g_tmp, "model.safetensors", g_st, g_st_n / 2);
    CHECK_EQ_INT(tern_mlxpack_open(g_tmp, &p), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "model.safetensors"));
    /* missing config */
    snprintf(path, sizeof path, "%s/config.json", g_tmp);
    unlink(path);
    CHECK_EQ_INT(tern_mlxpack_open(g_tmp, &p), TERN_ERR_IO);
    CHECK(strstr(tern_last_error(), "config.json"));
    static const char *files[] = {"hadamard.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", g_tmp, files[i]);
        unlink(path);
    }
    rmdir(g_tmp);
    free(st);
    free(g_cfg);
    free(g_had);
    free(g_st);
}

/* Allocation failures while opening a pack: NOMEM, nothing leaked (tern accounting). */
TEST(allocation_failures) {
    const char *dir = fixture_path("qwen35-tiny/mlx-pack");
    if (!dir) SKIP("fixtures missing");
    size_t base = tern_alloc_current();
    int nomem = 0;
    for (long n = 0; n < 5000; n++) {
        tern_alloc_fail_after(n);
        tern_mlxpack *p = NULL;
        tern_status st = tern_mlxpack_open(dir, &p);
        tern_alloc_fail_after(-1);
        tern_mlxpack_close(p);
        CHECK_EQ_INT(tern_alloc_current(), base);
        if (st == TERN_OK) break;
        nomem++;
        CHECK_MSG(st == TERN_ERR_NOMEM, "fail_after %ld: %s", n, tern_last_error());
    }
    CHECK(nomem > 5);
}

int main(void) {
    RUN(fixture_pack);
    RUN(pack_words_equal_gguf_blocks);
    RUN(hparams_match_gguf);
    RUN(broken_packs);
    RUN(allocation_failures);
    return check_summary();
}
