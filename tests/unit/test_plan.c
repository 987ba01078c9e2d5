/*
 * test_plan.c - the step plan (src/model/plan.h) built from hand-made models (no file,
 * no back-end): the ops of each layer kind in order, the buffer widths, the matrix ids,
 * the fusion matcher (the runs a back-end may fuse, and a non-SwiGLU activation that
 * must not be), and the flat device-memory form's round trip and refusals.
 * Every expectation below is worked out by hand from the hyper-parameters in the test.
 */
#include "check.h"
#include "model/model.h"

#include <stdint.h>

/* qwen35-like: 4 layers, attention every 4th (layers 0..2 GDN, 3 attention), gated
 * attention, Hadamard, GDN output permuted (a GGUF of grouped value heads). */
static void qwen35_model(tern_model *m, tm_layer *layers) {
    memset(m, 0, sizeof *m);
    memset(layers, 0, 4 * sizeof *layers);
    tm_hparams *hp = &m->hp;
    hp->arch = TM_ARCH_QWEN35;
    hp->n_layer = 4;
    hp->n_embd = 64;
    hp->n_ff = 96;
    hp->n_vocab = 100;
    hp->n_head = 4;
    hp->n_head_kv = 2;
    hp->head_dim = 16;
    hp->attn_gate = true;
    hp->rope_dims = 8;
    hp->rope_theta = 1e7f;
    hp->eps = 1e-6f;
    hp->full_attn_interval = 4;
    hp->ssm_n_k = 2;
    hp->ssm_n_v = 6;
    hp->ssm_dk = 16;
    hp->ssm_dv = 16;
    hp->conv_k = 4;
    hp->n_attn_layers = 1;
    hp->n_gdn_layers = 3;
    for (int i = 0; i < 4; i++) {
        layers[i].is_attn = i == 3;
        layers[i].kv_index = i == 3 ? 0 : -1;
        layers[i].gdn_index = i < 3 ? i : -1;
    }
    m->layers = layers;
    m->hadamard = true;
    m->had_block = 32;
    m->out_permute = true;
}

/* qwen3-like: 2 attention layers, no gate, no Hadamard. */
static void qwen3_model(tern_model *m, tm_layer *layers) {
    memset(m, 0, sizeof *m);
    memset(layers, 0, 2 * sizeof *layers);
    tm_hparams *hp = &m->hp;
    hp->arch = TM_ARCH_QWEN3;
    hp->n_layer = 2;
    hp->n_embd = 32;
    hp->n_ff = 64;
    hp->n_vocab = 50;
    hp->n_head = 4;
    hp->n_head_kv = 2;
    hp->head_dim = 8;
    hp->rope_dims = 8;
    hp->rope_theta = 1e6f;
    hp->eps = 1e-6f;
    hp->n_attn_layers = 2;
    for (int i = 0; i < 2; i++) {
        layers[i].is_attn = true;
        layers[i].kv_index = i;
    }
    m->layers = layers;
}

static const int16_t k_gdn_layer[] = {TM_OP_SITE, TM_OP_MATMUL, TM_OP_MATMUL, TM_OP_GDN, TM_OP_PERMUTE,
                                      TM_OP_HADAMARD, TM_OP_MATMUL, TM_OP_SITE, TM_OP_MATMUL, TM_OP_ACT,
                                      TM_OP_MATMUL};
static const int16_t k_gated_attn_layer[] = {TM_OP_SITE, TM_OP_MATMUL, TM_OP_SPLIT_HEADS, TM_OP_HEAD_NORM,
                                             TM_OP_HEAD_NORM, TM_OP_ROPE, TM_OP_ROPE, TM_OP_KV_STORE,
                                             TM_OP_ATTENTION, TM_OP_MUL_SIGMOID, TM_OP_HADAMARD,
                                             TM_OP_MATMUL, TM_OP_SITE, TM_OP_MATMUL, TM_OP_ACT,
                                             TM_OP_MATMUL};
static const int16_t k_attn_layer[] = {TM_OP_SITE, TM_OP_MATMUL, TM_OP_HEAD_NORM, TM_OP_HEAD_NORM,
                                       TM_OP_ROPE, TM_OP_ROPE, TM_OP_KV_STORE, TM_OP_ATTENTION,
                                       TM_OP_HADAMARD, TM_OP_MATMUL, TM_OP_SITE, TM_OP_MATMUL,
                                       TM_OP_ACT, TM_OP_MATMUL};

static bool kinds_at(const tm_plan *p, int i0, const int16_t *k, int n, int layer) {
    for (int i = 0; i < n; i++)
        if (i0 + i >= p->n_ops || p->ops[i0 + i].kind != k[i] || p->ops[i0 + i].layer != layer) return false;
    return true;
}

TEST(qwen35_ops) {
    tern_model m;
    tm_layer L[4];
    qwen35_model(&m, L);
    tm_plan p;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_OK);
    /* embed + 3 GDN layers of 11 + 1 attention layer of 16 + logits */
    CHECK_EQ_INT(p.n_ops, 1 + 3 * 11 + 16 + 1);
    CHECK_EQ_INT(p.n_layer_ops[0], 16);
    CHECK_EQ_INT(p.n_layer_ops[1], 11);
    CHECK_EQ_INT(p.ops[0].kind, TM_OP_EMBED);
    CHECK_EQ_INT(p.ops[0].had, 0); /* no inverse transform on this embedding */
    for (int l = 0; l < 3; l++) CHECK(kinds_at(&p, 1 + 11 * l, k_gdn_layer, 11, l));
    CHECK(kinds_at(&p, 34, k_gated_attn_layer, 16, 3));
    CHECK_EQ_INT(p.ops[p.n_ops - 1].kind, TM_OP_LOGITS);
    /* layer 0's first site adds no delta; every other site does */
    CHECK(p.ops[1].flags & TM_OPF_FIRST);
    CHECK_EQ_INT(p.ops[1].in2, TM_BUF_NONE);
    CHECK(!(p.ops[8].flags & TM_OPF_FIRST));
    CHECK_EQ_INT(p.ops[8].in2, TM_BUF_DELTA);
    /* GDN layer 1: qkv|z from the rotated input, a|b from the un-rotated one */
    const tm_plan_op *qkvz = &p.ops[13], *ab = &p.ops[14], *gdn = &p.ops[15];
    CHECK_EQ_INT(qkvz->in, TM_BUF_ROT);
    CHECK_EQ_INT(qkvz->n_mat, 2);
    CHECK_EQ_INT(qkvz->out_w[0], 2 * 2 * 16 + 6 * 16); /* C = 160 */
    CHECK_EQ_INT(qkvz->out_w[1], 6 * 16);             /* VW = 96 */
    CHECK_EQ_INT(qkvz->mat[0], tm_mat_make(1, TM_ROLE_WQKV));
    CHECK_EQ_INT(tm_mat_layer(qkvz->mat[1]), 1);
    CHECK_EQ_INT(tm_mat_role(qkvz->mat[1]), TM_ROLE_WZ);
    CHECK_EQ_INT(ab->in, TM_BUF_NORMED);
    CHECK_EQ_INT(ab->out_buf[1], TM_BUF_B);
    CHECK_EQ_INT(gdn->cache, 1);
    CHECK(gdn->flags & TM_OPF_PER_SEQ);
    CHECK_EQ_INT(gdn->n_head, 2);
    CHECK_EQ_INT(gdn->n_head_kv, 6);
    /* the attention layer */
    const tm_plan_op *att = &p.ops[34 + 8];
    CHECK_EQ_INT(att->kind, TM_OP_ATTENTION);
    CHECK_EQ_INT(att->cache, 0);
    CHECK_EQ_INT(att->in, TM_BUF_BIG1); /* q after the split */
    CHECK(att->flags & TM_OPF_GATED);
    CHECK_NEAR(att->scale, 0.25, 1e-7); /* 1/sqrt(16) */
    CHECK_EQ_INT(p.ops[34 + 1].out_w[0], 4 * 16 * 2); /* q|gate rows */
    CHECK_EQ_INT(p.ops[34 + 11].out, TM_BUF_DELTA);
    CHECK_EQ_INT(p.ops[34 + 14].act, TM_ACT_SWIGLU);
    CHECK_EQ_INT(p.ops[34 + 14].had, 96);
    /* widths: BIG0 max(q|gate 128, C 160, F 96); BIG1 max(q 64, z 96, up 96); BIG2
     * max(gate 64, work 160, permuted 96, act 96); BIG3 max(o 64, gdn out 96) */
    const int32_t want[TM_BUF_COUNT] = {64, 64, 64, 64, 160, 96, 160, 96, 32, 32, 6, 6};
    for (int b = 0; b < TM_BUF_COUNT; b++) CHECK_EQ_INT(p.buf_width[b], want[b]);
    CHECK_EQ_INT((int)tm_plan_row_floats(&p), 4 * 64 + 160 + 96 + 160 + 96 + 32 + 32 + 6 + 6);
    tm_plan_free(&p);
}

TEST(qwen3_ops) {
    tern_model m;
    tm_layer L[2];
    qwen3_model(&m, L);
    tm_plan p;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_OK);
    CHECK_EQ_INT(p.n_ops, 1 + 2 * 14 + 1);
    CHECK_EQ_INT(p.n_layer_ops[0], 14);
    CHECK_EQ_INT(p.n_layer_ops[1], 0);
    for (int l = 0; l < 2; l++) CHECK(kinds_at(&p, 1 + 14 * l, k_attn_layer, 14, l));
    /* no Hadamard: the matmuls read the normed rows; q stays in BIG0 (no split) */
    CHECK_EQ_INT(p.ops[2].in, TM_BUF_NORMED);
    CHECK_EQ_INT(p.ops[2].out_w[0], 32);
    CHECK_EQ_INT(p.ops[1 + 7].in, TM_BUF_BIG0);
    CHECK(!(p.ops[1 + 7].flags & TM_OPF_GATED));
    CHECK_EQ_INT(p.ops[1 + 14 + 7].cache, 1);
    /* BIG0 max(q 32, F 64); BIG1 max(fused q 32, up 64); BIG2 act 64; BIG3 o 32; no GDN */
    const int32_t want[TM_BUF_COUNT] = {32, 32, 32, 32, 64, 64, 64, 32, 16, 16, 0, 0};
    for (int b = 0; b < TM_BUF_COUNT; b++) CHECK_EQ_INT(p.buf_width[b], want[b]);
    tm_plan_free(&p);
}

TEST(fusion_runs) {
    tern_model m;
    tm_layer L[4];
    qwen35_model(&m, L);
    tm_plan p;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_OK);
    CHECK_EQ_INT(tm_plan_match(&p, 1, TM_FUSE_SITE_MATMUL), 2);
    CHECK_EQ_INT(tm_plan_match(&p, 2, TM_FUSE_SITE_MATMUL), 0);
    CHECK_EQ_INT(tm_plan_match(&p, 3, TM_FUSE_GDN_CORE), 5);   /* ab gdn permute had out */
    CHECK_EQ_INT(tm_plan_match(&p, 34 + 2, TM_FUSE_ATTN_CORE), 8); /* split..mul_sigmoid */
    CHECK_EQ_INT(tm_plan_match(&p, 34 + 3, TM_FUSE_ATTN_CORE), 0); /* not at its start */
    CHECK_EQ_INT(tm_plan_match(&p, 34 + 10, TM_FUSE_HAD_MATMUL), 2);
    CHECK_EQ_INT(tm_plan_match(&p, 34 + 14, TM_FUSE_ACT_MATMUL), 2);
    tm_plan_free(&p);
    tm_layer L3[2];
    qwen3_model(&m, L3);
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_OK);
    CHECK_EQ_INT(tm_plan_match(&p, 3, TM_FUSE_ATTN_CORE), 6); /* no split, no gate */
    tm_plan_free(&p);
}

/* An FFN activation other than SwiGLU: the fused SwiGLU run must not match (a back-end
 * runs it op by op), while the rest of the plan is unchanged. */
TEST(non_swiglu_falls_back) {
    tern_model m;
    tm_layer L[4];
    qwen35_model(&m, L);
    tm_plan p, q;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_OK);
    CHECK_EQ_INT(tm_plan_build_act(&m, TM_ACT_GEGLU_TANH, &q), TERN_OK);
    CHECK_EQ_INT(q.n_ops, p.n_ops);
    int acts = 0;
    for (int i = 0; i < q.n_ops; i++) {
        if (q.ops[i].kind != TM_OP_ACT) continue;
        acts++;
        CHECK_EQ_INT(q.ops[i].act, TM_ACT_GEGLU_TANH);
        CHECK_EQ_INT(tm_plan_match(&q, i, TM_FUSE_ACT_MATMUL), 0);
        CHECK_EQ_INT(tm_plan_match(&p, i, TM_FUSE_ACT_MATMUL), 2);
    }
    CHECK_EQ_INT(acts, 4);
    tm_plan_free(&p);
    tm_plan_free(&q);
}

TEST(flat_round_trip) {
    tern_model m;
    tm_layer L[4];
    qwen35_model(&m, L);
    tm_plan p, r;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_OK);
    size_t n = tm_plan_flat_bytes(&p);
    CHECK(n >= (size_t)p.n_ops * sizeof(tm_plan_op));
    CHECK_EQ_INT((int)(n % 8), 0);
    unsigned char *buf = malloc(n);
    CHECK(buf != NULL);
    if (!buf) return;
    CHECK_EQ_INT((int)tm_plan_flatten(&p, buf, n - 1), 0); /* too small */
    CHECK_EQ_INT((int)tm_plan_flatten(&p, buf, n), (int)n);
    uint32_t magic;
    memcpy(&magic, buf, 4);
    CHECK_EQ_INT((int)magic, (int)TM_PLAN_MAGIC);
    CHECK_EQ_INT(tm_plan_unflatten(buf, n, &r), TERN_OK);
    CHECK_EQ_INT(r.n_ops, p.n_ops);
    CHECK(!memcmp(r.ops, p.ops, (size_t)p.n_ops * sizeof(tm_plan_op)));
    CHECK(!memcmp(r.buf_width, p.buf_width, sizeof p.buf_width));
    CHECK_EQ_INT(r.n_layer_ops[0], 16);
    tm_plan_free(&r);
    CHECK_EQ_INT(tm_plan_unflatten(buf, n - sizeof(tm_plan_op), &r), TERN_ERR_FORMAT); /* truncated */
    CHECK_EQ_INT(tm_plan_unflatten(buf, 8, &r), TERN_ERR_FORMAT);
    buf[0] ^= 1;
    CHECK_EQ_INT(tm_plan_unflatten(buf, n, &r), TERN_ERR_FORMAT); /* magic */
    buf[0] ^= 1;
    buf[4] = 99;
    CHECK_EQ_INT(tm_plan_unflatten(buf, n, &r), TERN_ERR_FORMAT); /* version */
    free(buf);
    tm_plan_free(&p);
}

TEST(unknown_arch) {
    tern_model m;
    tm_layer L[2];
    qwen3_model(&m, L);
    m.hp.arch = TM_ARCH_COUNT;
    tm_plan p;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_ERR_UNSUPPORTED);
    CHECK(p.ops == NULL);
    /* a GDN layer in an architecture without GDN rules */
    qwen3_model(&m, L);
    L[1].is_attn = false;
    CHECK_EQ_INT(tm_plan_build(&m, &p), TERN_ERR_UNSUPPORTED);
}

int main(void) {
    RUN(qwen35_ops);
    RUN(qwen3_ops);
    RUN(fusion_runs);
    RUN(non_swiglu_falls_back);
    RUN(flat_round_trip);
    RUN(unknown_arch);
    return check_summary();
}
