/*
 * test_persist_build.c - the persistent decode step's program (tp_build,
 * src/backends/cuda/persist_build.c; docs/persistent.md), no GPU: on a hand-made
 * model of the Ternary-Bonsai-8B shape (36 layers, 4096/12288, 32/8 heads of 128,
 * 151,936 tokens) for 1..132 CTAs and on the qwen3-tiny fixture loaded on the CPU:
 *   - every row of every matrix of the plan is computed by exactly one task, and every
 *     matrix of the plan is in exactly one stage;
 *   - every dependency and norm source points backwards (acyclic), to a stage that
 *     writes what the waiting stage reads;
 *   - each CTA's list is in stage order, every (stage, task) is in exactly one list, and a
 *     simulated run (all CTAs resident, a task runs once its dependency has signalled all
 *     its tasks) completes;
 *   - the shared memory and buffers fit; every transform on whole blocks;
 *   - qwen35 (qwen35-tiny): the GDN stages after their layer's conv'd q|k|v, each value head
 *     a task, the a/b projections in them, the gate in the attention stage;
 *   - the host reference (persist_ref.c) of both fixtures' programs against their float64
 *     logits.
 * The checker itself is shown a broken program (a strip covered twice, a dependency
 * pointing forwards, a list out of order) and must say so.
 */
#include "check.h"
#include "model_check.h"
#include "model/model.h"
#include "backends/cuda/cu_persist.h"

#include <stdint.h>

static uint8_t g_dummy[4096]; /* weight data stand-ins (distinct addresses): never read */
static int g_next;
static float g_vec[16];

static tern_qmat tmat(int64_t n, int64_t k) {
    tern_qmat q = {.type = TERN_DT_Q2_0, .n = n, .k = k, .data = g_dummy + (g_next++ % 4096), .row_bytes = (size_t)k / 128 * 34,
                   .layout = TERN_LAYOUT_ROWS};
    return q;
}

/* Ternary-Bonsai-8B's shape (qwen3): every matrix a distinct tern_qmat */
static void q3_8b(tern_model *m, tm_layer **layers) {
    memset(m, 0, sizeof *m);
    tm_hparams *hp = &m->hp;
    hp->arch = TM_ARCH_QWEN3;
    hp->n_layer = 36;
    hp->n_embd = 4096;
    hp->n_ff = 12288;
    hp->n_vocab = 151936;
    hp->n_head = 32;
    hp->n_head_kv = 8;
    hp->head_dim = 128;
    hp->rope_dims = 128;
    hp->rope_theta = 1e6f;
    hp->eps = 1e-6f;
    hp->n_attn_layers = 36;
    tm_layer *l = calloc((size_t)hp->n_layer, sizeof *l);
    for (int i = 0; i < hp->n_layer; i++) {
        l[i].is_attn = true;
        l[i].kv_index = i;
        l[i].gdn_index = -1;
        l[i].wq = tmat(4096, 4096);
        l[i].wk = tmat(1024, 4096);
        l[i].wv = tmat(1024, 4096);
        l[i].wo = tmat(4096, 4096);
        l[i].wgate = tmat(12288, 4096);
        l[i].wup = tmat(12288, 4096);
        l[i].wdown = tmat(4096, 12288);
        l[i].attn_norm = l[i].post_norm = l[i].q_norm = l[i].k_norm = g_vec;
    }
    m->layers = l;
    m->tok_embd = tmat(151936, 4096);
    m->output = tmat(151936, 4096);
    m->output_norm = g_vec;
    *layers = l;
}

/* Bonsai 2 27B's shape (qwen35): 64 layers (every 4th gated attention, 24/4 heads of 256,
 * partial RoPE 64), GDN 16/48 heads of 128, conv 4, 5120/17408, 248,320 tokens, Hadamard
 * blocks of 1024 (signs for 5120, 6144 and 17408), the embedding stored rotated, the GDN
 * value heads tiled with the output permuted; the a/b projections dense bf16 */
static float g_signs[17408];
static tm_signs g_sv[3];
static void q35_27b(tern_model *m, tm_layer **layers) {
    memset(m, 0, sizeof *m);
    tm_hparams *hp = &m->hp;
    hp->arch = TM_ARCH_QWEN35;
    hp->n_layer = 64;
    hp->n_embd = 5120;
    hp->n_ff = 17408;
    hp->n_vocab = 248320;
    hp->n_head = 24;
    hp->n_head_kv = 4;
    hp->head_dim = 256;
    hp->attn_gate = true;
    hp->rope_dims = 64;
    hp->rope_theta = 1e7f;
    hp->eps = 1e-6f;
    hp->full_attn_interval = 4;
    hp->ssm_n_k = 16;
    hp->ssm_n_v = 48;
    hp->ssm_dk = 128;
    hp->ssm_dv = 128;
    hp->conv_k = 4;
    hp->n_attn_layers = 16;
    hp->n_gdn_layers = 48;
    for (int i = 0; i < 17408; i++) g_signs[i] = (i * 7 + 3) % 5 < 2 ? -1.0f : 1.0f;
    const int widths[3] = {5120, 6144, 17408};
    for (int i = 0; i < 3; i++) g_sv[i] = (tm_signs){.width = widths[i], .s = g_signs};
    m->hadamard = true;
    m->had_block = 1024;
    m->signs = g_sv;
    m->n_signs = 3;
    m->embd_inverse = true;
    m->v_tiled = true;
    m->out_permute = true;
    tm_layer *l = calloc((size_t)hp->n_layer, sizeof *l);
    int na = 0, ng = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        l[i].is_attn = i % 4 == 3;
        l[i].attn_norm = l[i].post_norm = g_vec;
        if (l[i].is_attn) {
            l[i].kv_index = na++;
            l[i].gdn_index = -1;
            l[i].wq = tmat(2 * 24 * 256, 5120);
            l[i].wk = tmat(4 * 256, 5120);
            l[i].wv = tmat(4 * 256, 5120);
            l[i].wo = tmat(5120, 24 * 256);
            l[i].q_norm = l[i].k_norm = g_vec;
        } else {
            l[i].kv_index = -1;
            l[i].gdn_index = ng++;
            l[i].wqkv = tmat(2 * 16 * 128 + 48 * 128, 5120);
            l[i].wz = tmat(48 * 128, 5120);
            l[i].wa = (tern_qmat){.type = TERN_DT_BF16, .n = 48, .k = 5120, .data = g_dummy + (g_next++ % 4096),
                                  .row_bytes = 5120 * 2, .layout = TERN_LAYOUT_ROWS};
            l[i].wb = l[i].wa;
            l[i].wb.data = g_dummy + (g_next++ % 4096);
            l[i].wout = tmat(5120, 48 * 128);
            l[i].conv = l[i].ssm_a = l[i].dt_bias = l[i].ssm_norm = g_vec;
        }
        l[i].wgate = tmat(17408, 5120);
        l[i].wup = tmat(17408, 5120);
        l[i].wdown = tmat(5120, 17408);
    }
    m->layers = l;
    m->tok_embd = tmat(248320, 5120);
    m->output = tmat(248320, 5120);
    m->output_norm = g_vec;
    *layers = l;
}

/* The checks above; returns the number of problems (and says them when `loud`). */
static int check_prog(const tern_model *m, const tp_prog *p, bool loud) {
    int bad = 0;
#define BAD(...) do { bad++; if (loud) { fprintf(stderr, "    "); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)
    const tm_plan *plan = &m->plan;
    /* stages: dependencies backwards, to the stage before; norm sources write x */
    for (int s = 0; s < p->n_stages; s++) {
        const tp_stage *st = &p->stages[s];
        if (st->dep >= s || st->dep < -1 || (s > 0 && st->dep < 0)) BAD("stage %d waits for stage %d", s, st->dep);
        if (st->n_tasks < 1) BAD("stage %d has %d tasks", s, st->n_tasks);
        if (st->kind == TP_MATMUL && st->in_mode == TP_IN_NORM) {
            int ns = st->norm_src;
            if (ns < 0 || ns >= s ||
                !(p->stages[ns].kind == TP_EMBED || p->stages[ns].out_mode == TP_OUT_RESID))
                BAD("stage %d normalises the output of stage %d", s, ns);
            if (!st->gain) BAD("stage %d: no gain", s);
        }
        if (st->plan_op < 0 || st->plan_op >= plan->n_ops) BAD("stage %d: plan op %d", s, st->plan_op);
        if (s > 0 && st->plan_op < p->stages[s - 1].plan_op) BAD("stage %d runs plan op %d after %d", s, st->plan_op,
                                                               p->stages[s - 1].plan_op);
    }
    /* every task once, each CTA's list in stage order */
    int total = 0;
    for (int s = 0; s < p->n_stages; s++) {
        if (p->stages[s].task0 != total) BAD("stage %d: first slot %d, want %d", s, p->stages[s].task0, total);
        total += p->stages[s].n_tasks;
    }
    if (total != p->n_tasks) BAD("%d tasks listed, stages have %d", p->n_tasks, total);
    if (p->cta_off[0] != 0 || p->cta_off[p->n_cta] != p->n_tasks) BAD("CTA lists do not cover the tasks");
    uint8_t *seen = calloc((size_t)total + 1, 1);
    for (int c = 0; c < p->n_cta; c++)
        for (int i = p->cta_off[c]; i < p->cta_off[c + 1]; i++) {
            const tp_task *t = &p->tasks[i];
            if (t->stage < 0 || t->stage >= p->n_stages || t->idx < 0 || t->idx >= p->stages[t->stage].n_tasks) {
                BAD("CTA %d task %d: stage %d index %d", c, i, t->stage, t->idx);
                continue;
            }
            if (seen[p->stages[t->stage].task0 + t->idx]++) BAD("stage %d task %d listed twice", t->stage, t->idx);
            if (i > p->cta_off[c] && p->tasks[i - 1].stage > t->stage) BAD("CTA %d: stage %d after stage %d", c,
                                                                          t->stage, p->tasks[i - 1].stage);
        }
    for (int i = 0; i < total; i++)
        if (!seen[i]) { BAD("slot %d in no CTA's list", i); break; }
    free(seen);
    /* every row of every matmul stage's matrices exactly once */
    for (int s = 0; s < p->n_stages; s++) {
        const tp_stage *st = &p->stages[s];
        if (st->kind != TP_MATMUL) continue;
        const int64_t S = st->out_mode == TP_OUT_SWIGLU ? st->strip0[1] : st->strip0[st->n_mat];
        int64_t need = 0;
        for (int j = 0; j < (st->out_mode == TP_OUT_SWIGLU ? 1 : st->n_mat); j++) need += (st->n[j] + 15) / 16;
        if (S != need) BAD("stage %d: %lld strips for %lld", s, (long long)S, (long long)need);
        if (st->out_mode == TP_OUT_SWIGLU && st->n[0] != st->n[1]) BAD("stage %d: gate and up differ", s);
        uint8_t *cov = calloc((size_t)S + 1, 1);
        for (int i = 0; i < p->n_tasks; i++) {
            const tp_task *t = &p->tasks[i];
            if (t->stage != s) continue;
            if (t->a < 0 || t->b > S || t->a >= t->b) BAD("stage %d task %d: strips [%lld, %lld) of %lld", s, t->idx,
                                                       (long long)t->a, (long long)t->b, (long long)S);
            for (int64_t g = t->a; g < t->b && g < S && g >= 0; g++)
                if (cov[g]++) BAD("stage %d: strip %lld twice", s, (long long)g);
        }
        for (int64_t g = 0; g < S; g++)
            if (cov[g] != 1) { BAD("stage %d: strip %lld covered %d times", s, (long long)g, cov[g]); break; }
        free(cov);
        int64_t kp = st->kt[0] * 256;
        if (kp < st->in_k || kp > p->max_in_k) BAD("stage %d: input %d in %lld of %d", s, st->in_k, (long long)kp,
                                                  p->max_in_k);
    }
    /* every matrix of the plan in exactly one stage (pointer and row count); the GDN's
     * dense a, b projections in the GDN stage of their layer */
    for (int i = 0; i < plan->n_ops; i++) {
        const tm_plan_op *op = &plan->ops[i];
        if (op->kind != TM_OP_MATMUL && op->kind != TM_OP_LOGITS) continue;
        if (op->kind == TM_OP_MATMUL && op->out_buf[0] == TM_BUF_A) {
            for (int j = 0; j < op->n_mat; j++) {
                const tern_qmat *w = tm_plan_mat(m, op->mat[j], false);
                int found = 0;
                for (int s = 0; s < p->n_stages; s++)
                    if (p->stages[s].kind == TP_GDN && p->stages[s].layer == op->layer &&
                        p->stages[s].wab[j] == (const void *)w->data && p->stages[s].ab_type == (int)w->type &&
                        p->stages[s].ab_rb == (int64_t)w->row_bytes)
                        found++;
                if (found != 1) BAD("plan op %d (a/b) matrix %d in %d GDN stages", i, j, found);
            }
            continue;
        }
        for (int j = 0; j < op->n_mat; j++) {
            const tern_qmat *w = tm_plan_mat(m, op->mat[j], true);
            int found = 0;
            for (int s = 0; s < p->n_stages; s++)
                for (int k = 0; k < p->stages[s].n_mat; k++)
                    if (p->stages[s].kind == TP_MATMUL && p->stages[s].w[k] == (const void *)w->data &&
                        p->stages[s].n[k] == w->n && p->stages[s].plan_op == i)
                        found++;
            if (found != 1) BAD("plan op %d matrix %d in %d stages", i, j, found);
        }
    }
    /* attention: one task per query head; GDN: one per value head, after the layer's
     * conv'd q|k|v, its output read by the next stage (out_proj) */
    const tm_hparams *hq = &m->hp;
    for (int s = 0; s < p->n_stages; s++) {
        const tp_stage *st = &p->stages[s];
        if (st->kind != TP_ATTN && st->kind != TP_GDN) continue;
        if (st->kind == TP_ATTN && (st->n_tasks != st->n_head || !st->q_norm || !st->k_norm ||
                                    st->gated != (int)hq->attn_gate))
            BAD("attention stage %d", s);
        if (st->kind == TP_GDN) {
            const tp_stage *cv = s > 0 ? &p->stages[s - 1] : NULL, *nx = s + 1 < p->n_stages ? &p->stages[s + 1] : NULL;
            if (st->n_tasks != hq->ssm_n_v || st->n_v != hq->ssm_n_v || st->n_k != hq->ssm_n_k || st->dk != hq->ssm_dk ||
                st->dv != hq->ssm_dv || !st->gain || !st->ssm_a || !st->dt_bias || !st->gdn_norm || !st->conv_w)
                BAD("GDN stage %d: shape or vectors", s);
            if (st->norm_src < 0 || st->norm_src >= s ||
                !(p->stages[st->norm_src].kind == TP_EMBED || p->stages[st->norm_src].out_mode == TP_OUT_RESID))
                BAD("GDN stage %d normalises the output of stage %d", s, st->norm_src);
            if (!cv || cv->out_mode != TP_OUT_CONV || cv->layer != st->layer || cv->gdn_index != st->gdn_index ||
                cv->conv_w != st->conv_w || cv->out_buf[0] != st->in_buf)
                BAD("GDN stage %d: not after its layer's conv'd q|k|v", s);
            if (!nx || nx->kind != TP_MATMUL || nx->in_mode != TP_IN_BUF || nx->in_buf != st->out_buf[0] ||
                nx->out_mode != TP_OUT_RESID)
                BAD("GDN stage %d: its output is not the next stage's input", s);
            if (st->out_grouped != (int)m->out_permute) BAD("GDN stage %d: output order", s);
        }
        for (int i = 0; i < p->n_tasks; i++)
            if (p->tasks[i].stage == s && p->tasks[i].a != p->tasks[i].idx) BAD("stage %d: head", s);
    }
    /* transforms: every ternary matmul's input rotated in a Hadamard model (none otherwise),
     * in whole blocks; the embedding's inverse on whole blocks */
    for (int s = 0; s < p->n_stages; s++) {
        const tp_stage *st = &p->stages[s];
        if (st->kind == TP_MATMUL && (st->signs != NULL) != m->hadamard) BAD("stage %d: transform", s);
        if (st->kind == TP_EMBED && (st->signs != NULL) != m->embd_inverse) BAD("stage %d: inverse transform", s);
        if (st->signs && (st->had_block < 2 || st->in_k % st->had_block || st->signs != tm_model_signs(m, st->in_k)))
            BAD("stage %d: a transform of %d in blocks of %d", s, st->in_k, st->had_block);
        if (st->kind == TP_EMBED && st->signs)
            for (int i = 0; i < p->n_tasks; i++)
                if (p->tasks[i].stage == s && (p->tasks[i].a % st->had_block || p->tasks[i].b % st->had_block))
                    BAD("stage %d: elements [%lld, %lld) are not whole blocks", s, (long long)p->tasks[i].a,
                        (long long)p->tasks[i].b);
    }
    /* the run completes with every CTA resident */
    int *pc = malloc((size_t)p->n_cta * sizeof *pc), *done = calloc((size_t)p->n_stages, sizeof *done);
    for (int c = 0; c < p->n_cta; c++) pc[c] = p->cta_off[c];
    int left = p->n_tasks;
    for (bool moved = true; moved && left;) {
        moved = false;
        for (int c = 0; c < p->n_cta; c++)
            while (pc[c] < p->cta_off[c + 1]) {
                const tp_task *t = &p->tasks[pc[c]];
                if (t->stage < 0 || t->stage >= p->n_stages) { pc[c]++; left--; continue; }
                int d = p->stages[t->stage].dep;
                if (d >= 0 && (d >= p->n_stages || done[d] < p->stages[d].n_tasks)) break;
                done[t->stage]++;
                pc[c]++;
                left--;
                moved = true;
            }
    }
    if (left) BAD("the simulated run stops with %d tasks left (a cycle or a forward wait)", left);
    free(pc);
    free(done);
    /* buffers apart and wide enough */
    const tm_hparams *hp = &m->hp;
    const size_t qkv = (size_t)(hp->n_head * (hp->attn_gate ? 2 : 1) + 2 * hp->n_head_kv) * hp->head_dim;
    const size_t VW = hp->n_gdn_layers ? (size_t)hp->ssm_n_v * hp->ssm_dv : 0;
    const size_t C = hp->n_gdn_layers ? (size_t)2 * hp->ssm_n_k * hp->ssm_dk + VW : 0;
    const size_t att = (size_t)hp->n_head * hp->head_dim;
    const size_t w[TP_BUF_COUNT] = {(size_t)hp->n_embd, qkv > C ? qkv : C, att > VW ? att : VW, (size_t)hp->n_ff,
                                    (size_t)hp->n_vocab, (size_t)hp->head_dim, VW};
    for (int i = 0; i < TP_BUF_COUNT; i++) {
        size_t end = i + 1 < TP_BUF_COUNT ? p->buf_off[i + 1] : p->scratch_floats;
        if (p->buf_off[i] + w[i] > end) BAD("buffer %d: %zu floats in [%zu, %zu)", i, w[i], p->buf_off[i], end);
    }
    if (tp_smem_bytes(p) > 227 * 1024) BAD("shared memory %zu bytes", tp_smem_bytes(p));
#undef BAD
    return bad;
}

TEST(bonsai8b_shape_all_cta_counts) {
    tern_model m;
    tm_layer *l;
    q3_8b(&m, &l);
    CHECK(tm_plan_build(&m, &m.plan) == TERN_OK);
    const int ctas[] = {1, 2, 7, 64, 132, 200};
    for (size_t i = 0; i < sizeof ctas / sizeof ctas[0]; i++) {
        tp_prog p;
        tern_status st = tp_build(&m, &m.plan, ctas[i], TERN_LAYOUT_ROWS, &p);
        CHECK_MSG(st == TERN_OK, "%d CTAs: %s", ctas[i], tern_last_error());
        if (st) continue;
        /* embed, 5 per layer, head, argmax */
        CHECK_MSG(p.n_stages == 1 + 5 * 36 + 2, "%d stages", p.n_stages);
        CHECK(p.stages[p.logits_stage].out_mode == TP_OUT_LOGITS && p.stages[p.argmax_stage].kind == TP_ARGMAX);
        CHECK_MSG(check_prog(&m, &p, true) == 0, "%d CTAs", ctas[i]);
        CHECK(p.max_in_k == 12288);
        if (ctas[i] == 132) {
            /* every matmul over all SMs, one task each */
            for (int s = 0; s < p.n_stages; s++)
                if (p.stages[s].kind == TP_MATMUL) CHECK(p.stages[s].n_tasks == 132);
            fprintf(stderr, "  8B shape, 132 CTAs: %d stages, %d tasks, %zu B shared memory\n", p.n_stages,
                    p.n_tasks, tp_smem_bytes(&p));
        }
        tp_prog_free(&p);
    }
    tm_plan_free(&m.plan);
    free(l);
}

TEST(bonsai27b_shape_all_cta_counts) {
    tern_model m;
    tm_layer *l;
    q35_27b(&m, &l);
    CHECK_MSG(tm_plan_build(&m, &m.plan) == TERN_OK, "%s", tern_last_error());
    const int ctas[] = {1, 5, 48, 132, 200};
    for (size_t i = 0; i < sizeof ctas / sizeof ctas[0]; i++) {
        tp_prog p;
        tern_status st = tp_build(&m, &m.plan, ctas[i], TERN_LAYOUT_ROWS, &p);
        CHECK_MSG(st == TERN_OK, "%d CTAs: %s", ctas[i], tern_last_error());
        if (st) continue;
        CHECK_MSG(p.n_stages == 1 + 5 * 64 + 2, "%d stages", p.n_stages);
        CHECK(p.n_gdn == 48 && p.max_in_k == 17408);
        CHECK_MSG(check_prog(&m, &p, true) == 0, "%d CTAs", ctas[i]);
        int gdn = 0, gated = 0, conv = 0;
        for (int s = 0; s < p.n_stages; s++) {
            gdn += p.stages[s].kind == TP_GDN;
            gated += p.stages[s].kind == TP_ATTN && p.stages[s].gated;
            conv += p.stages[s].out_mode == TP_OUT_CONV;
        }
        CHECK_MSG(gdn == 48 && conv == 48 && gated == 16, "%d GDN, %d conv, %d gated attention stages", gdn, conv,
                  gated);
        CHECK(p.stages[0].kind == TP_EMBED && p.stages[0].signs && p.stages[0].n_tasks == (ctas[i] < 5 ? ctas[i] : 5));
        if (ctas[i] == 132)
            fprintf(stderr, "  27B shape, 132 CTAs: %d stages, %d tasks, %zu B shared memory\n", p.n_stages,
                    p.n_tasks, tp_smem_bytes(&p));
        tp_prog_free(&p);
    }
    /* a transform width without signs is refused, naming it */
    g_sv[2].width = 17407;
    tp_prog p;
    CHECK(tp_build(&m, &m.plan, 8, TERN_LAYOUT_ROWS, &p) == TERN_ERR_UNSUPPORTED);
    tern_clear_error();
    g_sv[2].width = 17408;
    /* a/b projections of two types */
    l[0].wb.type = TERN_DT_F16;
    l[0].wb.row_bytes = 5120 * 2;
    CHECK(tp_build(&m, &m.plan, 8, TERN_LAYOUT_ROWS, &p) == TERN_ERR_UNSUPPORTED);
    CHECK(strstr(tern_last_error(), "a/b") != NULL);
    tern_clear_error();
    l[0].wb.type = TERN_DT_BF16;
    CHECK(tp_build(&m, &m.plan, 8, TERN_LAYOUT_ROWS, &p) == TERN_OK);
    tp_prog_free(&p);
    tm_plan_free(&m.plan);
    free(l);
}

/* the checker finds planted faults (so the test above can fail) */
TEST(checker_sees_broken_programs) {
    tern_model m;
    tm_layer *l;
    q3_8b(&m, &l);
    m.hp.n_layer = 2;
    CHECK(tm_plan_build(&m, &m.plan) == TERN_OK);
    tp_prog p;
    CHECK(tp_build(&m, &m.plan, 5, TERN_LAYOUT_ROWS, &p) == TERN_OK);
    CHECK(check_prog(&m, &p, false) == 0);
    /* a strip twice */
    for (int i = 0; i < p.n_tasks; i++)
        if (p.stages[p.tasks[i].stage].kind == TP_MATMUL) {
            p.tasks[i].b++;
            CHECK(check_prog(&m, &p, false) > 0);
            p.tasks[i].b--;
            break;
        }
    /* a forward dependency */
    p.stages[3].dep = 5;
    CHECK(check_prog(&m, &p, false) > 0);
    p.stages[3].dep = 2;
    CHECK(check_prog(&m, &p, false) == 0);
    /* a list out of stage order (CTA 0's first two tasks swapped) */
    tp_task t = p.tasks[0];
    p.tasks[0] = p.tasks[1];
    p.tasks[1] = t;
    CHECK(check_prog(&m, &p, false) > 0);
    tp_prog_free(&p);
    tm_plan_free(&m.plan);
    free(l);
}

TEST(refusals) {
    tern_model m;
    tm_layer *l;
    q3_8b(&m, &l);
    m.hp.n_layer = 2;
    CHECK(tm_plan_build(&m, &m.plan) == TERN_OK);
    tp_prog p;
    /* a layout the kernel does not read */
    CHECK(tp_build(&m, &m.plan, 4, 0x54, &p) == TERN_ERR_UNSUPPORTED);
    CHECK(strstr(tern_last_error(), "tiled") != NULL);
    /* a g64 matrix */
    l[1].wdown.type = TERN_DT_Q2_0_G64;
    CHECK(tp_build(&m, &m.plan, 4, TERN_LAYOUT_ROWS, &p) == TERN_ERR_UNSUPPORTED);
    l[1].wdown.type = TERN_DT_Q2_0;
    CHECK(tp_build(&m, &m.plan, 4, TERN_LAYOUT_ROWS, &p) == TERN_OK);
    tp_prog_free(&p);
    tm_plan_free(&m.plan);
    /* gated attention (qwen35's) */
    m.hp.attn_gate = true;
    CHECK(tp_build(&m, &m.plan, 4, TERN_LAYOUT_ROWS, &p) != TERN_OK);
    tern_clear_error();
    free(l);
}

static void fixture(const char *rel) {
    const char *path = fixture_path(rel);
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) SKIP("fixture %s missing", rel);
    fclose(f);
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "cpu";
    mp.repack = false;
    mp.n_threads = 1;
    tern_model *m = NULL;
    CHECK_MSG(tern_model_load(path, &mp, &m) == TERN_OK, "%s: %s", path, tern_last_error());
    if (!m) return;
    const int ctas[] = {1, 3, 132};
    for (size_t i = 0; i < 3; i++) {
        tp_prog p;
        tern_status st = tp_build(m, &m->plan, ctas[i], TERN_LAYOUT_ROWS, &p);
        CHECK_MSG(st == TERN_OK, "%s: %s", rel, tern_last_error());
        if (st) continue;
        CHECK(p.n_stages == 1 + 5 * m->hp.n_layer + 2);
        CHECK_MSG(check_prog(m, &p, true) == 0, "%s, %d CTAs", rel, ctas[i]);
        tp_prog_free(&p);
    }
    tern_model_free(m);
}

TEST(fixture_qwen3_tiny) { fixture("qwen3-tiny/model-q2_0.gguf"); }

/* The program run by its host reference (persist_ref.c: the kernel's semantics) token by
 * token on a fixture's sequences: its float64 logits at the CPU criteria (max|diff| < 0.02,
 * argmax equal where the reference margin > 0.02, the 24-token greedy continuation
 * identical), the ARGMAX stage's token the host argmax. dir: the fixture; key: the model
 * entry of reference.json whose logits belong to `file` (NULL: the top-level list). */
static void ref_run(const char *dir, const char *file, const char *key) {
    char rel0[256];
    snprintf(rel0, sizeof rel0, "%s/reference.json", dir);
    const char *rp = fixture_path(rel0);
    char *txt = rp ? check_slurp(rp, NULL) : NULL;
    snprintf(rel0, sizeof rel0, "%s/%s", dir, file);
    const char *path = fixture_path(rel0);
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s", path ? path : "");
    FILE *f = fopen(mpath, "rb");
    if (!txt || !f) {
        free(txt);
        if (f) fclose(f);
        SKIP("fixture %s missing", dir);
    }
    fclose(f);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "cpu";
    mp.repack = false;
    mp.n_threads = 1;
    tern_model *m = NULL;
    CHECK_MSG(tern_model_load(mpath, &mp, &m) == TERN_OK, "%s", tern_last_error());
    tp_prog p;
    if (!m || tp_build(m, &m->plan, 7, TERN_LAYOUT_ROWS, &p) != TERN_OK) {
        CHECK(0);
        if (m) tern_model_free(m);
        cJSON_Delete(ref);
        return;
    }
    const int V = m->hp.n_vocab;
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    const cJSON *logits = key ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), key), "logits")
                              : cJSON_GetObjectItem(ref, "logits");
    CHECK_MSG(cJSON_GetArraySize(logits) == cJSON_GetArraySize(seqs), "%s: %d logits entries for %d sequences", dir,
              cJSON_GetArraySize(logits), cJSON_GetArraySize(seqs));
    float *lg = malloc((size_t)V * sizeof(float));
    for (int si = 0; si < cJSON_GetArraySize(seqs); si++) {
        const cJSON *seq = cJSON_GetArrayItem(seqs, si), *ent = cJSON_GetArrayItem(logits, si);
        size_t T, nc, nb = 0;
        int32_t *ids = json_ids(cJSON_GetObjectItem(seq, "ids"), &T);
        int32_t *want = json_ids(cJSON_GetObjectItem(ent, "greedy_continuation"), &nc);
        char rel[256];
        snprintf(rel, sizeof rel, "%s/%s", dir, cJSON_GetObjectItem(ent, "logits_file")->valuestring);
        float *rl = check_slurp(fixture_path(rel), &nb);
        CHECK(rl && nb == T * (size_t)V * 4);
        tp_ref *r = NULL;
        CHECK(tp_ref_new(&p, m, (int)(T + nc), &r) == TERN_OK);
        double maxd = 0;
        int bad = 0, checked = 0, same = 0, dev_bad = 0;
        bool div = false;
        int32_t tok = 0;
        for (size_t t = 0; r && rl && t < T + nc; t++) {
            if (t < T) tok = ids[t];
            const int am_dev = tp_ref_step(r, tok, (int)t, lg);
            const int am = check_argmax(lg, V);
            if (am_dev != am) dev_bad++;
            if (t < T) {
                const float *rr = rl + t * V;
                for (int i = 0; i < V; i++) {
                    double d = fabs((double)lg[i] - rr[i]);
                    if (!(d <= maxd)) maxd = isnan(d) ? INFINITY : d;
                }
                if (check_top2_margin(rr, V) > 0.02f) {
                    checked++;
                    if (am != check_argmax(rr, V)) bad++;
                }
            }
            if (t + 1 >= T) {
                if (t + 1 - T < nc && !div) {
                    if (am == want[t + 1 - T]) same++;
                    else div = true;
                }
                tok = am;
            }
        }
        CHECK_MSG(maxd < 0.02, "seq %d: max|diff| %g", si, maxd);
        CHECK_MSG(bad == 0, "seq %d: %d/%d argmax differ", si, bad, checked);
        CHECK_MSG(same == (int)nc, "seq %d: continuation diverges at step %d", si, same);
        CHECK_MSG(dev_bad == 0, "seq %d: the ARGMAX stage differs from the host argmax %d times", si, dev_bad);
        fprintf(stderr, "  %s/%s reference run seq %d%s: T %zu, max|diff| %.2e, argmax ok on %d rows, continuation %d/%zu\n",
                dir, file, si, m->hp.n_gdn_layers ? (m->v_tiled ? " (GDN heads tiled)" : " (GDN heads grouped)") : "",
                T, maxd, checked, same, nc);
        tp_ref_free(r);
        free(rl); free(ids); free(want);
    }
    free(lg);
    tp_prog_free(&p);
    tern_model_free(m);
    cJSON_Delete(ref);
}
TEST(reference_run_qwen3_tiny) { ref_run("qwen3-tiny", "model-q2_0.gguf", NULL); }
/* qwen35: Hadamard transforms, gated attention (head_dim 256, partial RoPE), GDN layers */
TEST(reference_run_qwen35_tiny) { ref_run("qwen35-tiny", "model-pq2_0.gguf", "A"); }
/* the same model as an MLX pack: value heads in grouped order (no permutation), the a/b
 * projections as the pack stores them */
TEST(reference_run_qwen35_tiny_mlx) { ref_run("qwen35-tiny", "mlx-pack", "A"); }
TEST(fixture_qwen35_tiny) { fixture("qwen35-tiny/model-pq2_0.gguf"); }

int main(void) {
    RUN(bonsai8b_shape_all_cta_counts);
    RUN(bonsai27b_shape_all_cta_counts);
    RUN(checker_sees_broken_programs);
    RUN(refusals);
    RUN(fixture_qwen3_tiny);
    RUN(fixture_qwen35_tiny);
    RUN(reference_run_qwen3_tiny);
    RUN(reference_run_qwen35_tiny);
    RUN(reference_run_qwen35_tiny_mlx);
    return check_summary();
}
