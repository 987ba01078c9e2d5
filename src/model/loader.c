/*
 * loader.c - tern_model_load for GGUF files (qwen35 hybrid, qwen3 dense) and the
 * public model API (info, free). MLX packs are read by loader_mlx.c.
 *
 * GGUF conventions honoured (see model.h and the fixture READMEs):
 *  - hyperparameters from <arch>.* keys, checked for consistency against shapes;
 *  - norm gains used as stored (qwen35 stores w+1; qwen3 plain gains);
 *  - ternary matrices used in place (PQ2_0, fork Q2_0, mainline Q2_0 g64, Q1_0);
 *    PTQ1_0 transcoded to PQ2_0 at load (allocated, counted);
 *  - prism.hadamard.*: version 1, the normalized Sylvester transform, explicit signs
 *    per K width; gdn_v_grouped -> the GDN output is permuted tiled->grouped;
 *  - GDN per-value-head tensors stay in the file's tiled order (the run follows it);
 *  - tied head (qwen3) when output.weight is absent.
 */
#include "model/backend.h"
#include "formats/codecs.h"
#include "formats/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *tm_model_alloc(tern_model *m, size_t n) {
    if (m->n_owned == m->cap_owned) {
        int nc = m->cap_owned ? m->cap_owned * 2 : 64;
        void **o = realloc(m->owned, nc * sizeof *o);
        if (!o) return NULL;
        m->owned = o;
        size_t *on = realloc(m->owned_n, nc * sizeof *on);
        if (!on) return NULL;
        m->owned_n = on;
        m->cap_owned = nc;
    }
    void *p = tern_alloc_aligned(n ? n : 1);
    if (!p) return NULL;
    m->owned[m->n_owned] = p;
    m->owned_n[m->n_owned++] = n ? n : 1;
    m->info.alloc_bytes += n;
    return p;
}

tern_status tm_load_progress(tern_model *m, int il, int n) {
    if (m->progress && !m->progress((uint64_t)il, (uint64_t)n, m->progress_user))
        return tern_fail(TERN_ERR_CANCELLED, "%s: loading cancelled", m->path);
    return TERN_OK;
}

const float *tm_model_signs(const tern_model *m, int64_t k) {
    if (!m->hadamard) return NULL;
    for (int i = 0; i < m->n_signs; i++)
        if (m->signs[i].width == k) return m->signs[i].s;
    return NULL;
}

void tern_model_params_default(tern_model_params *p) {
    memset(p, 0, sizeof *p);
}

/* Every ternary matrix the forward pass multiplies by, with its fast_* slot. */
static int model_mats(tern_model *m, tern_qmat **file, tern_qmat **fast, int cap) {
    int n = 0;
    for (int il = 0; m->layers && il < m->hp.n_layer; il++) {
        tm_layer *l = &m->layers[il];
        tern_qmat *f[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->wqkv, &l->wz, &l->wout,
                          &l->wgate, &l->wup, &l->wdown};
        tern_qmat *r[] = {&l->fast_wq, &l->fast_wk, &l->fast_wv, &l->fast_wo, &l->fast_wqkv,
                          &l->fast_wz, &l->fast_wout, &l->fast_wgate, &l->fast_wup,
                          &l->fast_wdown};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (f[i]->data && n < cap) {
                file[n] = f[i];
                fast[n++] = r[i];
            }
    }
    if (m->output.data && m->output.data != m->tok_embd.data && n < cap) {
        file[n] = &m->output;
        fast[n++] = &m->fast_output;
    }
    return n;
}

void tern_model_free(tern_model *m) {
    if (!m) return;
    if (m->repacked && m->layers) {
        int cap = m->hp.n_layer * 10 + 1;
        tern_qmat **file = malloc((size_t)cap * sizeof *file), **fast = malloc((size_t)cap * sizeof *fast);
        int n = file && fast ? model_mats(m, file, fast, cap) : 0;
        for (int i = 0; i < n; i++)
            if (fast[i]->data) tern_qmat_free_repacked(fast[i]);
        free(file);
        free(fast);
    }
    for (int i = 0; i < m->n_owned; i++) tern_free_aligned(m->owned[i], m->owned_n[i]);
    free(m->owned);
    free(m->owned_n);
    for (int i = 0; i < m->n_dev; i++) tm_be_free(m->be, m->dev[i], m->dev_n[i]);
    tm_backend_destroy(m->be);
    free(m->dev);
    free(m->dev_n);
    if (m->gguf) tern_gguf_close(m->gguf);
    if (m->mlx) tm_mlx_close(m->mlx);
    pthread_mutex_destroy(&m->eval_mu);
    free(m->layers);
    free(m->path);
    free(m->name);
    free(m);
}

const tern_model_info *tern_model_get_info(const tern_model *m) { return m ? &m->info : NULL; }

int tern_model_batch_hint(const tern_model *m) {
    if (!m) return 1;
    return m->be->vt->batch_hint(m->be);
}

/* ------------------------------------------------------------- GGUF tensors */

typedef struct ld {
    tern_model *m;
    tern_gguf *g;
    const char *path;
    const tern_gguf_kv *wnames; /* prism.hadamard.weight_names (or NULL) */
} ld;

static bool in_str_array(const tern_gguf_kv *kv, const char *name) {
    if (!kv || kv->type != TERN_GGUF_ARRAY || kv->arr_type != TERN_GGUF_STRING) return false;
    size_t n = strlen(name);
    for (uint64_t i = 0; i < kv->arr_n; i++)
        if (kv->arr_str[i].len == n && memcmp(kv->arr_str[i].ptr, name, n) == 0) return true;
    return false;
}

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
    if (L->m->hadamard && folded && tern_dtype_is_packed_ternary(t->type) &&
        !in_str_array(L->wnames, name))
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

#define TRY(x) do { tern_status st_ = (x); if (st_) return st_; } while (0)

static tern_status ld_hadamard(ld *L) {
    tern_model *m = L->m;
    const tern_gguf_kv *ver = tern_gguf_find_kv(L->g, "prism.hadamard.version");
    if (!ver) return TERN_OK;
    uint64_t v = 0, block = 0;
    TRY(tern_gguf_get_u64(L->g, "prism.hadamard.version", &v));
    if (v != 1)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: prism.hadamard.version %llu (only 1 is supported)",
                         L->path, (unsigned long long)v);
    TRY(tern_gguf_get_u64(L->g, "prism.hadamard.block_size", &block));
    if (block < 2 || block > 65536 || (block & (block - 1)))
        return tern_fail(TERN_ERR_FORMAT, "%s: prism.hadamard.block_size %llu is not a power of two",
                         L->path, (unsigned long long)block);
    const char *want[][2] = {{"prism.hadamard.transform", "normalized-sylvester-walsh-hadamard"},
                             {"prism.hadamard.axis", "input-last-dimension"},
                             {"prism.hadamard.sign_mode", "explicit"}};
    for (int i = 0; i < 3; i++) {
        char *s = NULL;
        TRY(tern_gguf_get_str(L->g, want[i][0], &s));
        bool ok = strcmp(s, want[i][1]) == 0;
        if (!ok) {
            tern_status st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: %s = '%s' (only '%s' is supported)",
                                       L->path, want[i][0], s, want[i][1]);
            free(s);
            return st;
        }
        free(s);
    }
    const tern_gguf_kv *w = tern_gguf_find_kv(L->g, "prism.hadamard.sign_widths");
    const tern_gguf_kv *sv = tern_gguf_find_kv(L->g, "prism.hadamard.sign_values");
    if (!w || !sv || w->type != TERN_GGUF_ARRAY || sv->type != TERN_GGUF_ARRAY ||
        w->arr_type == TERN_GGUF_STRING || sv->arr_type == TERN_GGUF_STRING)
        return tern_fail(TERN_ERR_FORMAT, "%s: prism.hadamard.sign_widths / sign_values missing or not numeric arrays",
                         L->path);
    if (w->arr_n < 1 || w->arr_n > 4)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: prism.hadamard.sign_widths has %llu entries (1..4 supported)",
                         L->path, (unsigned long long)w->arr_n);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->arr_n; i++) {
        int64_t width = tern_gguf_arr_i64(w, i);
        if (width <= 0 || width % (int64_t)block || width > (1 << 24))
            return tern_fail(TERN_ERR_FORMAT, "%s: prism.hadamard.sign_widths[%llu] = %lld is not a multiple of block %llu",
                             L->path, (unsigned long long)i, (long long)width, (unsigned long long)block);
        if (off + (uint64_t)width > sv->arr_n)
            return tern_fail(TERN_ERR_FORMAT, "%s: prism.hadamard.sign_values has %llu entries, fewer than the widths need",
                             L->path, (unsigned long long)sv->arr_n);
        float *s = tm_model_alloc(m, (size_t)width * sizeof(float));
        if (!s) return tern_fail(TERN_ERR_NOMEM, "out of memory for signs");
        for (int64_t j = 0; j < width; j++) {
            int64_t x = tern_gguf_arr_i64(sv, off + j);
            if (x != 1 && x != -1)
                return tern_fail(TERN_ERR_FORMAT, "%s: prism.hadamard.sign_values[%llu] = %lld is not +-1",
                                 L->path, (unsigned long long)(off + j), (long long)x);
            s[j] = (float)x;
        }
        off += width;
        m->signs[m->n_signs].width = (int)width;
        m->signs[m->n_signs++].s = s;
    }
    if (off != sv->arr_n)
        return tern_fail(TERN_ERR_FORMAT, "%s: prism.hadamard.sign_values has %llu entries, widths sum to %llu",
                         L->path, (unsigned long long)sv->arr_n, (unsigned long long)off);
    L->wnames = tern_gguf_find_kv(L->g, "prism.hadamard.weight_names");
    const tern_gguf_kv *inv = tern_gguf_find_kv(L->g, "prism.hadamard.inverse_weight_names");
    m->embd_inverse = in_str_array(inv, "token_embd.weight");
    bool grouped = false;
    if (tern_gguf_find_kv(L->g, "prism.hadamard.gdn_v_grouped"))
        TRY(tern_gguf_get_bool(L->g, "prism.hadamard.gdn_v_grouped", &grouped));
    m->out_permute = grouped;
    m->hadamard = true;
    m->had_block = (int)block;
    return TERN_OK;
}

static tern_status need_signs(ld *L, int64_t k, const char *what) {
    if (!L->m->hadamard || tm_model_signs(L->m, k)) return TERN_OK;
    return tern_fail(TERN_ERR_FORMAT, "%s: no prism.hadamard sign vector of width %lld (needed by %s)",
                     L->path, (long long)k, what);
}


/* ------------------------------------------------------------ hyperparameters */

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

tern_status tm_hparams_load(tern_model *m, tm_key_get get, void *u, const char *path) {
    tm_hparams *hp = &m->hp;
    const char *A = hp->arch == TM_ARCH_QWEN35 ? "qwen35" : "qwen3";
    char key[128];
    double v;
    bool found;
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", A, s), key)
#define GETI(s, dst, req)                                                                     \
    do {                                                                                      \
        TRY(get(u, KEY(s), &v, &found));                                                      \
        if (!found && (req))                                                                  \
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is missing", path, key);          \
        if (found) {                                                                          \
            if (!(v >= 0 && v <= (double)(1 << 30)) || v != (double)(int64_t)v)               \
                return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' = %g is out of range", path,  \
                                 key, v);                                                     \
            (dst) = (int)v;                                                                   \
        }                                                                                     \
    } while (0)
    GETI("block_count", hp->n_layer, true);
    GETI("embedding_length", hp->n_embd, true);
    GETI("feed_forward_length", hp->n_ff, true);
    GETI("attention.head_count", hp->n_head, true);
    GETI("attention.head_count_kv", hp->n_head_kv, true);
    hp->head_dim = hp->n_head ? hp->n_embd / hp->n_head : 0;
    GETI("attention.key_length", hp->head_dim, false);
    int vlen = hp->head_dim;
    GETI("attention.value_length", vlen, false);
    GETI("context_length", hp->n_ctx_train, false);
    hp->eps = 1e-6f;
    TRY(get(u, KEY("attention.layer_norm_rms_epsilon"), &v, &found));
    if (found) hp->eps = (float)v;
    hp->rope_theta = hp->arch == TM_ARCH_QWEN35 ? 1e7f : 1e6f;
    TRY(get(u, KEY("rope.freq_base"), &v, &found));
    if (found) hp->rope_theta = (float)v;
    hp->rope_dims = hp->head_dim;
    GETI("rope.dimension_count", hp->rope_dims, false);
    if (hp->n_layer < 1 || hp->n_layer > 1024 || hp->n_embd < 1 || hp->n_embd > 65536 ||
        hp->n_ff < 1 || hp->n_ff > (1 << 20) || hp->n_head > 1024 || hp->head_dim > 1024 ||
        hp->n_head < 1 || hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv || hp->head_dim < 2 ||
        hp->head_dim % 2 || vlen != hp->head_dim || hp->rope_dims < 2 || hp->rope_dims % 2 ||
        hp->rope_dims > hp->head_dim || !(hp->eps > 0) || !(hp->rope_theta > 0))
        return tern_fail(TERN_ERR_FORMAT,
                         "%s: inconsistent hyperparameters (layers %d, embd %d, ff %d, heads %d/%d, "
                         "head_dim %d, value_length %d, rope dims %d)",
                         path, hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv,
                         hp->head_dim, vlen, hp->rope_dims);
    if (hp->arch == TM_ARCH_QWEN35) {
        hp->attn_gate = true;
        GETI("full_attention_interval", hp->full_attn_interval, true);
        GETI("ssm.group_count", hp->ssm_n_k, true);
        GETI("ssm.time_step_rank", hp->ssm_n_v, true);
        GETI("ssm.state_size", hp->ssm_dk, true);
        GETI("ssm.conv_kernel", hp->conv_k, true);
        int inner = 0;
        GETI("ssm.inner_size", inner, true);
        if (hp->full_attn_interval < 1 || hp->ssm_n_k < 1 || hp->ssm_n_v < 1 ||
            hp->ssm_n_v % hp->ssm_n_k || inner % hp->ssm_n_v || hp->ssm_dk < 1 ||
            hp->ssm_dk > 512 || hp->conv_k < 2 || hp->conv_k > 16)
            return tern_fail(TERN_ERR_FORMAT,
                             "%s: inconsistent GDN hyperparameters (n_k %d, n_v %d, state %d, inner %d, conv %d, interval %d)",
                             path, hp->ssm_n_k, hp->ssm_n_v, hp->ssm_dk, inner, hp->conv_k,
                             hp->full_attn_interval);
        hp->ssm_dv = inner / hp->ssm_n_v;
        if (hp->ssm_dv > 512)
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: GDN value head dim %d > 512", path, hp->ssm_dv);
    }
#undef GETI
#undef KEY
    return TERN_OK;
}

static tern_status load_gguf(tern_model *m, const char *path) {
    tern_gguf *g = NULL;
    TRY(tern_gguf_open(path, &g));
    m->gguf = g;
    ld L = {m, g, path, NULL};
    char *arch = NULL;
    TRY(tern_gguf_get_str(g, "general.architecture", &arch));
    tm_hparams *hp = &m->hp;
    if (strcmp(arch, "qwen35") == 0) hp->arch = TM_ARCH_QWEN35;
    else if (strcmp(arch, "qwen3") == 0) hp->arch = TM_ARCH_QWEN3;
    else {
        tern_status st = tern_fail(TERN_ERR_UNSUPPORTED,
                                   "%s: general.architecture '%s' is not supported (qwen35, qwen3)", path, arch);
        free(arch);
        return st;
    }
    free(arch);
    char *nm = NULL;
    TRY(tern_gguf_get_str_opt(g, "general.name", &nm));
    m->name = nm;
    TRY(tm_hparams_load(m, gguf_get, g, path));
    TRY(ld_hadamard(&L));
    m->v_tiled = true;
    if (!m->hadamard) m->out_permute = false;

    /* embedding and head */
    TRY(ld_mat(&L, "token_embd.weight", hp->n_embd, -1, true, false, &m->tok_embd));
    hp->n_vocab = (int)m->tok_embd.n;
    if (!tern_dtype_is_packed_ternary(m->tok_embd.type) && m->tok_embd.type != TERN_DT_F32 &&
        m->tok_embd.type != TERN_DT_F16 && m->tok_embd.type != TERN_DT_BF16)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: token_embd.weight type", path);
    TRY(ld_mat(&L, "output.weight", hp->n_embd, hp->n_vocab, false, true, &m->output));
    bool tied = m->output.data == NULL;
    if (tied) {
        if (m->hadamard)
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tied head with a Hadamard rotation is not supported",
                             path);
        m->output = m->tok_embd;
    }
    if (m->hadamard && !m->embd_inverse)
        return tern_fail(TERN_ERR_UNSUPPORTED,
                         "%s: prism.hadamard.inverse_weight_names does not list token_embd.weight", path);
    TRY(need_signs(&L, hp->n_embd, "the residual-stream sites"));
    TRY(need_signs(&L, hp->n_ff, "ffn_down"));
    TRY(ld_vec(&L, "output_norm.weight", hp->n_embd, &m->output_norm));

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    m->info.alloc_bytes += (uint64_t)hp->n_layer * sizeof *m->layers;
    if (!m->layers) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    int E = hp->n_embd, HD = hp->head_dim;
    for (int il = 0; il < hp->n_layer; il++) {
        tm_layer *l = &m->layers[il];
        char nb[160];
#define TN(s) (snprintf(nb, sizeof nb, "blk.%d.%s", il, s), nb)
        l->is_attn = hp->arch == TM_ARCH_QWEN3 || (il + 1) % hp->full_attn_interval == 0;
        TRY(ld_vec(&L, TN("attn_norm.weight"), E, &l->attn_norm));
        TRY(ld_vec(&L, TN(hp->arch == TM_ARCH_QWEN35 ? "post_attention_norm.weight" : "ffn_norm.weight"),
                   E, &l->post_norm));
        if (l->is_attn) {
            l->kv_index = hp->n_attn_layers++;
            int qrows = hp->n_head * HD * (hp->attn_gate ? 2 : 1);
            TRY(ld_mat(&L, TN("attn_q.weight"), E, qrows, true, true, &l->wq));
            TRY(ld_mat(&L, TN("attn_k.weight"), E, (int64_t)hp->n_head_kv * HD, true, true, &l->wk));
            TRY(ld_mat(&L, TN("attn_v.weight"), E, (int64_t)hp->n_head_kv * HD, true, true, &l->wv));
            TRY(ld_mat(&L, TN("attn_output.weight"), (int64_t)hp->n_head * HD, E, true, true, &l->wo));
            TRY(need_signs(&L, (int64_t)hp->n_head * HD, "attn_output"));
            TRY(ld_vec(&L, TN("attn_q_norm.weight"), HD, &l->q_norm));
            TRY(ld_vec(&L, TN("attn_k_norm.weight"), HD, &l->k_norm));
        } else {
            l->gdn_index = hp->n_gdn_layers++;
            int nk = hp->ssm_n_k, nv = hp->ssm_n_v, dk = hp->ssm_dk, dv = hp->ssm_dv;
            int64_t C = 2LL * nk * dk + (int64_t)nv * dv;
            TRY(ld_mat(&L, TN("attn_qkv.weight"), E, C, true, true, &l->wqkv));
            TRY(ld_mat(&L, TN("attn_gate.weight"), E, (int64_t)nv * dv, true, true, &l->wz));
            TRY(ld_mat(&L, TN("ssm_alpha.weight"), E, nv, true, true, &l->wa));
            TRY(ld_mat(&L, TN("ssm_beta.weight"), E, nv, true, true, &l->wb));
            TRY(ld_mat(&L, TN("ssm_out.weight"), (int64_t)nv * dv, E, true, true, &l->wout));
            TRY(need_signs(&L, (int64_t)nv * dv, "ssm_out"));
            TRY(ld_vec(&L, TN("ssm_conv1d.weight"), C * hp->conv_k, &l->conv));
            TRY(ld_vec(&L, TN("ssm_a"), nv, &l->ssm_a));
            TRY(ld_vec(&L, TN("ssm_dt.bias"), nv, &l->dt_bias));
            TRY(ld_vec(&L, TN("ssm_norm.weight"), dv, &l->ssm_norm));
            if (m->hadamard && (in_str_array(L.wnames, TN("ssm_alpha.weight")) ||
                                in_str_array(L.wnames, TN("ssm_beta.weight"))))
                return tern_fail(TERN_ERR_UNSUPPORTED, "%s: rotated ssm_alpha/ssm_beta are not supported", path);
        }
        TRY(ld_mat(&L, TN("ffn_gate.weight"), E, hp->n_ff, true, true, &l->wgate));
        TRY(ld_mat(&L, TN("ffn_up.weight"), E, hp->n_ff, true, true, &l->wup));
        TRY(ld_mat(&L, TN("ffn_down.weight"), hp->n_ff, E, true, true, &l->wdown));
        TRY(tm_load_progress(m, il + 1, hp->n_layer));
#undef TN
    }
    if (hp->arch == TM_ARCH_QWEN35 && hp->n_attn_layers == 0 && hp->n_layer >= hp->full_attn_interval)
        return tern_fail(TERN_ERR_INTERNAL, "no attention layers");
    return TERN_OK;
}

/* ------------------------------------------------------------- device upload */

/* The whole pages of [p, p+n) that lie in the model file's mapping are given back to
 * the kernel once uploaded (the mapping is read-only and file-backed: nothing is lost,
 * a later read would fault them in again), so host RSS stays small. */
static void drop_host_pages(tern_model *m, const void *p, size_t n) {
    const tern_gguf *g = m->gguf;
    if (!g || !g->map.data || !n) return;
    const uint8_t *lo = g->map.data, *hi = lo + g->map.size, *a = p, *b = a + n;
    if (a < lo || b > hi) return;
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t s0 = ((uintptr_t)a + ps - 1) & ~(ps - 1), s1 = (uintptr_t)b & ~(ps - 1);
    if (s1 > s0) (void)madvise((void *)s0, s1 - s0, MADV_DONTNEED);
}

/* A device copy of n host bytes at *p (the pointer is replaced; the host bytes stay
 * where they are). Counted in info.device_bytes. */
static tern_status up_bytes(tern_model *m, const void **p, size_t n) {
    if (!*p) return TERN_OK;
    if (m->n_dev == m->cap_dev) {
        int nc = m->cap_dev ? m->cap_dev * 2 : 256;
        void **d = realloc(m->dev, nc * sizeof *d);
        if (!d) return tern_fail(TERN_ERR_NOMEM, "out of memory");
        m->dev = d;
        size_t *dn = realloc(m->dev_n, nc * sizeof *dn);
        if (!dn) return tern_fail(TERN_ERR_NOMEM, "out of memory");
        m->dev_n = dn;
        m->cap_dev = nc;
    }
    void *d = tm_be_alloc(m->be, n);
    if (!d)
        return tern_fail(TERN_ERR_NOMEM, "%s: out of %s memory uploading %zu bytes (%llu so far)",
                         m->path, m->be->vt->name, n, (unsigned long long)m->info.device_bytes);
    m->dev[m->n_dev] = d;
    m->dev_n[m->n_dev++] = n;
    m->info.device_bytes += n;
    TRY(tm_be_upload(m->be, d, *p, n));
    drop_host_pages(m, *p, n);
    *p = d;
    return TERN_OK;
}

static tern_status up_mat(tern_model *m, tern_qmat *w) {
    const void *d = w->data;
    if (!d) return TERN_OK;
    TRY(up_bytes(m, &d, w->row_bytes * (size_t)w->n));
    w->data = d;
    if (m->be->vt->prepare_matrix) {
        size_t before = m->dev_n[m->n_dev - 1], after = before;
        TRY(m->be->vt->prepare_matrix(m->be, w, &after));
        m->dev[m->n_dev - 1] = (void *)w->data;
        m->dev_n[m->n_dev - 1] = after;
        m->info.device_bytes = m->info.device_bytes - before + after;
    }
    return TERN_OK;
}

static tern_status up_vec(tern_model *m, const float **v, size_t n) {
    const void *d = *v;
    TRY(up_bytes(m, &d, n * sizeof(float)));
    *v = d;
    return TERN_OK;
}

/* Every tensor the forward pass reads goes to the back-end's memory (weights in
 * their packed file bytes); the host tensors stay mapped but unused. */
static tern_status upload_model(tern_model *m) {
    const tm_hparams *hp = &m->hp;
    size_t E = (size_t)hp->n_embd, HD = (size_t)hp->head_dim, nv = (size_t)hp->ssm_n_v;
    size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + nv * hp->ssm_dv;
    bool tied = m->output.data == m->tok_embd.data;
    TRY(up_mat(m, &m->tok_embd));
    if (tied) m->output = m->tok_embd;
    else TRY(up_mat(m, &m->output));
    TRY(up_vec(m, &m->output_norm, E));
    for (int il = 0; il < hp->n_layer; il++) {
        tm_layer *l = &m->layers[il];
        TRY(up_vec(m, &l->attn_norm, E));
        TRY(up_vec(m, &l->post_norm, E));
        tern_qmat *mats[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->wqkv, &l->wz, &l->wa, &l->wb,
                             &l->wout, &l->wgate, &l->wup, &l->wdown};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) TRY(up_mat(m, mats[i]));
        if (l->is_attn) {
            TRY(up_vec(m, &l->q_norm, HD));
            TRY(up_vec(m, &l->k_norm, HD));
        } else {
            TRY(up_vec(m, &l->conv, C * (size_t)hp->conv_k));
            TRY(up_vec(m, &l->ssm_a, nv));
            TRY(up_vec(m, &l->dt_bias, nv));
            TRY(up_vec(m, &l->ssm_norm, (size_t)hp->ssm_dv));
        }
        TRY(tm_load_progress(m, il + 1, hp->n_layer));
    }
    for (int i = 0; i < m->n_signs; i++) {
        const float *s = m->signs[i].s;
        TRY(up_vec(m, &s, (size_t)m->signs[i].width));
        m->signs[i].s = (float *)s;
    }
    return TERN_OK;
}

/* ------------------------------------------------------------- public load */

void tm_fill_info(tern_model *m) {
    bool tied = m->output.data == m->tok_embd.data;
    tm_hparams *hp = &m->hp;
    tern_model_info *in = &m->info;
    in->arch = hp->arch == TM_ARCH_QWEN35 ? "qwen35" : "qwen3";
    in->name = m->name ? m->name : "";
    in->n_layers = hp->n_layer;
    in->n_embd = hp->n_embd;
    in->n_ff = hp->n_ff;
    in->n_vocab = hp->n_vocab;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->head_dim = hp->head_dim;
    in->n_ctx_train = hp->n_ctx_train;
    in->has_hadamard = m->hadamard;
    uint64_t emb = (uint64_t)m->tok_embd.row_bytes * m->tok_embd.n;
    in->decode_bytes_per_token = in->weight_bytes - (tied ? 0 : emb);
    in->format = m->gguf ? "gguf" : "mlx";
    in->weight_type = hp->n_layer > 0 ? tern_dtype_name(m->layers[0].wgate.type) : "";
}

tern_status tern_model_load(const char *path, const tern_model_params *p, tern_model **out) {
    if (!path || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_model_load: NULL argument");
    *out = NULL;
    tern_model_params def;
    if (!p) {
        tern_model_params_default(&def);
        p = &def;
    }
    tern_kernels_init();
    tern_model *m = calloc(1, sizeof *m);
    if (!m) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    m->path = tern_strdup(path);
    pthread_mutex_init(&m->eval_mu, NULL);
    m->progress = p->progress;
    m->progress_user = p->progress_user;
    struct stat sb;
    /* the back-end first: a missing device is said before a large file is read */
    tm_backend_params bp = {.n_threads = p->n_threads};
    tern_status st = tm_backend_create(p->device, &bp, &m->be);
    if (st) {
        tern_model_free(m);
        return st;
    }
    m->be->m = m;
    const bool cuda = tm_be_device(m->be);
    if (stat(path, &sb) != 0) {
        st = tern_fail(TERN_ERR_IO, "%s: cannot open (no such file or directory)", path);
    } else if (S_ISDIR(sb.st_mode)) {
        st = tm_load_mlx(m, path);
    } else {
        st = load_gguf(m, path);
    }
    if (!st && cuda) st = upload_model(m);
    if (!st && p->repack && !cuda) {
        /* decode-layout copies; UNSUPPORTED = no faster layout on this CPU */
        int cap = m->hp.n_layer * 10 + 1;
        tern_qmat **file = malloc((size_t)cap * sizeof *file), **fast = malloc((size_t)cap * sizeof *fast);
        if (!file || !fast) st = tern_fail(TERN_ERR_NOMEM, "out of memory");
        int n = file && fast ? model_mats(m, file, fast, cap) : 0;
        for (int i = 0; i < n && !st; i++) {
            if (!tern_dtype_is_packed_ternary(file[i]->type)) continue;
            tern_status rs = tern_qmat_repack(file[i], fast[i]);
            if (rs == TERN_ERR_UNSUPPORTED) {
                memset(fast[i], 0, sizeof *fast[i]);
                continue;
            }
            if (rs) {
                memset(fast[i], 0, sizeof *fast[i]);
                st = tern_fail_prefix(rs, "%s: repacking", path);
                break;
            }
            m->repacked = true;
            m->info.alloc_bytes += ((uint64_t)fast[i]->n + 15) / 16 * 16 * fast[i]->row_bytes;
        }
        free(file);
        free(fast);
        if (!st) tern_clear_error();
    }
    if (st) {
        tern_model_free(m);
        return st;
    }
    tm_fill_info(m);
    m->info.device = m->be->vt->name;
    m->info.device_name = cuda ? tm_backend_cuda_device() : "";
    m->progress = NULL;
    *out = m;
    return TERN_OK;
}
