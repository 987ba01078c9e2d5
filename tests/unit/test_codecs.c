/*
 * test_codecs.c - the lossless ternary codecs (src/formats/codecs.h) and the GDN
 * V-head permutations (src/formats/vorder.h): round trips on random rows of
 * awkward sizes, hand-computed bytes, PTQ1_0 against PrismML-written fixture
 * bytes, g64 -> g128 refusal, code-3 refusal everywhere.
 */
#include "check.h"
#include "formats/codecs.h"
#include "formats/gguf.h"
#include "formats/vorder.h"

#include <stdlib.h>

static void rand_codes(uint8_t *c, size_t n) {
    for (size_t i = 0; i < n; i++) c[i] = (uint8_t)(check_rand_u64() % 3);
}
static void rand_scales(uint16_t *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (uint16_t)(0x1c00 + check_rand_u64() % 0x1000);
}

/* Sizes that are multiples of 128 but odd block counts; K=128 is the edge. */
static const uint64_t Ks[] = {128, 384, 640, 1152, 5120 + 128 * 3};

TEST(hand_bytes) {
    /* PQ2_0: codes 0,1,2,1 -> 0 | 1<<2 | 2<<4 | 1<<6 = 100 */
    uint8_t c[128], blk[34];
    uint16_t d = 0x3c00;
    memset(c, 1, sizeof c);
    c[0] = 0; c[1] = 1; c[2] = 2; c[3] = 1;
    CHECK(tern_encode_pq2_0_row(c, &d, 128, blk, "t", 0) == TERN_OK);
    CHECK_EQ_INT(blk[0], 0x00);
    CHECK_EQ_INT(blk[1], 0x3c);
    CHECK_EQ_INT(blk[2], 100);
    CHECK_EQ_INT(blk[3], 0x55); /* four zeros (code 1) */
    /* PTQ1_0: all +1 -> qs bytes ceil(256*242/243) = 255, qh ceil(256*240/243) = 253 */
    uint8_t p[28];
    memset(c, 2, sizeof c);
    CHECK(tern_encode_ptq1_0_row(c, &d, 128, p, "t", 0) == TERN_OK);
    CHECK_EQ_INT(p[0], 255);
    CHECK_EQ_INT(p[23], 255);
    CHECK_EQ_INT(p[24], 253);
    CHECK_EQ_INT(p[25], 253);
    CHECK_EQ_INT(tern_rd16(p + 26), 0x3c00);
    /* all -1 -> 0 everywhere */
    memset(c, 0, sizeof c);
    CHECK(tern_encode_ptq1_0_row(c, &d, 128, p, "t", 0) == TERN_OK);
    for (int i = 0; i < 26; i++) CHECK_EQ_INT(p[i], 0);
    /* element 16 = trit 1 of qs[0] = +1, rest 0 (code 1):
       v = 1*81 + 2*27 + 1*9 + 1*3 + 1 = 148 -> ceil(256*148/243) = 156 */
    memset(c, 1, sizeof c);
    c[16] = 2;
    CHECK(tern_encode_ptq1_0_row(c, &d, 128, p, "t", 0) == TERN_OK);
    CHECK_EQ_INT(p[0], 156);
    /* all-zero trits (code 1) elsewhere: v = 121 -> ceil(30976/243) = 128 */
    CHECK_EQ_INT(p[1], 128);
    /* element 122 = trit 1 of qh[0] -> code 0: v = (1*27+0*9+1*3+1)*3 = 93 -> ceil(23808/243)=98 */
    memset(c, 1, sizeof c);
    c[122] = 0;
    CHECK(tern_encode_ptq1_0_row(c, &d, 128, p, "t", 0) == TERN_OK);
    CHECK_EQ_INT(p[24], 98);
    /* MLX word: element j at bits 2j */
    memset(c, 1, sizeof c);
    c[15] = 2;
    c[0] = 0;
    uint32_t w[8];
    CHECK(tern_encode_mlx_row(c, 128, w, "t", 0) == TERN_OK);
    CHECK_EQ_INT(w[0], 0x95555554u);
}

TEST(round_trips) {
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        uint64_t K = Ks[ki];
        uint8_t *c = malloc(K), *c2 = malloc(K);
        uint16_t *d = malloc(K / 128 * 2), *d2 = malloc(K / 128 * 2);
        uint8_t *buf = malloc(K), *buf2 = malloc(K);
        uint32_t *w = malloc(K / 4);
        for (int rep = 0; rep < 20; rep++) {
            rand_codes(c, K);
            rand_scales(d, K / 128);
            const tern_dtype ts[] = {TERN_DT_PQ2_0, TERN_DT_Q2_0, TERN_DT_PTQ1_0, TERN_DT_Q2_0_G64};
            for (int t = 0; t < 4; t++) {
                CHECK(tern_encode_row(ts[t], c, d, K, buf, "r", rep) == TERN_OK);
                memset(c2, 9, K);
                CHECK(tern_decode_row(ts[t], buf, K, c2, d2, "r", rep) == TERN_OK);
                CHECK(!memcmp(c, c2, K));
                CHECK(!memcmp(d, d2, K / 128 * 2));
                /* transcode to every other layout and back */
                for (int u = 0; u < 4; u++) {
                    CHECK(tern_transcode_rows(ts[t], buf, ts[u], buf2, K, 1, "r") == TERN_OK);
                    CHECK(tern_decode_row(ts[u], buf2, K, c2, d2, "r", rep) == TERN_OK);
                    CHECK(!memcmp(c, c2, K));
                    CHECK(!memcmp(d, d2, K / 128 * 2));
                }
                /* dequantize agrees with (code-1)*d */
                float *f = malloc(K * 4);
                CHECK(tern_dequant_row(ts[t], buf, K, f, "r", rep) == TERN_OK);
                int bad = 0;
                for (uint64_t j = 0; j < K; j++)
                    bad += f[j] != ((int)c[j] - 1) * tern_f16_to_f32(d[j / 128]);
                CHECK_EQ_INT(bad, 0);
                free(f);
            }
            /* PQ2_0 == fork Q2_0 bytes; MLX words == PQ2_0 qs bytes */
            uint8_t *pq = malloc(K / 128 * 34), *q2 = malloc(K / 128 * 34);
            CHECK(tern_encode_pq2_0_row(c, d, K, pq, "r", 0) == TERN_OK);
            CHECK(tern_encode_row(TERN_DT_Q2_0, c, d, K, q2, "r", 0) == TERN_OK);
            CHECK(!memcmp(pq, q2, K / 128 * 34));
            CHECK(tern_encode_mlx_row(c, K, w, "r", 0) == TERN_OK);
            for (uint64_t b = 0; b < K / 128; b++)
                CHECK(!memcmp(pq + b * 34 + 2, (uint8_t *)w + b * 32, 32));
            CHECK(tern_decode_mlx_row(w, K, c2, "r", 0) == TERN_OK);
            CHECK(!memcmp(c, c2, K));
            /* trits */
            int8_t *tr = malloc(K);
            CHECK(tern_codes_to_trits(c, K, tr, "r", 0) == TERN_OK);
            CHECK(tern_trits_to_codes(tr, K, c2, "r", 0) == TERN_OK);
            CHECK(!memcmp(c, c2, K));
            free(tr);
            free(pq);
            free(q2);
        }
        free(c); free(c2); free(d); free(d2); free(buf); free(buf2); free(w);
    }
}

TEST(code3_refused) {
    uint8_t c[256], blk[2 * 34], c2[256];
    uint16_t d[2] = {0x2000, 0x2100};
    memset(c, 1, sizeof c);
    CHECK(tern_encode_pq2_0_row(c, d, 256, blk, "x", 0) == TERN_OK);
    blk[34 + 2 + 5] |= 0xC0; /* element 128 + 5*4 + 3 = 151 becomes code 3 */
    CHECK(tern_decode_pq2_0_row(blk, 256, c2, d, "blk.0.ffn_up.weight", 7) == TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "blk.0.ffn_up.weight") != NULL);
    CHECK(strstr(tern_last_error(), "row 7") != NULL);
    CHECK(strstr(tern_last_error(), "element 151") != NULL);
    float f[256];
    CHECK(tern_dequant_row(TERN_DT_PQ2_0, blk, 256, f, "x", 0) == TERN_ERR_FORMAT);
    CHECK(tern_transcode_rows(TERN_DT_PQ2_0, blk, TERN_DT_PTQ1_0, c2, 256, 1, "x") == TERN_ERR_FORMAT);
    uint8_t cp[2 * 34];
    CHECK(tern_transcode_rows(TERN_DT_PQ2_0, blk, TERN_DT_Q2_0, cp, 256, 1, "y") == TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "element 151") != NULL);
    /* encoders refuse code 3 */
    c[9] = 3;
    CHECK(tern_encode_pq2_0_row(c, d, 256, blk, "x", 0) == TERN_ERR_FORMAT);
    CHECK(tern_encode_ptq1_0_row(c, d, 256, blk, "x", 0) == TERN_ERR_FORMAT);
    uint32_t w[16];
    CHECK(tern_encode_mlx_row(c, 256, w, "x", 0) == TERN_ERR_FORMAT);
    /* MLX words with a code 3 */
    memset(c, 1, sizeof c);
    CHECK(tern_encode_mlx_row(c, 256, w, "x", 0) == TERN_OK);
    w[3] |= 3u << 30;
    CHECK(tern_decode_mlx_row(w, 256, c2, "m", 2) == TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "element 63") != NULL);
    /* mainline g64 code 3 (+2 in mainline) is refused too */
    uint8_t g[4 * 18];
    CHECK(tern_encode_q2_0_g64_row(c, d, 256, g, "x", 0) == TERN_OK);
    g[18 + 2] = 0xff;
    CHECK(tern_decode_q2_0_g64_row(g, 256, c2, d, "x", 0) == TERN_ERR_FORMAT);
    CHECK(tern_dequant_row(TERN_DT_Q2_0_G64, g, 256, f, "x", 0) == TERN_ERR_FORMAT);
    int8_t t[4] = {0, 1, -1, 2};
    CHECK(tern_trits_to_codes(t, 4, c2, "x", 0) == TERN_ERR_FORMAT);
}

TEST(g64_refusal) {
    uint8_t c[256], g[4 * 18], c2[256];
    uint16_t d[2] = {0x2000, 0x2100}, d2[2];
    memset(c, 1, sizeof c);
    CHECK(tern_encode_q2_0_g64_row(c, d, 256, g, "x", 0) == TERN_OK);
    CHECK_EQ_INT(tern_rd16(g), 0x2000);
    CHECK_EQ_INT(tern_rd16(g + 18), 0x2000);
    CHECK_EQ_INT(tern_rd16(g + 36), 0x2100);
    CHECK_EQ_INT(tern_rd16(g + 54), 0x2100);
    g[54] ^= 1; /* second half of group 1 has a different scale */
    CHECK(tern_decode_q2_0_g64_row(g, 256, c2, d2, "blk.3.attn_k.weight", 11) == TERN_ERR_UNSUPPORTED);
    CHECK(strstr(tern_last_error(), "blk.3.attn_k.weight") != NULL);
    CHECK(strstr(tern_last_error(), "row 11") != NULL);
    CHECK(strstr(tern_last_error(), "group 1") != NULL);
    /* but it still dequantizes (per-block scales) */
    float f[256];
    CHECK(tern_dequant_row(TERN_DT_Q2_0_G64, g, 256, f, "x", 0) == TERN_OK);
    /* K = 192: valid g64, not regroupable */
    CHECK(tern_decode_q2_0_g64_row(g, 192, c2, d2, "y", 0) == TERN_ERR_UNSUPPORTED);
}

TEST(mlx_biases) {
    uint16_t s[3] = {0x2000, 0x2466, 0x1c01}, b[3] = {0xa000, 0xa466, 0x9c01};
    CHECK(tern_mlx_check_biases(s, b, 3, "m", 0) == TERN_OK);
    b[2] = 0x9c00;
    CHECK(tern_mlx_check_biases(s, b, 3, "m.biases", 4) == TERN_ERR_FORMAT);
    CHECK(strstr(tern_last_error(), "group 2") != NULL);
}

TEST(q1_0_decode) {
    uint8_t blk[18];
    uint16_t h = 0x3800; /* 0.5 */
    memcpy(blk, &h, 2);
    memset(blk + 2, 0, 16);
    blk[2] = 0x81;  /* elements 0 and 7 positive */
    blk[17] = 0x80; /* element 127 positive */
    float f[128];
    CHECK(tern_dequant_row(TERN_DT_Q1_0, blk, 128, f, "q", 0) == TERN_OK);
    CHECK(f[0] == 0.5f && f[7] == 0.5f && f[127] == 0.5f);
    CHECK(f[1] == -0.5f && f[8] == -0.5f && f[126] == -0.5f);
}

TEST(vorder_perm) {
    /* n_k = 2, r = 3: grouped g = k*3+j, tiled slot p = j*2+k.
       grouped [0 1 2 3 4 5] -> tiled [0 3 1 4 2 5] */
    tern_gdn_dims g = {2, 6, 1, 1};
    uint8_t src[6] = {0, 1, 2, 3, 4, 5}, dst[6], back[6];
    tern_vorder_units(dst, src, &g, 1, TERN_VORDER_TO_TILED);
    const uint8_t want[6] = {0, 3, 1, 4, 2, 5};
    CHECK(!memcmp(dst, want, 6));
    tern_vorder_units(back, dst, &g, 1, TERN_VORDER_TO_GROUPED);
    CHECK(!memcmp(back, src, 6));
    /* qkv: 2*kdim rows untouched, V rows permuted in head_v_dim-row units */
    tern_gdn_dims g2 = {2, 6, 2, 3}; /* kdim 4, vdim 18 */
    uint64_t rows = 2 * 4 + 18;
    uint8_t a[26 * 2], b2[26 * 2], c[26 * 2];
    for (int i = 0; i < 52; i++) a[i] = (uint8_t)i;
    CHECK(tern_vorder_tensor(TERN_VO_QKV, &g2, a, b2, rows, 2, TERN_VORDER_TO_TILED, "q") == TERN_OK);
    CHECK(!memcmp(a, b2, 16));
    /* tiled slot 1 = grouped head 3 (k=1, j=0): rows 8+9..8+11 */
    CHECK_EQ_INT(b2[16 + 3 * 2], a[16 + 9 * 2]);
    CHECK(tern_vorder_tensor(TERN_VO_QKV, &g2, b2, c, rows, 2, TERN_VORDER_TO_GROUPED, "q") == TERN_OK);
    CHECK(!memcmp(a, c, 52));
    CHECK(tern_vorder_tensor(TERN_VO_QKV, &g2, a, b2, rows - 1, 2, TERN_VORDER_TO_TILED, "blk.0.attn_qkv.weight") == TERN_ERR_SHAPE);
    CHECK_EQ_INT(tern_vorder_kind_of("blk.3.ssm_out.weight"), TERN_VO_COLS);
    CHECK_EQ_INT(tern_vorder_kind_of("blk.3.ssm_a"), TERN_VO_ELEMS);
    CHECK_EQ_INT(tern_vorder_kind_of("blk.3.ssm_norm.weight"), TERN_VO_NONE);
    CHECK_EQ_INT(tern_vorder_kind_of_hf("model.layers.0.linear_attn.in_proj_z.weight"), TERN_VO_ROWS);
}

/* Decode every PTQ1_0 tensor of the PrismML-written fixture and re-encode it:
 * the bytes must be identical; its codes/scales must equal the PQ2_0 file's. */
TEST(ptq1_0_fixture_bytes) {
    const char *p1 = fixture_path("qwen35-tiny/model-ptq1_0.gguf");
    const char *p2 = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!p1 || !p2) SKIP("fixtures missing");
    tern_gguf *a = NULL, *b = NULL;
    if (tern_gguf_open(p1, &a) != TERN_OK || tern_gguf_open(p2, &b) != TERN_OK) {
        CHECK_MSG(0, "cannot open fixtures: %s", tern_last_error());
        tern_gguf_close(a);
        return;
    }
    int n_ptq = 0;
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const tern_gguf_tensor *t = &a->tensors[i];
        if (t->type != TERN_DT_PTQ1_0) continue;
        const tern_gguf_tensor *u = tern_gguf_find_tensor(b, t->name);
        CHECK(u && u->type == TERN_DT_PQ2_0);
        if (!u) continue;
        uint64_t K = t->ne[0], N = t->n_elems / K;
        uint8_t *re = malloc(t->nbytes), *pq = malloc(u->nbytes);
        CHECK(tern_transcode_rows(TERN_DT_PTQ1_0, t->data, TERN_DT_PTQ1_0, re, K, N, t->name) == TERN_OK);
        CHECK_MSG(!memcmp(re, t->data, t->nbytes), "%s: PTQ1_0 re-encode differs", t->name);
        CHECK(tern_transcode_rows(TERN_DT_PTQ1_0, t->data, TERN_DT_PQ2_0, pq, K, N, t->name) == TERN_OK);
        CHECK_MSG(!memcmp(pq, u->data, u->nbytes), "%s: PTQ1_0 -> PQ2_0 differs from fixture", t->name);
        CHECK(tern_transcode_rows(TERN_DT_PQ2_0, u->data, TERN_DT_PTQ1_0, re, K, N, t->name) == TERN_OK);
        CHECK_MSG(!memcmp(re, t->data, t->nbytes), "%s: PQ2_0 -> PTQ1_0 differs from fixture", t->name);
        bytes += t->nbytes;
        n_ptq++;
        free(re);
        free(pq);
    }
    CHECK(n_ptq > 20);
    fprintf(stderr, "  %d PTQ1_0 tensors (%llu bytes) re-encoded byte-identically\n", n_ptq,
            (unsigned long long)bytes);
    tern_gguf_close(a);
    tern_gguf_close(b);
}

/* qwen3-tiny: fork Q2_0 (g128) <-> mainline g64 equal the fixture bytes. */
TEST(g64_fixture_bytes) {
    const char *p1 = fixture_path("qwen3-tiny/model-q2_0.gguf");
    const char *p2 = fixture_path("qwen3-tiny/model-q2_0_g64.gguf");
    if (!p1 || !p2) SKIP("fixtures missing");
    tern_gguf *a = NULL, *b = NULL;
    if (tern_gguf_open(p1, &a) != TERN_OK || tern_gguf_open(p2, &b) != TERN_OK) {
        CHECK_MSG(0, "cannot open fixtures: %s", tern_last_error());
        tern_gguf_close(a);
        return;
    }
    int n = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const tern_gguf_tensor *t = &a->tensors[i];
        if (t->type != TERN_DT_Q2_0) continue;
        const tern_gguf_tensor *u = tern_gguf_find_tensor(b, t->name);
        CHECK(u && u->type == TERN_DT_Q2_0_G64);
        if (!u) continue;
        uint64_t K = t->ne[0], N = t->n_elems / K;
        uint8_t *x = malloc(u->nbytes), *y = malloc(t->nbytes);
        CHECK(tern_transcode_rows(TERN_DT_Q2_0, t->data, TERN_DT_Q2_0_G64, x, K, N, t->name) == TERN_OK);
        CHECK_MSG(!memcmp(x, u->data, u->nbytes), "%s: g128 -> g64 differs", t->name);
        CHECK(tern_transcode_rows(TERN_DT_Q2_0_G64, u->data, TERN_DT_Q2_0, y, K, N, t->name) == TERN_OK);
        CHECK_MSG(!memcmp(y, t->data, t->nbytes), "%s: g64 -> g128 differs", t->name);
        free(x);
        free(y);
        n++;
    }
    CHECK(n >= 20);
    tern_gguf_close(a);
    tern_gguf_close(b);
}

int main(void) {
    check_seed();
    RUN(hand_bytes);
    RUN(round_trips);
    RUN(code3_refused);
    RUN(g64_refusal);
    RUN(mlx_biases);
    RUN(q1_0_decode);
    RUN(vorder_perm);
    RUN(ptq1_0_fixture_bytes);
    RUN(g64_fixture_bytes);
    return check_summary();
}
