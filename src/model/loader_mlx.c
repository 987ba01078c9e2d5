/*
 * loader_mlx.c - load a PrismML MLX pack directory (config.json + hadamard.json
 * + model.safetensors, read by formats/mlxpack.h) into a tern_model.
 *
 * Pack conventions (seed 000 sections 3.3 and 6, fixture README):
 *  - tensor names are the architecture table's Hugging Face names (optionally
 *    under "language_model."), ternary modules the HF name without ".weight";
 *  - a ternary module P has P.weight U32 [N, K/16] (PQ2_0 qs bytes as LE words),
 *    P.scales F16 [N, K/G], P.biases = -scales: repacked at load to PQ2_0 blocks
 *    (G = 128) or mainline Q2_0 blocks (G = 64): the bytes are counted in
 *    alloc_bytes (the words themselves are not copied elsewhere);
 *  - norms stored as in the GGUF (+1 for the five RMSNormPlusOne, ssm norm raw);
 *  - A_log (ssm_a = -exp(A_log) computed at load in double, kept fp32), dt_bias fp32,
 *    conv1d [C, K, 1], in_proj_a/b BF16 (un-rotated);
 *  - V heads in grouped order everywhere: nothing to permute (v_tiled = false,
 *    out_permute = false).
 */
#include "model/loader.h"
#include "formats/codecs.h"
#include "formats/mlxpack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void tm_mlx_close(void *pack) { tern_mlxpack_close(pack); }

/* GGUF-named hyperparameters collected from the pack's text_config. */
typedef struct hkv {
    char key[96];
    double v;
} hkv;
typedef struct htab {
    hkv e[48];
    int n;
} htab;

static void emit(const char *key, double v, bool is_int, void *user) {
    (void)is_int;
    htab *t = user;
    if (t->n < 48) {
        snprintf(t->e[t->n].key, sizeof t->e[t->n].key, "%s", key);
        t->e[t->n++].v = v;
    }
}

static tern_status tab_get(void *u, const char *key, double *out, bool *found) {
    htab *t = u;
    *found = false;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].key, key)) {
            *out = t->e[i].v;
            *found = true;
        }
    return TERN_OK;
}

typedef struct mld {
    tern_model *m;
    tern_mlxpack *p;
    const char *dir;
} mld;

/* Ternary module `path` as a [n, k] matrix, repacked to 34/18-byte blocks. */
static tern_status mlx_mat(mld *L, const char *path, int64_t k, int64_t n, bool required,
                           bool folded, tern_qmat *out) {
    memset(out, 0, sizeof *out);
    const tern_mlx_module *mod = tern_mlxpack_module(L->p, path);
    if (!mod) {
        if (!required) return TERN_OK;
        return tern_fail(TERN_ERR_FORMAT, "%s: ternary module '%s' is missing", L->dir, path);
    }
    tern_mlx_ternary t;
    TRY(tern_mlxpack_ternary(L->p, mod, &t));
    if ((int64_t)t.K != k || (n >= 0 && (int64_t)t.N != n))
        return tern_fail(TERN_ERR_SHAPE, "%s: module '%s' is [%llu, %llu], expected [%lld, %lld] (N, K)",
                         L->dir, path, (unsigned long long)t.N, (unsigned long long)t.K,
                         (long long)n, (long long)k);
    int G = (int)t.group_size;
    if ((G != 128 && G != 64) || t.K % G)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: module '%s': group size %d (64 or 128 supported)",
                         L->dir, path, G);
    size_t bb = G == 128 ? 34 : 18, gpr = (size_t)(t.K / G);
    size_t rb = gpr * bb, total;
    if (!tern_mul_ok(rb, (size_t)t.N, &total))
        return tern_fail(TERN_ERR_FORMAT, "%s: module '%s' too large", L->dir, path);
    uint8_t *dst = tm_model_alloc(L->m, total);
    if (!dst) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory repacking '%s'", L->dir, path);
    size_t wpr = (size_t)(t.K / 16), wpg = (size_t)G / 16; /* words per row / group */
    for (uint64_t r = 0; r < t.N; r++) {
        const uint8_t *w = t.words + r * wpr * 4;
        const uint8_t *sc = t.scales + r * gpr * 2;
        uint8_t *o = dst + r * rb;
        for (size_t gi = 0; gi < gpr; gi++) {
            memcpy(o + gi * bb, sc + gi * 2, 2);               /* fp16 d */
            memcpy(o + gi * bb + 2, w + gi * wpg * 4, wpg * 4); /* codes: same bytes */
        }
    }
    tern_qmat q = {.type = G == 128 ? TERN_DT_PQ2_0 : TERN_DT_Q2_0_G64, .n = (int64_t)t.N,
                   .k = (int64_t)t.K, .data = dst, .row_bytes = rb};
    TRY(tern_qmat_check(&q, path));
    if (L->m->hadamard && folded) {
        if (!t.signs && !mod->embedding)
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: module '%s' has no signs but the pack is rotated",
                             L->dir, path);
        if (!tm_model_signs(L->m, k))
            return tern_fail(TERN_ERR_FORMAT, "%s: no sign vector of width %lld for '%s'", L->dir,
                             (long long)k, path);
    }
    L->m->info.weight_bytes += (uint64_t)total;
    *out = q;
    return TERN_OK;
}

/* A float tensor of n elements (F32/F16/BF16), copied into an aligned buffer. */
static tern_status mlx_vec(mld *L, const char *name, int64_t n, float **out) {
    const tern_st_tensor *t = tern_mlxpack_tensor(L->p, name);
    if (!t) return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", L->dir, name);
    if ((int64_t)t->n_elems != n)
        return tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s' has %llu elements, expected %lld", L->dir,
                         name, (unsigned long long)t->n_elems, (long long)n);
    if (t->type != TERN_DT_F32 && t->type != TERN_DT_F16 && t->type != TERN_DT_BF16)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32/F16/BF16 expected)",
                         L->dir, name, t->dtype);
    float *f = tm_model_alloc(L->m, (size_t)n * sizeof(float));
    if (!f) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    TRY(tern_dequant_row(t->type, t->data, (uint64_t)n, f, name, 0));
    L->m->info.weight_bytes += t->nbytes;
    *out = f;
    return TERN_OK;
}

/* A dense [n, k] matrix (BF16/F16/F32), copied aligned (un-rotated a/b projections). */
static tern_status mlx_dense(mld *L, const char *name, int64_t k, int64_t n, tern_qmat *out) {
    const tern_st_tensor *t = tern_mlxpack_tensor(L->p, name);
    if (!t) return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", L->dir, name);
    if (t->n_dims != 2 || (int64_t)t->shape[0] != n || (int64_t)t->shape[1] != k)
        return tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s' is not [%lld, %lld]", L->dir, name,
                         (long long)n, (long long)k);
    if (t->type != TERN_DT_F32 && t->type != TERN_DT_F16 && t->type != TERN_DT_BF16)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s", L->dir, name, t->dtype);
    void *d = tm_model_alloc(L->m, t->nbytes);
    if (!d) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    memcpy(d, t->data, t->nbytes);
    tern_qmat q = {.type = t->type, .n = n, .k = k, .data = d, .row_bytes = (size_t)k * t->elem_size};
    TRY(tern_qmat_check(&q, name));
    L->m->info.weight_bytes += t->nbytes;
    *out = q;
    return TERN_OK;
}

/* Tensor source callbacks (loader.h): module path / HF name from the table. */
static tern_status src_mat(void *u, const tm_role *r, int il, int64_t k, int64_t n, tern_qmat *out) {
    mld *L = u;
    char name[200];
    bool ok = r->val == TM_VAL_DENSE ? tm_role_hf_name(r, il, name, sizeof name)
                                     : tm_role_mlx_module(r, il, name, sizeof name);
    if (!ok) return tern_fail(TERN_ERR_INTERNAL, "%s: tensor name too long", L->dir);
    if (r->val == TM_VAL_DENSE) return mlx_dense(L, name, k, n, out);
    return mlx_mat(L, name, k, n, !r->optional, r->had == TM_HAD_FOLDED, out);
}

static tern_status src_vec(void *u, const tm_role *r, int il, int64_t n, const float **out) {
    mld *L = u;
    char name[200];
    if (!tm_role_hf_name(r, il, name, sizeof name))
        return tern_fail(TERN_ERR_INTERNAL, "%s: tensor name too long", L->dir);
    float *v = NULL;
    TRY(mlx_vec(L, name, n, &v));
    if (r->val == TM_VAL_SSM_A) /* the pack stores A_log */
        for (int64_t i = 0; i < n; i++) v[i] = (float)-exp((double)v[i]);
    *out = v;
    return TERN_OK;
}

tern_status tm_load_mlx(tern_model *m, const char *dir) {
    tern_mlxpack *p = NULL;
    TRY(tern_mlxpack_open(dir, &p));
    m->mlx = p;
    mld L = {m, p, dir};
    htab tab = {0};
    const char *arch = NULL;
    TRY(tern_mlxpack_gguf_hparams(p, &arch, emit, NULL, &tab));
    const tm_arch_desc *a = tm_arch_by_name(arch);
    if (!a) return tern_fail(TERN_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported", dir, arch);
    m->hp.arch = a->id;
    TRY(tm_hparams_load(m, tab_get, &tab, dir));
    m->name = tern_strdup(p->model_type ? p->model_type : "");
    if (p->hadamard) {
        tern_hadamard_meta *h = p->hadamard;
        m->signs = calloc(h->n_widths ? h->n_widths : 1, sizeof *m->signs);
        if (!m->signs) return tern_fail(TERN_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < h->n_widths; i++) {
            m->signs[i].width = (int)h->widths[i];
            m->signs[i].s = h->signs[i];
        }
        m->n_signs = (int)h->n_widths;
        m->had_block = (int)h->block_size;
        m->hadamard = true;
        char emb[160], nm[256];
        tm_role_hf_name(tm_arch_role(a, TM_ROLE_TOKEN_EMBD), 0, emb, sizeof emb);
        snprintf(nm, sizeof nm, "%s%s", p->tensor_prefix ? p->tensor_prefix : "", emb);
        m->embd_inverse = tern_hadamard_is_inverse(h, nm) || tern_hadamard_is_inverse(h, emb);
        if (!m->embd_inverse)
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: hadamard.json does not list the embedding as inverse", dir);
    }
    m->v_tiled = false;     /* grouped order everywhere */
    m->out_permute = false;
    tm_src s = {&L, dir, src_mat, src_vec};
    return tm_bind_tensors(m, &s);
}
