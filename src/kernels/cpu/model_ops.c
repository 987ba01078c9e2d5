/*
 * model_ops.c - the model ops of kernels.h (tern_gdn, tern_attention, tern_rope,
 * tern_head_rmsnorm): the reference build of the per-head loops (model_ops.h), the
 * reference head norm and RoPE rows, the GDN conv + L2-norm steps, and the entry
 * points that split the work over the pool (per head; per channel range / row range
 * for the GDN's conv and norms). The ISA builds of model_ops.h replace the per-head
 * slots of the table (dispatch.c); nothing here is written after the table is filled.
 */
#define TK_SFX _ref
#include "kernels/cpu/model_ops.h"


/* ---------------------------------------------------------- reference slots */

static void head_norm_ref(float *v, int hd, const float *gain, float eps) {
    double ss = 0;
    for (int j = 0; j < hd; j++) ss += (double)v[j] * v[j];
    float inv = (float)(1.0 / sqrt(ss / hd + eps));
    for (int j = 0; j < hd; j++) v[j] = v[j] * inv * gain[j];
}

static void rope_row_ref(float *x, int n_heads, int hd, int rot, double pos, float theta) {
    int half = rot / 2;
    for (int i = 0; i < half; i++) {
        double inv = pow((double)theta, -2.0 * i / rot);
        double ang = pos * inv;
        float cs = (float)cos(ang), sn = (float)sin(ang);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)h * hd;
            float x0 = v[i], x1 = v[i + half];
            v[i] = x0 * cs - x1 * sn;
            v[i + half] = x1 * cs + x0 * sn;
        }
    }
}

void tern_model_ref_fill(tern_kern_table *t) {
    t->gdn_head = tern_gdn_head_ref;
    t->gdn_blocks = tern_gdn_head_blocks_ref;
    t->gdn_block_min = 0;
    t->attn_head = tern_attn_head_ref;
    t->head_norm = head_norm_ref;
    t->rope_row = rope_row_ref;
}

/* --------------------------------------------------------- per-head norm */

typedef struct {
    float *x;
    size_t rows, stride;
    int n_heads, hd;
    const float *gain;
    float eps;
    tern_head_norm_fn fn;
} hn_ctx;

static void hn_task(void *vc, int task, int n_tasks) {
    hn_ctx *c = vc;
    size_t total = c->rows * (size_t)c->n_heads;
    size_t a = total * task / n_tasks, b = total * (task + 1) / n_tasks;
    for (size_t i = a; i < b; i++) {
        size_t r = i / c->n_heads, h = i % c->n_heads;
        c->fn(c->x + r * c->stride + h * c->hd, c->hd, c->gain, c->eps);
    }
}

void tern_head_rmsnorm(float *x, size_t rows, size_t stride, int n_heads, int hd,
                       const float *gain, float eps, tern_pool *pool) {
    hn_ctx c = {x, rows, stride, n_heads, hd, gain, eps, tern_kern_get()->head_norm};
    int nt = pool ? tern_pool_size(pool) : 1;
    if (rows * n_heads < 8) nt = 1;
    tern_pool_run(nt > 1 ? pool : NULL, hn_task, &c, nt);
}

/* ------------------------------------------------------------------ RoPE */

void tern_rope(float *x, size_t rows, size_t stride, int n_heads, int hd, int rot, int pos0,
               float theta, tern_pool *pool) {
    (void)pool; /* a few microseconds a row: inline */
    const tern_rope_row_fn fn = tern_kern_get()->rope_row;
    for (size_t r = 0; r < rows; r++)
        fn(x + r * stride, n_heads, hd, rot, (double)(pos0 + (int)r), theta);
}

/* ------------------------------------------------------------- attention */

typedef struct {
    const tern_attn_args *a;
    tern_attn_head_fn fn;
} attn_ctx;

static void attn_task(void *vc, int h, int n_tasks) {
    (void)n_tasks;
    attn_ctx *c = vc;
    c->fn(c->a, h);
}

void tern_attention(const tern_attn_args *a, tern_pool *pool) {
    attn_ctx c = {a, tern_kern_get()->attn_head};
    tern_pool_run(pool, attn_task, &c, a->n_head);
}

/* ------------------------------------------------------------------- GDN */

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

typedef struct {
    const tern_gdn_args *a;
    int conv_ch;
    tern_gdn_head_fn head;
} gdn_ctx;

/* Conv + SiLU per channel range; also advances the conv state. Row by row over the
 * range's channels (contiguous in qkv and the state; a channel at a time would stride
 * C floats per input), each output summed as s += w[i] * x in i order as before. */
static void gdn_conv_task(void *vc, int task, int n_tasks) {
    gdn_ctx *c = vc;
    const tern_gdn_args *a = c->a;
    int C = c->conv_ch, K = a->conv_k, T = a->rows;
    int c0 = (int)((int64_t)C * task / n_tasks), c1 = (int)((int64_t)C * (task + 1) / n_tasks);
    enum { KMAX = 16 }; /* the loader takes conv_k 2..16 */
    TERN_ASSERT(K >= 1 && K <= KMAX);
    for (int t = 0; t < T; t++) {
        float *restrict out = a->work + (size_t)t * C;
        const float *x[KMAX];
        for (int i = 0; i < K; i++) {
            int src = t - (K - 1) + i; /* input index; negative: from the state */
            x[i] = src >= 0 ? a->qkv + (size_t)src * C : a->conv_state + (size_t)(K - 1 + src) * C;
        }
        if (K == 4) { /* the Bonsai kernel: sums in registers */
            for (int ch = c0; ch < c1; ch++) {
                const float *w = a->conv_w + (size_t)ch * 4;
                float s = 0;
                s += w[0] * x[0][ch];
                s += w[1] * x[1][ch];
                s += w[2] * x[2][ch];
                s += w[3] * x[3][ch];
                out[ch] = silu(s);
            }
            continue;
        }
        for (int ch = c0; ch < c1; ch++) {
            const float *w = a->conv_w + (size_t)ch * K;
            float s = 0;
            for (int i = 0; i < K; i++) s += w[i] * x[i][ch];
            out[ch] = silu(s);
        }
    }
    /* new state: the last K-1 inputs of (state ++ rows); a slot read from the state
     * (K-1+src = T+i > i) is one not yet written in ascending i */
    for (int i = 0; i < K - 1; i++) {
        int src = T - (K - 1) + i;
        const float *x = src >= 0 ? a->qkv + (size_t)src * C : a->conv_state + (size_t)(K - 1 + src) * C;
        memmove(a->conv_state + (size_t)i * C + c0, x + c0, (size_t)(c1 - c0) * sizeof(float));
    }
}

/* L2 norms of the q and k heads of every row (query heads first, also scaled). */
static void gdn_l2_task(void *vc, int task, int n_tasks) {
    gdn_ctx *c = vc;
    const tern_gdn_args *a = c->a;
    size_t total = (size_t)a->rows * 2 * a->n_k;
    size_t lo = total * task / n_tasks, hi = total * (task + 1) / n_tasks;
    float qscale = 1.0f / sqrtf((float)a->dk);
    for (size_t i = lo; i < hi; i++) {
        size_t t = i / (2 * a->n_k), hk = i % (2 * a->n_k);
        float *v = a->work + t * c->conv_ch + hk * a->dk;
        double ss = 0;
        for (int j = 0; j < a->dk; j++) ss += (double)v[j] * v[j];
        float inv = (float)(1.0 / sqrt(ss + 1e-6));
        if (hk < (size_t)a->n_k) inv *= qscale; /* query heads first */
        for (int j = 0; j < a->dk; j++) v[j] *= inv;
    }
}

static void gdn_head_task(void *vc, int p, int n_tasks) {
    (void)n_tasks;
    gdn_ctx *c = vc;
    c->head(c->a, c->conv_ch, p);
}

void tern_gdn_with(const tern_gdn_args *a, tern_gdn_scan scan, tern_pool *pool) {
    const tern_kern_table *kt = tern_kern_get();
    bool blocks = scan == TERN_GDN_BLOCKS ||
                  (scan == TERN_GDN_AUTO && kt->gdn_block_min > 0 && a->rows >= kt->gdn_block_min);
    blocks = blocks && a->dk <= 512 && a->dv <= 512;
    gdn_ctx c = {a, 2 * a->n_k * a->dk + a->n_v * a->dv, blocks ? kt->gdn_blocks : kt->gdn_head};
    int nt = pool ? tern_pool_size(pool) : 1;
    /* conv and L2 norms are a few microseconds for a decode step: inline */
    tern_pool *small = a->rows <= 4 ? NULL : pool;
    if (!small) nt = 1;
    tern_pool_run(small, gdn_conv_task, &c, nt);
    tern_pool_run(small, gdn_l2_task, &c, nt);
    tern_pool_run(pool, gdn_head_task, &c, a->n_v);
    if (a->state_bf16) tern_gdn_state_round_bf16(a->state, a->pending, a->n_v, a->dk, a->dv);
}

void tern_gdn(const tern_gdn_args *a, tern_pool *pool) { tern_gdn_with(a, TERN_GDN_AUTO, pool); }

int tern_gdn_block_min(void) { return tern_kern_get()->gdn_block_min; }

/* ---------------------------------------------------------- KV cache rows */

size_t tern_kv_row_bytes(tern_kv_type t, size_t n) {
    if (t == TERN_KV_Q8_0 && n % TERN_KV_Q8_BLOCK) return 0;
    return tk_kv_bytes(t, n);
}

int tern_kv_block(tern_kv_type t) { return t == TERN_KV_Q8_0 ? TERN_KV_Q8_BLOCK : 1; }

/* One Q8_0 block: d = amax/127 rounded to fp16; q = round(x/d) with the stored d,
 * clamped to [-127, 127] (the rounded d may be a little below amax/127). */
static void q8_block(uint8_t *dst, const float *x) {
    float amax = 0;
    for (int j = 0; j < 32; j++) {
        float v = fabsf(x[j]);
        if (v > amax) amax = v;
    }
    uint16_t dh = tern_f32_to_f16(amax / 127.0f);
    float d = tk_h2f(dh);
    float id = d > 0 ? 1.0f / d : 0.0f;
    memcpy(dst, &dh, 2);
    int8_t *q = (int8_t *)(dst + 2);
    for (int j = 0; j < 32; j++) {
        float r = nearbyintf(x[j] * id);
        q[j] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
    }
}

void tern_kv_store(tern_kv_type t, void *dst, size_t dst_stride, const float *src,
                   size_t src_stride, size_t rows, size_t n) {
    for (size_t r = 0; r < rows; r++) {
        uint8_t *d = (uint8_t *)dst + r * dst_stride;
        const float *x = src + r * src_stride;
        switch (t) {
        case TERN_KV_F16:
            for (size_t j = 0; j < n; j++) {
                uint16_t h = tern_f32_to_f16(x[j]);
                memcpy(d + 2 * j, &h, 2);
            }
            break;
        case TERN_KV_BF16:
            for (size_t j = 0; j < n; j++) {
                uint16_t h = tern_f32_to_bf16(x[j]);
                memcpy(d + 2 * j, &h, 2);
            }
            break;
        case TERN_KV_Q8_0:
            for (size_t b = 0; b + 32 <= n; b += 32) q8_block(d + b / 32 * 34, x + b);
            break;
        default: memcpy(d, x, n * sizeof(float)); break;
        }
    }
}

void tern_kv_load(tern_kv_type t, const void *src, size_t n, float *out) {
    const uint8_t *s = src;
    for (size_t j = 0; j < n; j++) {
        uint16_t h;
        switch (t) {
        case TERN_KV_F16: memcpy(&h, s + 2 * j, 2); out[j] = tk_h2f(h); break;
        case TERN_KV_BF16: memcpy(&h, s + 2 * j, 2); out[j] = tk_b2f(h); break;
        case TERN_KV_Q8_0: {
            const uint8_t *b = s + j / 32 * 34;
            memcpy(&h, b, 2);
            out[j] = tk_h2f(h) * (float)((const int8_t *)(b + 2))[j % 32];
            break;
        }
        default: memcpy(out + j, s + 4 * j, 4); break;
        }
    }
}
