/*
 * loader_gguf.c - a GGUF file as the loaders' tensor source (loader.h).
 *
 * GGUF conventions honoured (see model.h and the fixture READMEs):
 *  - hyperparameters from <arch>.* keys (loader_hparams.c), checked against shapes;
 *  - tensor names, shapes and layer kinds from the architecture table;
 *  - norm gains used as stored (qwen35 stores w+1; qwen3 plain gains);
 *  - ternary matrices used in place (PQ2_0, fork Q2_0, mainline Q2_0 g64, Q1_0);
 *    PTQ1_0 transcoded to PQ2_0 at load (allocated, counted);
 *  - prism.hadamard.*: parsed and cross-checked against the tensors by
 *    formats/hadamard.c (the one contract parser); every ternary matrix of a
 *    folded role must be listed, the embedding must be the inverse one, a role
 *    that reads the un-rotated input must not be listed; gdn_v_grouped -> the
 *    GDN output is permuted tiled->grouped;
 *  - GDN per-value-head tensors stay in the file's tiled order (the run follows it);
 *  - tied head when the output role is absent.
 */
#include "model/loader.h"
#include "formats/codecs.h"
#include "formats/gguf.h"
#include "formats/hadamard.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct ld {
    tern_model *m;
    tern_gguf *g;
    const char *path;
    const tern_hadamard_meta *h; /* the contract (NULL: no rotation) */
} ld;

/* A matrix [n rows, k cols] (ne = [k, n]). n < 0: any row count (returned). */
static tern_status ld_mat(ld *L, const char *name, int64_t k, int64_t n, bool required,
                          bool folded, tern_qmat *out) {
    memset(out, 0, sizeof *out);
    const tern_gguf_tensor *t = tern_gguf_find_tensor(L->g, name);
    if (!t) {
        if (!required) return TERN_OK;
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", L->path, name);
    }
    if (t->n_dims != 2 || (int64_t)t->ne[0] != k || (n >= 0 && (int64_t)t->ne[1] != n))
        return tern_fail(TERN_ERR_SHAPE,
                         "%s: tensor '%s' (at offset %llu) has shape [%llu, %llu], expected "
                         "[%lld, %lld] (ne order: K, N)",
                         L->path, name, (unsigned long long)t->info_offset,
                         (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                         (long long)k, (long long)n);
    tern_qmat q = {.type = t->type, .n = (int64_t)t->ne[1], .k = (int64_t)t->ne[0], .data = t->data};
    size_t be = tern_dtype_block_elems(t->type), bb = tern_dtype_block_bytes(t->type);
    switch (t->type) {
    case TERN_DT_PQ2_0: case TERN_DT_Q2_0: case TERN_DT_Q2_0_G64: case TERN_DT_Q1_0:
    case TERN_DT_F32: case TERN_DT_F16: case TERN_DT_BF16:
        break;
    case TERN_DT_PTQ1_0: {
        size_t rb = (size_t)(q.k / 128) * 34, total;
        if (!tern_mul_ok(rb, (size_t)q.n, &total))
            return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' too large", L->path, name);
        uint8_t *dst = tm_model_alloc(L->m, total);
        if (!dst) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory transcoding '%s'", L->path, name);
        tern_status st = tern_transcode_rows(TERN_DT_PTQ1_0, t->data, TERN_DT_PQ2_0, dst,
                                             (uint64_t)q.k, (uint64_t)q.n, name);
        if (st) return tern_fail_prefix(st, "%s", L->path);
        q.type = TERN_DT_PQ2_0;
        q.data = dst;
        be = 128; bb = 34;
        break;
    }
    default:
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, not usable as a matrix",
                         L->path, name, tern_dtype_name(t->type));
    }
    q.row_bytes = (size_t)(q.k / (int64_t)be) * bb;
    if (q.k % (int64_t)be)
        return tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s': row length %lld not a multiple of %zu",
                         L->path, name, (long long)q.k, be);
    tern_status st = tern_qmat_check(&q, name);
    if (st) return tern_fail_prefix(st, "%s", L->path);
    if (L->h && folded && tern_dtype_is_packed_ternary(t->type) && !tern_hadamard_is_folded(L->h, name))
        return tern_fail(TERN_ERR_UNSUPPORTED,
                         "%s: tensor '%s' is ternary but not listed in prism.hadamard.weight_names "
                         "(mixed rotated/unrotated models are not supported)", L->path, name);
    L->m->info.weight_bytes += (uint64_t)q.row_bytes * q.n;
    *out = q;
    return TERN_OK;
}

/* A float vector of n elements (F32 in place when aligned; F16/BF16/F32 converted). */
static tern_status ld_vec(ld *L, const char *name, int64_t n, const float **out) {
    const tern_gguf_tensor *t = tern_gguf_find_tensor(L->g, name);
    if (!t) return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' is missing", L->path, name);
    if ((int64_t)t->n_elems != n)
        return tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s' (at offset %llu) has %llu elements, expected %lld",
                         L->path, name, (unsigned long long)t->info_offset,
                         (unsigned long long)t->n_elems, (long long)n);
    L->m->info.weight_bytes += t->nbytes;
    if (t->type == TERN_DT_F32 && ((uintptr_t)t->data & 3) == 0) {
        *out = (const float *)t->data;
        return TERN_OK;
    }
    if (t->type != TERN_DT_F32 && t->type != TERN_DT_F16 && t->type != TERN_DT_BF16)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected F32",
                         L->path, name, tern_dtype_name(t->type));
    float *f = tm_model_alloc(L->m, (size_t)n * sizeof(float));
    if (!f) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory for '%s'", L->path, name);
    tern_status st = tern_dequant_row(t->type, t->data, (uint64_t)n, f, name, 0);
    if (st) return st;
    *out = f;
    return TERN_OK;
}

/* GGUF key getter for tm_hparams_load. */
static tern_status gguf_get(void *u, const char *key, double *out, bool *found) {
    const tern_gguf *g = u;
    const tern_gguf_kv *kv = tern_gguf_find_kv(g, key);
    *found = kv != NULL;
    if (!kv) return TERN_OK;
    if (kv->type == TERN_GGUF_FLOAT32 || kv->type == TERN_GGUF_FLOAT64)
        return tern_gguf_get_f64(g, key, out);
    uint64_t v = 0;
    tern_status st = tern_gguf_get_u64(g, key, &v);
    *out = (double)v;
    return st;
}

static tern_status need_signs(ld *L, int64_t k, const char *name) {
    if (!L->h || tm_model_signs(L->m, k)) return TERN_OK;
    return tern_fail(TERN_ERR_FORMAT, "%s: no prism.hadamard sign vector of width %lld (needed by '%s')",
                     L->path, (long long)k, name);
}

static tern_status src_mat(void *u, const tm_role *r, int il, int64_t k, int64_t n, tern_qmat *out) {
    ld *L = u;
    char name[160];
    if (!tm_role_gguf_name(r, il, name, sizeof name))
        return tern_fail(TERN_ERR_INTERNAL, "%s: tensor name too long", L->path);
    TRY(ld_mat(L, name, k, n, !r->optional, r->had == TM_HAD_FOLDED, out));
    if (!L->h || !out->data) return TERN_OK;
    switch (r->had) {
    case TM_HAD_FOLDED:
        return need_signs(L, k, name);
    case TM_HAD_INVERSE:
        if (!tern_hadamard_is_inverse(L->h, name))
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: prism.hadamard.inverse_weight_names does not list %s",
                             L->path, name);
        L->m->embd_inverse = true;
        return need_signs(L, k, name);
    case TM_HAD_NONE:
        if (tern_hadamard_is_folded(L->h, name))
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "%s: tensor '%s' reads the un-rotated input; a rotated copy (listed in "
                             "prism.hadamard.weight_names) is not supported", L->path, name);
        return TERN_OK;
    }
    return TERN_OK;
}

static tern_status src_vec(void *u, const tm_role *r, int il, int64_t n, const float **out) {
    ld *L = u;
    char name[160];
    if (!tm_role_gguf_name(r, il, name, sizeof name))
        return tern_fail(TERN_ERR_INTERNAL, "%s: tensor name too long", L->path);
    return ld_vec(L, name, n, out);
}

/* The contract's sign vectors, copied into model allocations (counted). */
static tern_status take_signs(tern_model *m, const tern_hadamard_meta *h) {
    m->signs = calloc(h->n_widths ? h->n_widths : 1, sizeof *m->signs);
    if (!m->signs) return tern_fail(TERN_ERR_NOMEM, "out of memory for signs");
    for (uint32_t i = 0; i < h->n_widths; i++) {
        float *s = tm_model_alloc(m, (size_t)h->widths[i] * sizeof(float));
        if (!s) return tern_fail(TERN_ERR_NOMEM, "out of memory for signs");
        memcpy(s, h->signs[i], (size_t)h->widths[i] * sizeof(float));
        m->signs[m->n_signs].width = (int)h->widths[i];
        m->signs[m->n_signs++].s = s;
    }
    m->hadamard = true;
    m->had_block = (int)h->block_size;
    m->out_permute = h->gdn_v_grouped;
    return TERN_OK;
}

static tern_status load(tern_model *m, const char *path, tern_hadamard_meta **hp_out) {
    tern_gguf *g = NULL;
    TRY(tern_gguf_open(path, &g));
    m->gguf = g;
    char *arch = NULL;
    TRY(tern_gguf_get_str(g, "general.architecture", &arch));
    const tm_arch_desc *a = tm_arch_by_name(arch);
    if (!a) {
        tern_status st = tern_fail(TERN_ERR_UNSUPPORTED,
                                   "%s: general.architecture '%s' is not supported (qwen35, qwen3)", path, arch);
        free(arch);
        return st;
    }
    free(arch);
    m->hp.arch = a->id;
    char *nm = NULL;
    TRY(tern_gguf_get_str_opt(g, "general.name", &nm));
    m->name = nm;
    TRY(tm_hparams_load(m, gguf_get, g, path));
    TRY(tern_hadamard_from_gguf(g, hp_out));
    const tern_hadamard_meta *h = *hp_out;
    if (h) {
        TRY(tern_hadamard_validate_gguf(h, g));
        TRY(take_signs(m, h));
    }
    m->v_tiled = true;
    ld L = {m, g, path, h};
    tm_src s = {&L, path, src_mat, src_vec};
    return tm_bind_tensors(m, &s);
}

tern_status tm_load_gguf(tern_model *m, const char *path) {
    tern_hadamard_meta *h = NULL;
    tern_status st = load(m, path, &h);
    tern_hadamard_free(h);
    return st;
}
