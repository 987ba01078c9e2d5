/*
 * persist_ref.c - the persistent decode step's plain reference (cu_persist.h): the
 * program of persist.h run on the host with the kernel's semantics, so that the
 * program (task ranges, partial slots, norm sources, buffer offsets, the attention
 * stage) is checked against the fixtures without a GPU (tests/unit/test_persist_build.c),
 * and tc_persist.cu is a translation of this file's stage code. Matrices in the file's
 * row layout (128-group ternary blocks: fp16 d, 32 code bytes); KV cache float32; the GDN
 * layers' states fp32, kept here.
 */
#include "backends/cuda/cu_persist.h"
#include "core/blocks.h"
#include "formats/codecs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tp_ref {
    const tp_prog *p;
    int n_ctx, n_layers_kv;
    size_t kvw;
    float *scratch, *part_f, *xs, *row, *kc, *vc;
    int *part_i;
    /* GDN layers: S [n_gdn][n_v][dk][dv], conv states [n_gdn][conv_k - 1][C] */
    float *gs, *cs;
    size_t gs_layer, cs_layer, conv_ch;
};

tern_status tp_ref_new(const tp_prog *p, const tern_model *m, int n_ctx, tp_ref **out) {
    *out = NULL;
    tp_ref *r = calloc(1, sizeof *r);
    if (!r) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    const tm_hparams *hp = &m->hp;
    r->p = p;
    r->n_ctx = n_ctx;
    r->n_layers_kv = hp->n_attn_layers > 0 ? hp->n_attn_layers : hp->n_layer;
    r->kvw = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t kvn = (size_t)r->n_layers_kv * (size_t)n_ctx * r->kvw;
    r->scratch = calloc(p->scratch_floats, sizeof(float));
    r->part_f = calloc((size_t)p->n_tasks, sizeof(float));
    r->part_i = calloc((size_t)p->n_tasks, sizeof(int));
    r->xs = calloc((size_t)p->max_in_k + 1, sizeof(float));
    r->row = calloc((size_t)p->max_in_k + (size_t)hp->n_embd + 1, sizeof(float));
    r->kc = calloc(kvn + 1, sizeof(float));
    r->vc = calloc(kvn + 1, sizeof(float));
    if (hp->n_gdn_layers) {
        r->conv_ch = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
        r->gs_layer = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
        r->cs_layer = (size_t)(hp->conv_k > 1 ? hp->conv_k - 1 : 0) * r->conv_ch;
    }
    r->gs = calloc((size_t)p->n_gdn * r->gs_layer + 1, sizeof(float));
    r->cs = calloc((size_t)p->n_gdn * r->cs_layer + 1, sizeof(float));
    if (!r->scratch || !r->part_f || !r->part_i || !r->xs || !r->row || !r->kc || !r->vc || !r->gs || !r->cs) {
        tp_ref_free(r);
        return tern_fail(TERN_ERR_NOMEM, "out of memory");
    }
    *out = r;
    return TERN_OK;
}

void tp_ref_free(tp_ref *r) {
    if (!r) return;
    void *own[] = {r->scratch, r->part_f, r->part_i, r->xs, r->row, r->kc, r->vc, r->gs, r->cs, r};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) free(own[i]);
}

/* row `i` of a 128-group ternary matrix (file layout) as k floats */
static void dequant_row(const void *w, int64_t rb, int64_t i, int64_t k, float *out) {
    const uint8_t *b = (const uint8_t *)w + (size_t)i * (size_t)rb;
    for (int64_t g = 0; g < k / 128; g++, b += TERN_PQ2_0_BYTES) {
        uint16_t h;
        memcpy(&h, b, 2);
        const float d = tern_f16_to_f32(h);
        for (int j = 0; j < 128; j++) {
            const int c = (b[TERN_BLOCK_QS + (j >> 2)] >> (2 * (j & 3))) & 3;
            out[g * 128 + j] = (float)(c - 1) * d;
        }
    }
}

/* row i of a 128-group ternary matrix (file layout) dotted with x[k]: per group the sum of
 * (code - 1) x, times the group's scale (the kernel's order: integer sums, then d) */
static float row_dot(const void *w, int64_t rb, int64_t i, int64_t k, const float *x) {
    const uint8_t *b = (const uint8_t *)w + (size_t)i * (size_t)rb;
    float s = 0;
    for (int64_t g = 0; g < k / 128; g++, b += TERN_PQ2_0_BYTES) {
        uint16_t h;
        memcpy(&h, b, 2);
        const uint8_t *q = b + TERN_BLOCK_QS;
        const float *xg = x + g * 128;
        float gs = 0;
        for (int j = 0; j < 32; j++) {
            const unsigned c = q[j];
            gs += (float)((int)(c & 3) - 1) * xg[4 * j] + (float)((int)((c >> 2) & 3) - 1) * xg[4 * j + 1] +
                  (float)((int)((c >> 4) & 3) - 1) * xg[4 * j + 2] + (float)((int)(c >> 6) - 1) * xg[4 * j + 3];
        }
        s += gs * tern_f16_to_f32(h);
    }
    return s;
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; j++) s += a[j] * b[j];
    return s;
}

static float silu(float x) { return x / (1.0f + expf(-x)); }
static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* the Sylvester-order Walsh-Hadamard butterflies of one block of B (a power of two) */
static void fwht(float *x, int B) {
    for (int h = 1; h < B; h <<= 1)
        for (int i = 0; i < B; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], c = x[j + h];
                x[j] = a + c;
                x[j + h] = a - c;
            }
}

/* x[0, k) <- FWHT_B(x * signs) / sqrt(B) per block (forward), or signs * FWHT_B(x) / sqrt(B)
 * (inverse); signs[0, k) belong to x[0, k) */
static void transform(float *x, int64_t k, int B, const float *signs, bool inverse) {
    const float sc = 1.0f / sqrtf((float)B);
    for (int64_t b0 = 0; b0 < k; b0 += B) {
        float *xb = x + b0;
        if (!inverse)
            for (int j = 0; j < B; j++) xb[j] *= signs[b0 + j];
        fwht(xb, B);
        for (int j = 0; j < B; j++) xb[j] *= sc;
        if (inverse)
            for (int j = 0; j < B; j++) xb[j] *= signs[b0 + j];
    }
}

/* rmsnorm(x) * gain of the residual stream, its sum of squares from stage ns's partials */
static void normed_x(tp_ref *r, const tp_stage *ns, const float *gain, float eps, int K, float *out) {
    const float *src = r->scratch + r->p->buf_off[TP_BUF_X];
    float ss = 0;
    for (int i = 0; i < ns->n_tasks; i++) ss += r->part_f[ns->task0 + i];
    const float inv = (float)(1.0 / sqrt((double)ss / K + (double)eps));
    for (int j = 0; j < K; j++) out[j] = src[j] * inv * gain[j];
}

static void embed(tp_ref *r, const tp_stage *st, const tp_task *t, int token) {
    float *x = r->scratch + r->p->buf_off[TP_BUF_X];
    dequant_row(st->w[0], st->rb[0], token, st->in_k, r->row);
    if (st->signs) /* the task's blocks */
        transform(r->row + t->a, t->b - t->a, st->had_block, st->signs + t->a, true);
    float ss = 0;
    for (int64_t j = t->a; j < t->b; j++) {
        x[j] = r->row[j];
        ss += x[j] * x[j];
    }
    r->part_f[st->task0 + t->idx] = ss;
}

static void matmul(tp_ref *r, const tp_stage *st, const tp_task *t) {
    const tp_prog *p = r->p;
    const int K = st->in_k;
    if (st->in_mode == TP_IN_NORM) normed_x(r, &p->stages[st->norm_src], st->gain, st->eps, K, r->xs);
    else memcpy(r->xs, r->scratch + p->buf_off[st->in_buf], (size_t)K * sizeof(float));
    if (st->signs) transform(r->xs, K, st->had_block, st->signs, false);
    /* the kernel's integer input (act.cuh): per 128 inputs x_q = round(x * 16256 / max|x|),
     * the products taken with x_q * max|x| / 16256 */
    for (int b = 0; b < K / 128; b++) {
        float *xb = r->xs + (size_t)b * 128, amax = 0;
        for (int j = 0; j < 128; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float inv = amax > 0 ? 16256.0f / amax : 0.0f, sx = amax / 16256.0f;
        for (int j = 0; j < 128; j++) xb[j] = (float)(int)rintf(xb[j] * inv) * sx;
    }
    float *x = r->scratch + p->buf_off[TP_BUF_X];
    const bool swiglu = st->out_mode == TP_OUT_SWIGLU;
    float ss = 0, best = -INFINITY;
    int besti = -1;
    for (int64_t g = t->a; g < t->b; g++) {
        int mi = 0;
        int64_t ls = g;
        if (!swiglu) {
            while (mi + 1 < st->n_mat && g >= st->strip0[mi + 1]) mi++;
            ls = g - st->strip0[mi];
        }
        for (int rr = 0; rr < 16; rr++) {
            const int64_t row = ls * 16 + rr;
            if (row >= st->n[mi]) break;
            const float y0 = row_dot(st->w[mi], st->rb[mi], row, K, r->xs);
            switch (st->out_mode) {
            case TP_OUT_ROWS: r->scratch[p->buf_off[st->out_buf[mi]] + st->out_off[mi] + row] = y0; break;
            case TP_OUT_RESID:
                x[row] += y0;
                ss += x[row] * x[row];
                break;
            case TP_OUT_CONV:
                if (mi == 0) { /* channel `row`: conv over its state and y0, SiLU; the state shifted */
                    const int Kc = st->conv_k;
                    const size_t C = r->conv_ch;
                    float *cs = r->cs + (size_t)st->gdn_index * r->cs_layer;
                    const float *wc = st->conv_w + (size_t)row * Kc;
                    float sc = 0;
                    for (int j = 0; j < Kc - 1; j++) sc += wc[j] * cs[(size_t)j * C + row];
                    sc += wc[Kc - 1] * y0;
                    for (int j = 0; j + 1 < Kc - 1; j++) cs[(size_t)j * C + row] = cs[(size_t)(j + 1) * C + row];
                    if (Kc > 1) cs[(size_t)(Kc - 2) * C + row] = y0;
                    r->scratch[p->buf_off[st->out_buf[0]] + row] = silu(sc);
                } else {
                    r->scratch[p->buf_off[st->out_buf[1]] + row] = y0;
                }
                break;
            case TP_OUT_SWIGLU: {
                const float y1 = row_dot(st->w[1], st->rb[1], row, K, r->xs);
                r->scratch[p->buf_off[st->out_buf[0]] + row] = silu(y0) * y1;
                break;
            }
            default:
                r->scratch[p->buf_off[st->out_buf[0]] + row] = y0;
                if (y0 > best) {
                    best = y0;
                    besti = (int)row;
                }
                break;
            }
        }
    }
    if (st->out_mode == TP_OUT_RESID) r->part_f[st->task0 + t->idx] = ss;
    if (st->out_mode == TP_OUT_LOGITS) {
        r->part_f[st->task0 + t->idx] = best;
        r->part_i[st->task0 + t->idx] = besti;
    }
}

/* dst = RoPE(rmsnorm(src) * gain) over one head (the kernel's tp_head_prep) */
static void head_prep(const float *src, const float *gain, float eps, int hd, int rot, float theta, int pos,
                      float *dst) {
    float ss = 0;
    for (int j = 0; j < hd; j++) ss += src[j] * src[j];
    const float inv = (float)(1.0 / sqrt((double)ss / hd + (double)eps));
    for (int j = 0; j < hd; j++) dst[j] = src[j] * inv * gain[j];
    const int half = rot / 2;
    for (int i = 0; i < half; i++) {
        double ang = (double)pos * pow((double)theta, -2.0 * i / rot);
        float cs = (float)cos(ang), sn = (float)sin(ang);
        float x0 = dst[i], x1 = dst[i + half];
        dst[i] = x0 * cs - x1 * sn;
        dst[i + half] = x1 * cs + x0 * sn;
    }
}

static void attn(tp_ref *r, const tp_stage *st, const tp_task *t, int pos) {
    const tp_prog *p = r->p;
    const int HD = st->head_dim, NH = st->n_head, NKV = st->n_head_kv, grp = NH / NKV;
    const int h = (int)t->a, kh = h / grp;
    const size_t qw = (size_t)NH * HD * (st->gated ? 2 : 1), kvw = r->kvw; /* q rows (gated: q|gate per head) */
    const float *qkv = r->scratch + p->buf_off[TP_BUF_QKV];
    const float *qh = qkv + (size_t)h * HD * (st->gated ? 2 : 1);
    float q[256], k[256];
    head_prep(qh, st->q_norm, st->eps, HD, st->rope_dims, st->theta, pos, q);
    head_prep(qkv + qw + (size_t)kh * HD, st->k_norm, st->eps, HD, st->rope_dims, st->theta, pos, k);
    float *kc = r->kc + (size_t)st->kv_index * r->n_ctx * kvw, *vc = r->vc + (size_t)st->kv_index * r->n_ctx * kvw;
    if (h % grp == 0)
        for (int j = 0; j < HD; j++) {
            kc[(size_t)pos * kvw + (size_t)kh * HD + j] = k[j];
            vc[(size_t)pos * kvw + (size_t)kh * HD + j] = qkv[qw + kvw + (size_t)kh * HD + j];
        }
    /* the current position from this task's own k, v (the kernel's shared memory) */
    const float *vcur = qkv + qw + kvw + (size_t)kh * HD;
    double m = -INFINITY, l = 0, acc[256] = {0};
    for (int ps = 0; ps <= pos; ps++) {
        const float *kp = ps < pos ? kc + (size_t)ps * kvw + (size_t)kh * HD : k;
        const float *vp = ps < pos ? vc + (size_t)ps * kvw + (size_t)kh * HD : vcur;
        const double d = (double)dot(q, kp, HD) * st->scale;
        const double mn = d > m ? d : m, corr = exp(m - mn), pe = exp(d - mn);
        l = l * corr + pe;
        for (int j = 0; j < HD; j++) acc[j] = acc[j] * corr + pe * vp[j];
        m = mn;
    }
    float *out = r->scratch + p->buf_off[TP_BUF_ATT] + (size_t)h * HD;
    for (int j = 0; j < HD; j++) out[j] = (float)(acc[j] / l);
    if (st->gated)
        for (int j = 0; j < HD; j++) out[j] *= sigmoid(qh[HD + j]);
}

/* value head p = t->a of a GDN layer (kernels.h tern_gdn_args, one token): q, k of its key
 * head and v (conv'd by the matmul stage before) -> the delta rule on S[p] -> the gated norm */
static void gdn(tp_ref *r, const tp_stage *st, const tp_task *t) {
    const tp_prog *p = r->p;
    const int nk = st->n_k, nv = st->n_v, dk = st->dk, dv = st->dv, rr = nv / nk, E = st->in_k;
    const int pi = (int)t->a, kh = st->v_tiled ? pi % nk : pi / rr;
    /* a, b: the dense rows on the un-rotated normed x */
    float *xn = r->xs, *wrow = r->row;
    normed_x(r, &p->stages[st->norm_src], st->gain, st->eps, E, xn);
    float ab[2];
    for (int j = 0; j < 2; j++) {
        tern_dequant_row((tern_dtype)st->ab_type, (const uint8_t *)st->wab[j] + (size_t)pi * (size_t)st->ab_rb,
                         (uint64_t)E, wrow, "gdn a/b", (uint64_t)pi);
        ab[j] = dot(wrow, xn, E);
    }
    const float *w = r->scratch + p->buf_off[TP_BUF_QKV];
    float q[256], k[256], v[256], o[256];
    float sq = 0, sk = 0;
    for (int e = 0; e < dk; e++) {
        q[e] = w[(size_t)kh * dk + e];
        k[e] = w[(size_t)nk * dk + (size_t)kh * dk + e];
        sq += q[e] * q[e];
        sk += k[e] * k[e];
    }
    const float iq = (float)(1.0 / sqrt((double)sq + 1e-6)) * (1.0f / sqrtf((float)dk));
    const float ik = (float)(1.0 / sqrt((double)sk + 1e-6));
    for (int e = 0; e < dk; e++) {
        q[e] *= iq;
        k[e] *= ik;
    }
    for (int j = 0; j < dv; j++) v[j] = w[(size_t)2 * nk * dk + (size_t)pi * dv + j];
    const float x = ab[0] + st->dt_bias[pi];
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    const float decay = expf(st->ssm_a[pi] * sp), beta = sigmoid(ab[1]);
    float *S = r->gs + (size_t)st->gdn_index * r->gs_layer + (size_t)pi * dk * dv;
    for (int j = 0; j < dv; j++) {
        float kv = 0;
        for (int e = 0; e < dk; e++) {
            S[(size_t)e * dv + j] *= decay;
            kv += S[(size_t)e * dv + j] * k[e];
        }
        const float d = (v[j] - kv) * beta;
        float oj = 0;
        for (int e = 0; e < dk; e++) {
            S[(size_t)e * dv + j] += k[e] * d;
            oj += S[(size_t)e * dv + j] * q[e];
        }
        o[j] = oj;
    }
    float ss = 0;
    for (int j = 0; j < dv; j++) ss += o[j] * o[j];
    const float inv = 1.0f / sqrtf(ss / (float)dv + st->eps);
    const float *z = r->scratch + p->buf_off[TP_BUF_Z] + (size_t)pi * dv;
    const int slot = st->out_grouped ? (pi % nk) * rr + pi / nk : pi;
    float *out = r->scratch + p->buf_off[st->out_buf[0]] + (size_t)slot * dv;
    for (int j = 0; j < dv; j++) out[j] = o[j] * inv * st->gdn_norm[j] * silu(z[j]);
}

int tp_ref_step(tp_ref *r, int token, int pos, float *logits) {
    const tp_prog *p = r->p;
    if (token < 0 || token >= p->n_vocab || pos < 0 || pos >= r->n_ctx || p->stages[0].n_mat < 1) return -1;
    int argmax = -1;
    /* stage by stage (the dependencies are the stage before), each stage's tasks in
     * the order of the CTA lists */
    for (int s = 0; s < p->n_stages; s++) {
        const tp_stage *st = &p->stages[s];
        for (int i = 0; i < p->n_tasks; i++) {
            const tp_task *t = &p->tasks[i];
            if (t->stage != s) continue;
            switch (st->kind) {
            case TP_EMBED: embed(r, st, t, token); break;
            case TP_MATMUL: matmul(r, st, t); break;
            case TP_ATTN: attn(r, st, t, pos); break;
            case TP_GDN: gdn(r, st, t); break;
            default: {
                const tp_stage *hs = &p->stages[st->norm_src];
                float v = -INFINITY;
                for (int k = 0; k < hs->n_tasks; k++) {
                    const float f = r->part_f[hs->task0 + k];
                    const int fi = r->part_i[hs->task0 + k];
                    if (fi >= 0 && (argmax < 0 || f > v || (f == v && fi < argmax))) {
                        v = f;
                        argmax = fi;
                    }
                }
                break;
            }
            }
        }
    }
    memcpy(logits, r->scratch + p->buf_off[TP_BUF_LOGITS], (size_t)p->n_vocab * sizeof(float));
    return argmax;
}
