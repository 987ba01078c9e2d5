/*
 * test_gguf.c - GGUF reader and writer.
 *
 * Expected values come from the fixture READMEs (shared/fixtures/<model>/README.md),
 * from hand-built byte strings, and from the Python `gguf` package (an
 * independent reader) - never from the code under test. Includes a corpus of
 * truncated and corrupted files generated from the fixtures: every one must
 * fail with an error that names the file, and never crash (run under ASan).
 */
#include "check.h"
#include "formats/gguf.h"
#include "formats/hadamard.h"

#include <unistd.h>

static int count_type(const tern_gguf *g, tern_dtype t) {
    int n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) n += g->tensors[i].type == t;
    return n;
}

static void check_str_kv(const tern_gguf *g, const char *key, const char *want) {
    char *s = NULL;
    CHECK_EQ_INT(tern_gguf_get_str(g, key, &s), TERN_OK);
    CHECK_STR(s, want);
    free(s);
}
static void check_u64_kv(const tern_gguf *g, const char *key, uint64_t want) {
    uint64_t v = 0;
    CHECK_EQ_INT(tern_gguf_get_u64(g, key, &v), TERN_OK);
    CHECK_EQ_INT(v, want);
}

/* ------------------------------------------------------------ fixtures */

TEST(fixture_qwen35_pq2_0) {
    const char *p = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open(p, &g), TERN_OK);
    if (!g) { fprintf(stderr, "%s\n", tern_last_error()); return; }
    CHECK_EQ_INT(g->version, 3);
    CHECK_EQ_INT(g->n_tensors, 56);
    CHECK_EQ_INT(g->n_kv, 45);
    CHECK_EQ_INT(g->alignment, 32);
    CHECK_EQ_INT(count_type(g, TERN_DT_PQ2_0), 27);
    CHECK_EQ_INT(count_type(g, TERN_DT_F32), 23);
    CHECK_EQ_INT(count_type(g, TERN_DT_BF16), 6);
    check_str_kv(g, "general.architecture", "qwen35");
    check_u64_kv(g, "general.file_type", 141);
    check_u64_kv(g, "qwen35.block_count", 4);
    check_u64_kv(g, "qwen35.embedding_length", 1024);
    check_u64_kv(g, "qwen35.feed_forward_length", 2048);
    check_u64_kv(g, "qwen35.attention.head_count", 12);
    check_u64_kv(g, "qwen35.attention.head_count_kv", 2);
    check_u64_kv(g, "qwen35.ssm.state_size", 128);
    check_u64_kv(g, "qwen35.ssm.group_count", 8);
    check_u64_kv(g, "qwen35.ssm.time_step_rank", 24);
    check_u64_kv(g, "qwen35.ssm.inner_size", 3072);
    check_u64_kv(g, "qwen35.full_attention_interval", 4);
    check_u64_kv(g, "qwen35.rope.dimension_count", 64);
    double fb = 0;
    CHECK_EQ_INT(tern_gguf_get_f64(g, "qwen35.rope.freq_base", &fb), TERN_OK);
    CHECK_NEAR(fb, 1e7, 1e-3);
    const tern_gguf_kv *ds = tern_gguf_find_kv(g, "qwen35.rope.dimension_sections");
    CHECK(ds && ds->type == TERN_GGUF_ARRAY && ds->arr_n == 4);
    if (ds) {
        CHECK_EQ_INT(tern_gguf_arr_i64(ds, 0), 11);
        CHECK_EQ_INT(tern_gguf_arr_i64(ds, 2), 10);
        CHECK_EQ_INT(tern_gguf_arr_i64(ds, 3), 0);
    }
    check_str_kv(g, "tokenizer.ggml.model", "gpt2");
    check_str_kv(g, "tokenizer.ggml.pre", "qwen35");
    check_u64_kv(g, "tokenizer.ggml.bos_token_id", 4091);
    check_u64_kv(g, "tokenizer.ggml.eos_token_id", 4093);
    const tern_gguf_kv *tok = tern_gguf_find_kv(g, "tokenizer.ggml.tokens");
    CHECK(tok && tok->arr_type == TERN_GGUF_STRING && tok->arr_n == 4096);
    if (tok) CHECK(tok->arr_str[0].len == 1 && tok->arr_str[0].ptr[0] == '!');
    /* prism keys (README: version UINT32 1, block 1024, widths [1024,3072,2048]) */
    check_u64_kv(g, "prism.hadamard.version", 1);
    check_u64_kv(g, "prism.hadamard.block_size", 1024);
    check_str_kv(g, "prism.hadamard.transform", "normalized-sylvester-walsh-hadamard");
    bool gv = false;
    CHECK_EQ_INT(tern_gguf_get_bool(g, "prism.hadamard.gdn_v_grouped", &gv), TERN_OK);
    CHECK(gv);
    const tern_gguf_kv *sw = tern_gguf_find_kv(g, "prism.hadamard.sign_widths");
    CHECK(sw && sw->arr_type == TERN_GGUF_INT32 && sw->arr_n == 3);
    if (sw) {
        CHECK_EQ_INT(tern_gguf_arr_i64(sw, 0), 1024);
        CHECK_EQ_INT(tern_gguf_arr_i64(sw, 1), 3072);
        CHECK_EQ_INT(tern_gguf_arr_i64(sw, 2), 2048);
    }
    const tern_gguf_kv *sv = tern_gguf_find_kv(g, "prism.hadamard.sign_values");
    CHECK(sv && sv->arr_n == 1024 + 3072 + 2048);
    /* tensors: ne order K first; PQ2_0 34 B per 128 */
    const tern_gguf_tensor *t = tern_gguf_find_tensor(g, "output.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->type, TERN_DT_PQ2_0);
        CHECK_EQ_INT(t->ggml_type, 142);
        CHECK_EQ_INT(t->ne[0], 1024);
        CHECK_EQ_INT(t->ne[1], 4096);
        CHECK_EQ_INT(t->nbytes, 1024 / 128 * 34 * 4096);
        CHECK(t->data == g->map.data + g->data_offset + t->offset); /* zero copy */
    }
    t = tern_gguf_find_tensor(g, "blk.0.ssm_conv1d.weight");
    CHECK(t && t->type == TERN_DT_F32 && t->ne[0] == 4 && t->ne[1] == 5120 && t->nbytes == 4 * 5120 * 4);
    t = tern_gguf_find_tensor(g, "blk.0.ssm_alpha.weight");
    CHECK(t && t->type == TERN_DT_BF16 && t->ne[0] == 1024 && t->ne[1] == 24);
    t = tern_gguf_find_tensor(g, "blk.3.attn_q.weight");
    CHECK(t && t->type == TERN_DT_PQ2_0 && t->ne[0] == 1024 && t->ne[1] == 6144);
    t = tern_gguf_find_tensor(g, "blk.3.attn_output.weight");
    CHECK(t && t->ne[0] == 3072 && t->ne[1] == 1024);
    CHECK(tern_gguf_find_tensor(g, "nope") == NULL);
    CHECK(tern_gguf_find_kv(g, "nope") == NULL);
    /* getters: type mismatch names the key; opt leaves the value alone */
    uint64_t u = 77;
    CHECK_EQ_INT(tern_gguf_get_u64(g, "general.architecture", &u), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "general.architecture") != NULL);
    CHECK_EQ_INT(tern_gguf_get_u64_opt(g, "no.such.key", &u), TERN_OK);
    CHECK_EQ_INT(u, 77);
    CHECK_EQ_INT(tern_gguf_get_u64(g, "no.such.key", &u), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "no.such.key") != NULL);
    tern_gguf_close(g);
}

TEST(fixture_qwen35_ptq1_0) {
    const char *p = fixture_path("qwen35-tiny/model-ptq1_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open(p, &g), TERN_OK);
    if (!g) { fprintf(stderr, "%s\n", tern_last_error()); return; }
    CHECK_EQ_INT(g->n_tensors, 56);
    CHECK_EQ_INT(count_type(g, TERN_DT_PTQ1_0), 27);
    check_u64_kv(g, "general.file_type", 143);
    const tern_gguf_tensor *t = tern_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == TERN_DT_PTQ1_0 && t->nbytes == 1024 / 128 * 28 * 4096);
    tern_gguf_close(g);
}

TEST(fixture_q2_0_variants) {
    const char *fork[] = {"qwen3-tiny/model-q2_0.gguf", "qwen35-tiny/model-q2_0-nohadamard.gguf"};
    for (int i = 0; i < 2; i++) {
        const char *p = fixture_path(fork[i]);
        if (!p) SKIP("fixtures missing");
        tern_gguf *g = NULL;
        CHECK_EQ_INT(tern_gguf_open(p, &g), TERN_OK);
        if (!g) { fprintf(stderr, "%s\n", tern_last_error()); continue; }
        CHECK_EQ_INT(count_type(g, TERN_DT_Q2_0_G64), 0);
        CHECK(count_type(g, TERN_DT_Q2_0) > 0);
        check_u64_kv(g, "general.file_type", 41);
        tern_gguf_close(g);
    }
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open(fixture_path("qwen3-tiny/model-q2_0_g64.gguf"), &g), TERN_OK);
    if (!g) { fprintf(stderr, "%s\n", tern_last_error()); return; }
    CHECK_EQ_INT(g->n_tensors, 46);
    CHECK_EQ_INT(count_type(g, TERN_DT_Q2_0_G64), 29);
    CHECK_EQ_INT(count_type(g, TERN_DT_F32), 17);
    check_str_kv(g, "general.architecture", "qwen3");
    check_str_kv(g, "tokenizer.ggml.pre", "qwen2");
    const tern_gguf_tensor *t = tern_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->ggml_type == 42 && t->nbytes == 512 / 64 * 18 * 4096);
    CHECK(tern_gguf_find_tensor(g, "output.weight") == NULL); /* tied head */
    tern_gguf_close(g);
    g = NULL;
    CHECK_EQ_INT(tern_gguf_open(fixture_path("qwen3-tiny/model-q2_0.gguf"), &g), TERN_OK);
    if (g) {
        CHECK_EQ_INT(g->n_tensors, 46);
        t = tern_gguf_find_tensor(g, "blk.0.attn_q.weight");
        CHECK(t && t->type == TERN_DT_Q2_0 && t->ne[0] == 512 && t->ne[1] == 1024 && t->nbytes == 4 * 34 * 1024);
        check_u64_kv(g, "qwen3.attention.key_length", 128);
    }
    tern_gguf_close(g);
}

/* ------------------------------------------------------------ hand-built files */

typedef struct { uint8_t b[4096]; size_t n; } hb;
static void h_put(hb *h, const void *p, size_t n) { memcpy(h->b + h->n, p, n); h->n += n; }
static void h_u32(hb *h, uint32_t v) { h_put(h, &v, 4); }
static void h_u64(hb *h, uint64_t v) { h_put(h, &v, 8); }
static void h_str(hb *h, const char *s) { h_u64(h, strlen(s)); h_put(h, s, strlen(s)); }
static void h_pad(hb *h, size_t a) { while (h->n % a) h->b[h->n++] = 0; }
static void h_zeros(hb *h, size_t n) { memset(h->b + h->n, 0, n); h->n += n; }

/* One kv (u32 answer=42) and tensors of given ne0/type/offset list. */
static void build(hb *h, int nt, const char **names, const uint64_t *ne0, const uint64_t *ne1,
                  const uint32_t *types, const uint64_t *offs, size_t data_bytes) {
    h->n = 0;
    h_u32(h, 0x46554747u);
    h_u32(h, 3);
    h_u64(h, nt);
    h_u64(h, 1);
    h_str(h, "answer");
    h_u32(h, TERN_GGUF_UINT32);
    h_u32(h, 42);
    for (int i = 0; i < nt; i++) {
        h_str(h, names[i]);
        h_u32(h, 2);
        h_u64(h, ne0[i]);
        h_u64(h, ne1[i]);
        h_u32(h, types[i]);
        h_u64(h, offs[i]);
    }
    h_pad(h, 32);
    h_zeros(h, data_bytes);
}

TEST(handbuilt_valid_and_q2_detection) {
    static hb h;
    const char *names[] = {"a", "b"};
    uint64_t ne0[] = {4, 128}, ne1[] = {2, 1};
    uint32_t types[] = {0, 0};
    uint64_t offs[] = {0, 32};
    build(&h, 2, names, ne0, ne1, types, offs, 32 + 512);
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "hand.gguf", &g), TERN_OK);
    if (g) {
        uint64_t v = 0;
        CHECK_EQ_INT(tern_gguf_get_u64(g, "answer", &v), TERN_OK);
        CHECK_EQ_INT(v, 42);
        CHECK_EQ_INT(g->tensors[1].nbytes, 512);
        tern_gguf_close(g);
    }
    /* one tiny Q2_0 tensor [128 x 1]: 34 B (fork) and 36 B (g64) both pad to 64 -> ambiguous */
    const char *n1[] = {"q"};
    uint64_t a0[] = {128}, a1[] = {1};
    uint32_t ty[] = {42};
    uint64_t of[] = {0};
    build(&h, 1, n1, a0, a1, ty, of, 64);
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "amb.gguf", &g), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "ambiguous") && strstr(tern_last_error(), "amb.gguf"));
    /* [1024 x 1] Q2_0: fork 272 B (pad 288), g64 288 B (pad 288) -> ambiguous too;
     * [2048 x 1]: fork 544 (pad 544), g64 576 (pad 576): spans tell them apart */
    uint64_t b0[] = {2048}, b1[] = {1};
    build(&h, 1, n1, b0, b1, ty, of, 544);
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "fork.gguf", &g), TERN_OK);
    if (g) { CHECK_EQ_INT(g->tensors[0].type, TERN_DT_Q2_0); CHECK_EQ_INT(g->tensors[0].nbytes, 544); tern_gguf_close(g); }
    build(&h, 1, n1, b0, b1, ty, of, 576);
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "g64.gguf", &g), TERN_OK);
    if (g) { CHECK_EQ_INT(g->tensors[0].type, TERN_DT_Q2_0_G64); CHECK_EQ_INT(g->tensors[0].nbytes, 576); tern_gguf_close(g); }
    /* ambiguous tensor + decisive tensor -> decisive wins for both */
    const char *n2[] = {"small", "big"};
    uint64_t c0[] = {128, 2048}, c1[] = {1, 1};
    uint32_t t2[] = {42, 42};
    uint64_t o2[] = {0, 64};
    build(&h, 2, n2, c0, c1, t2, o2, 64 + 576);
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "mixed.gguf", &g), TERN_OK);
    if (g) { CHECK_EQ_INT(g->tensors[0].type, TERN_DT_Q2_0_G64); CHECK_EQ_INT(g->tensors[0].nbytes, 36); tern_gguf_close(g); }
    /* two decisive tensors that disagree -> refused */
    uint64_t d0[] = {2048, 2048}, d1[] = {1, 1};
    uint64_t o3[] = {0, 544};
    build(&h, 2, n2, d0, d1, t2, o3, 544 + 576);
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "disagree.gguf", &g), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "disagree"));
    /* span fitting neither layout */
    build(&h, 1, n1, b0, b1, ty, of, 1024);
    CHECK_EQ_INT(tern_gguf_open_mem(h.b, h.n, "neither.gguf", &g), TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "neither") && strstr(tern_last_error(), "'q'"));
}

static void expect_fail(const uint8_t *b, size_t n, const char *name, const char *must_contain) {
    tern_gguf *g = (tern_gguf *)1;
    tern_status st = tern_gguf_open_mem(b, n, name, &g);
    CHECK_MSG(st != TERN_OK, "%s parsed", name);
    CHECK(g == NULL);
    CHECK_MSG(strstr(tern_last_error(), name) != NULL, "%s: message does not name the file: %s", name, tern_last_error());
    if (must_contain)
        CHECK_MSG(strstr(tern_last_error(), must_contain) != NULL, "%s: message lacks '%s': %s", name,
                  must_contain, tern_last_error());
    if (st == TERN_OK) tern_gguf_close(g);
}

TEST(handbuilt_hostile) {
    static hb h;
    const char *names[] = {"a", "b"};
    uint64_t ne0[] = {4, 128}, ne1[] = {2, 1};
    uint32_t types[] = {0, 0};
    uint64_t offs[] = {0, 32};
    build(&h, 2, names, ne0, ne1, types, offs, 32 + 512);
    static uint8_t c[4096];
    size_t n = h.n;
    /* bad magic, bad version */
    memcpy(c, h.b, n); c[0] = 'X'; expect_fail(c, n, "magic.gguf", "magic");
    memcpy(c, h.b, n); c[4] = 2; expect_fail(c, n, "ver.gguf", "version");
    /* huge counts */
    memcpy(c, h.b, n); memset(c + 8, 0xff, 8); expect_fail(c, n, "nt.gguf", "tensor count");
    memcpy(c, h.b, n); memset(c + 16, 0xff, 8); expect_fail(c, n, "nkv.gguf", "kv count");
    /* key length huge */
    memcpy(c, h.b, n); memset(c + 24, 0xff, 8); expect_fail(c, n, "klen.gguf", "exceeds");
    /* unknown value type (after key "answer": 24 + 8 + 6) */
    memcpy(c, h.b, n); c[38] = 99; expect_fail(c, n, "vt.gguf", "answer");
    /* tensor a: name at 46 (8+1), n_dims at 55, ne at 59/67, type at 75, offset at 79 */
    memcpy(c, h.b, n); c[55] = 5; expect_fail(c, n, "ndims.gguf", "'a'");
    memcpy(c, h.b, n); memset(c + 59, 0, 8); expect_fail(c, n, "ne0.gguf", "'a'");
    memcpy(c, h.b, n); c[75] = 2; expect_fail(c, n, "type.gguf", "ggml type 2");
    memcpy(c, h.b, n); c[79] = 4; expect_fail(c, n, "align.gguf", "alignment");
    memcpy(c, h.b, n); c[80] = 0x10; expect_fail(c, n, "range.gguf", "'a'");
    /* duplicate tensor name: rename b -> a (b's name byte at 87 + 8) */
    memcpy(c, h.b, n); c[95] = 'a'; expect_fail(c, n, "dup.gguf", "duplicate");
    /* overlap: b's offset (at 87+8+1+4+16+4 = 120) -> 0 */
    memcpy(c, h.b, n); c[120] = 0; expect_fail(c, n, "overlap.gguf", "overlap");
    /* Q8_0 with row 4 -> not a multiple of its block */
    memcpy(c, h.b, n); c[75] = 8; expect_fail(c, n, "block.gguf", "multiple");
    /* every truncation */
    for (size_t k = 0; k < n; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "trunc%zu.gguf", k);
        expect_fail(h.b, k, nm, NULL);
    }
    /* bool not 0/1 and alignment not a power of two, nested array */
    hb a;
    a.n = 0;
    h_u32(&a, 0x46554747u); h_u32(&a, 3); h_u64(&a, 0); h_u64(&a, 1);
    h_str(&a, "general.alignment"); h_u32(&a, TERN_GGUF_UINT32); h_u32(&a, 48);
    expect_fail(a.b, a.n, "align48.gguf", "general.alignment");
    a.n = 0;
    h_u32(&a, 0x46554747u); h_u32(&a, 3); h_u64(&a, 0); h_u64(&a, 1);
    h_str(&a, "flag"); h_u32(&a, TERN_GGUF_BOOL); a.b[a.n++] = 2;
    expect_fail(a.b, a.n, "bool.gguf", "flag");
    a.n = 0;
    h_u32(&a, 0x46554747u); h_u32(&a, 3); h_u64(&a, 0); h_u64(&a, 1);
    h_str(&a, "arr"); h_u32(&a, TERN_GGUF_ARRAY); h_u32(&a, TERN_GGUF_ARRAY); h_u64(&a, 1);
    h_u32(&a, TERN_GGUF_UINT8); h_u64(&a, 1); a.b[a.n++] = 0;
    expect_fail(a.b, a.n, "nested.gguf", "nested");
    a.n = 0;
    h_u32(&a, 0x46554747u); h_u32(&a, 3); h_u64(&a, 0); h_u64(&a, 2);
    h_str(&a, "k"); h_u32(&a, TERN_GGUF_UINT8); a.b[a.n++] = 1;
    h_str(&a, "k"); h_u32(&a, TERN_GGUF_UINT8); a.b[a.n++] = 1;
    expect_fail(a.b, a.n, "dupkey.gguf", "duplicate key 'k'");
    a.n = 0;
    h_u32(&a, 0x46554747u); h_u32(&a, 3); h_u64(&a, 0); h_u64(&a, 1);
    h_str(&a, "arr"); h_u32(&a, TERN_GGUF_ARRAY); h_u32(&a, TERN_GGUF_UINT64); h_u64(&a, 1ull << 61);
    expect_fail(a.b, a.n, "bigarr.gguf", "arr");
    /* a valid empty file (no tensors, no padding) parses */
    a.n = 0;
    h_u32(&a, 0x46554747u); h_u32(&a, 3); h_u64(&a, 0); h_u64(&a, 0);
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open_mem(a.b, a.n, "empty.gguf", &g), TERN_OK);
    tern_gguf_close(g);
    /* missing file */
    CHECK_EQ_INT(tern_gguf_open("/nonexistent/x.gguf", &g), TERN_ERR_IO);
    CHECK(strstr(tern_last_error(), "/nonexistent/x.gguf"));
}

/* Truncations and byte flips of a real fixture header: never crash, always name the file. */
TEST(fixture_corruption_corpus) {
    const char *p = fixture_path("qwen3-tiny/model-q2_0_g64.gguf");
    if (!p) SKIP("fixtures missing");
    size_t n;
    uint8_t *b = check_slurp(p, &n);
    CHECK(b != NULL);
    if (!b) return;
    tern_gguf *g = NULL;
    /* locate the end of metadata to aim the corruption */
    CHECK_EQ_INT(tern_gguf_open_mem(b, n, "orig", &g), TERN_OK);
    size_t meta = g ? (size_t)g->data_offset : 4096;
    tern_gguf_close(g);
    check_seed();
    int fails = 0, oks = 0;
    char nm[64];
    /* truncations: every 97th byte in the metadata, plus all data-section cut points of a few tensors */
    for (size_t k = 0; k < meta; k += 97) {
        snprintf(nm, sizeof nm, "cut%zu.gguf", k);
        expect_fail(b, k, nm, NULL);
    }
    for (size_t k = meta; k < n; k += n / 50) {
        snprintf(nm, sizeof nm, "cutdata%zu.gguf", k);
        expect_fail(b, k, nm, NULL);
    }
    /* random byte flips in the metadata (structure region: header + kv + infos) */
    uint8_t *c = malloc(n);
    for (int it = 0; it < 400; it++) {
        memcpy(c, b, n);
        int flips = 1 + (int)(check_rand_u64() % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = check_rand_u64() % meta;
            c[at] ^= (uint8_t)(1u << (check_rand_u64() % 8));
        }
        snprintf(nm, sizeof nm, "flip%d.gguf", it);
        tern_status st = tern_gguf_open_mem(c, n, nm, &g);
        if (st == TERN_OK) { oks++; tern_gguf_close(g); }
        else { fails++; CHECK_MSG(strstr(tern_last_error(), nm) != NULL, "unnamed error: %s", tern_last_error()); }
    }
    fprintf(stderr, "  byte flips: %d refused, %d still valid (flips in string payloads)\n", fails, oks);
    CHECK(fails > 0);
    free(c);
    free(b);
}

/* ------------------------------------------------------------ writer */

typedef struct { const tern_gguf *g; } copy_ctx;

static tern_status copy_fixture(const char *in, const char *out) {
    tern_gguf *g = NULL;
    tern_status st = tern_gguf_open(in, &g);
    if (st) return st;
    tern_gguf_writer *w = NULL;
    if ((st = tern_gguf_writer_new(&w))) { tern_gguf_close(g); return st; }
    st = tern_gguf_w_copy_kv(w, g, NULL, NULL);
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        st = tern_gguf_w_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL, NULL);
    }
    if (!st) st = tern_gguf_w_write(w, out, NULL, NULL);
    tern_gguf_writer_free(w);
    tern_gguf_close(g);
    return st;
}

TEST(writer_copies_fixtures_byte_identically) {
    const char *files[] = {"qwen35-tiny/model-pq2_0.gguf", "qwen35-tiny/model-ptq1_0.gguf",
                           "qwen35-tiny/model-q2_0-nohadamard.gguf", "qwen3-tiny/model-q2_0.gguf",
                           "qwen3-tiny/model-q2_0_g64.gguf"};
    char out[256];
    snprintf(out, sizeof out, "/tmp/tern_test_gguf_%d.gguf", (int)getpid());
    for (int i = 0; i < 5; i++) {
        const char *p = fixture_path(files[i]);
        if (!p) SKIP("fixtures missing");
        tern_status st = copy_fixture(p, out);
        CHECK_MSG(st == TERN_OK, "%s: %s", files[i], tern_last_error());
        size_t na = 0, nb = 0;
        uint8_t *a = check_slurp(p, &na), *b = check_slurp(out, &nb);
        CHECK_MSG(a && b && na == nb && !memcmp(a, b, na), "%s: copy differs (%zu vs %zu bytes)", files[i], na, nb);
        free(a);
        free(b);
    }
    unlink(out);
}

static tern_status fill_ramp(void *dst, uint64_t n, void *u) {
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)(i * 7 + 1);
    return TERN_OK;
}

/* A file with every kv type and plain tensors, checked by the Python gguf package. */
TEST(writer_python_oracle) {
    char out[256];
    snprintf(out, sizeof out, "/tmp/tern_test_gguf_py_%d.gguf", (int)getpid());
    tern_gguf_writer *w = NULL;
    CHECK_EQ_INT(tern_gguf_writer_new(&w), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_str(w, "general.architecture", "qwen3"), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u32(w, "general.alignment", 64), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u32(w, "a.u32", 123456), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_i32(w, "a.i32", -7), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u64(w, "a.u64", 1ull << 40), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_f32(w, "a.f32", 0.25f), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_bool(w, "a.bool", true), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u32(w, "a.replaced", 1), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u32(w, "a.replaced", 2), TERN_OK);
    int32_t arr[3] = {5, -6, 7};
    CHECK_EQ_INT(tern_gguf_w_set_arr(w, "a.arr", TERN_GGUF_INT32, arr, 3), TERN_OK);
    const char *strs[] = {"x", "yz", ""};
    CHECK_EQ_INT(tern_gguf_w_set_arr_str(w, "a.strs", strs, NULL, 3), TERN_OK);
    static float f[8 * 3];
    for (int i = 0; i < 24; i++) f[i] = (float)i - 3.5f;
    uint64_t ne[2] = {8, 3};
    CHECK_EQ_INT(tern_gguf_w_add_tensor(w, "t.f32", 2, ne, TERN_DT_F32, f, NULL, NULL), TERN_OK);
    uint64_t ne1[2] = {256, 2};
    CHECK_EQ_INT(tern_gguf_w_add_tensor(w, "t.q1", 2, ne1, TERN_DT_Q1_0, NULL, fill_ramp, NULL), TERN_OK);
    uint64_t ne2[1] = {5};
    CHECK_EQ_INT(tern_gguf_w_add_tensor(w, "t.f16", 1, ne2, TERN_DT_F16, NULL, fill_ramp, NULL), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_add_tensor(w, "t.f16", 1, ne2, TERN_DT_F16, NULL, fill_ramp, NULL), TERN_ERR_INVALID_ARG);
    uint64_t bad[1] = {100};
    CHECK_EQ_INT(tern_gguf_w_add_tensor(w, "t.bad", 1, bad, TERN_DT_Q8_0, f, NULL, NULL), TERN_ERR_SHAPE);
    CHECK_EQ_INT(tern_gguf_w_write(w, out, NULL, NULL), TERN_OK);
    tern_gguf_writer_free(w);
    /* our reader */
    tern_gguf *g = NULL;
    CHECK_EQ_INT(tern_gguf_open(out, &g), TERN_OK);
    if (g) {
        CHECK_EQ_INT(g->alignment, 64);
        CHECK_EQ_INT(g->data_offset % 64, 0);
        check_u64_kv(g, "a.replaced", 2);
        int64_t iv = 0;
        CHECK_EQ_INT(tern_gguf_get_i64(g, "a.i32", &iv), TERN_OK);
        CHECK_EQ_INT(iv, -7);
        const tern_gguf_tensor *t = tern_gguf_find_tensor(g, "t.q1");
        CHECK(t && t->nbytes == 2 * 2 * 18 && t->offset % 64 == 0 && t->data[0] == 1 && t->data[1] == 8);
        t = tern_gguf_find_tensor(g, "t.f32");
        CHECK(t && !memcmp(t->data, f, sizeof f));
        tern_gguf_close(g);
    }
    /* the Python gguf package (independent reader) */
    if (system("python3 -c 'import gguf' 2>/dev/null") != 0) {
        unlink(out);
        SKIP_OPTIONAL("python3 gguf package not installed: Python oracle skipped");
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 - <<'EOF'\n"
             "import gguf, numpy as np, sys\n"
             "r = gguf.GGUFReader('%s')\n"
             "f = r.fields\n"
             "def v(k): return f[k].contents()\n"
             "ok = v('general.architecture') == 'qwen3' and v('a.u32') == 123456 and v('a.i32') == -7\n"
             "ok = ok and v('a.u64') == 1 << 40 and v('a.f32') == 0.25 and v('a.bool') is True\n"
             "ok = ok and v('a.replaced') == 2 and v('a.arr') == [5, -6, 7] and v('a.strs') == ['x', 'yz', '']\n"
             "ok = ok and v('general.alignment') == 64\n"
             "t = {x.name: x for x in r.tensors}\n"
             "ok = ok and list(t['t.f32'].shape) == [8, 3] and np.array_equal(t['t.f32'].data.reshape(-1), np.arange(24, dtype=np.float32) - 3.5)\n"
             "ok = ok and int(t['t.q1'].tensor_type) == 41 and t['t.q1'].n_bytes == 72\n"
             "ok = ok and bytes(t['t.q1'].data.tobytes())[:2] == bytes([1, 8])\n"
             "ok = ok and all(x.data_offset %% 64 == 0 for x in r.tensors)\n"
             "sys.exit(0 if ok else 1)\n"
             "EOF",
             out);
    CHECK_MSG(system(cmd) == 0, "python gguf disagrees with the file written to %s", out);
    unlink(out);
}

/* Every allocation failure is reported as TERN_ERR_NOMEM naming the file, and
 * frees everything (the accounting returns to its baseline). */
TEST(allocation_failures) {
    const char *p = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p) SKIP("fixtures missing");
    size_t base = tern_alloc_current();
    int nomem = 0;
    for (long n = 0; n < 2000; n++) {
        tern_alloc_fail_after(n);
        tern_gguf *g = NULL;
        tern_status st = tern_gguf_open(p, &g);
        tern_hadamard_meta *h = NULL;
        tern_status st2 = st ? st : tern_hadamard_from_gguf(g, &h);
        tern_alloc_fail_after(-1);
        if (st == TERN_OK && st2 == TERN_OK) {
            CHECK(h != NULL);
            tern_hadamard_free(h);
            tern_gguf_close(g);
            CHECK_EQ_INT(tern_alloc_current(), base);
            break;
        }
        nomem++;
        CHECK_MSG((st ? st : st2) == TERN_ERR_NOMEM, "fail_after %ld: %s", n, tern_last_error());
        CHECK_MSG(strstr(tern_last_error(), "model-pq2_0.gguf") != NULL, "fail_after %ld: %s", n, tern_last_error());
        tern_gguf_close(g);
        CHECK_EQ_INT(tern_alloc_current(), base);
    }
    CHECK(nomem > 10);
}

int main(void) {
    RUN(fixture_qwen35_pq2_0);
    RUN(fixture_qwen35_ptq1_0);
    RUN(fixture_q2_0_variants);
    RUN(handbuilt_valid_and_q2_detection);
    RUN(handbuilt_hostile);
    RUN(fixture_corruption_corpus);
    RUN(writer_copies_fixtures_byte_identically);
    RUN(writer_python_oracle);
    RUN(allocation_failures);
    return check_summary();
}
