/*
 * loader.c - tern_model_load and the public model API (info, free): picks the
 * device, opens the file by kind (GGUF: loader_gguf.c; MLX pack directory:
 * loader_mlx.c), starts the thread pool, uploads to a device back-end
 * (loader_upload.c) or makes the decode-layout copies (repack). The pieces are
 * listed in loader.h.
 */
#include "model/backend.h"
#include "model/loader.h"
#include "formats/codecs.h"
#include "formats/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void tm_drop_host_pages(tern_model *m, const void *p, size_t n) {
    const tern_gguf *g = m->gguf;
    if (!g || !g->map.data || !n) return;
    const uint8_t *lo = g->map.data, *hi = lo + g->map.size, *a = p, *b = a + n;
    if (a < lo || b > hi) return;
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t s0 = ((uintptr_t)a + ps - 1) & ~(ps - 1), s1 = (uintptr_t)b & ~(ps - 1);
    if (s1 > s0) (void)madvise((void *)s0, s1 - s0, MADV_DONTNEED);
}

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
    p->repack = true;
    p->cuda_graphs = true;
    p->cuda_pdl = true;
    p->cuda_gdn_chunk = true;
}

/* Every ternary matrix the forward pass multiplies by, with its fast_* slot. */
int tm_model_mats(tern_model *m, tern_qmat **file, tern_qmat **fast, int cap) {
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
        int n = file && fast ? tm_model_mats(m, file, fast, cap) : 0;
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
    tm_plan_free(&m->plan);
    free(m->layers);
    free(m->signs);
    free(m->path);
    free(m->name);
    free(m);
}

const tern_model_info *tern_model_get_info(const tern_model *m) { return m ? &m->info : NULL; }

int tern_model_batch_hint(const tern_model *m) {
    if (!m) return 1;
    return m->be->vt->batch_hint(m->be);
}

/* ------------------------------------------------------------- metadata */

static tern_status meta_kv(const tern_model *m, const char *key, const tern_gguf_kv **kv) {
    *kv = NULL;
    if (!m || !key) return tern_fail(TERN_ERR_INVALID_ARG, "tern_model_meta: NULL argument");
    if (m->gguf) *kv = tern_gguf_find_kv(m->gguf, key);
    if (!*kv) return tern_fail(TERN_ERR_NOT_FOUND, "%s: no metadata key '%s'", m->path ? m->path : "model", key);
    return TERN_OK;
}

tern_status tern_model_meta_f32(const tern_model *m, const char *key, float *out) {
    const tern_gguf_kv *kv;
    tern_status st = meta_kv(m, key, &kv);
    if (st) return st;
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_model_meta_f32: NULL argument");
    double d;
    int64_t i;
    if (kv->type == TERN_GGUF_FLOAT32 || kv->type == TERN_GGUF_FLOAT64) st = tern_gguf_get_f64(m->gguf, key, &d);
    else if (!(st = tern_gguf_get_i64(m->gguf, key, &i))) d = (double)i;
    else if (kv->type == TERN_GGUF_UINT64) { d = (double)kv->v.u64; st = TERN_OK; }
    if (!st) *out = (float)d;
    return st;
}

tern_status tern_model_meta_i64(const tern_model *m, const char *key, int64_t *out) {
    const tern_gguf_kv *kv;
    tern_status st = meta_kv(m, key, &kv);
    if (st) return st;
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_model_meta_i64: NULL argument");
    return tern_gguf_get_i64(m->gguf, key, out);
}

tern_status tern_model_meta_bool(const tern_model *m, const char *key, bool *out) {
    const tern_gguf_kv *kv;
    tern_status st = meta_kv(m, key, &kv);
    if (st) return st;
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_model_meta_bool: NULL argument");
    return tern_gguf_get_bool(m->gguf, key, out);
}

tern_status tern_model_meta_str(const tern_model *m, const char *key, tern_str *out) {
    const tern_gguf_kv *kv;
    tern_status st = meta_kv(m, key, &kv);
    if (st) return st;
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_model_meta_str: NULL argument");
    char *s = NULL;
    if ((st = tern_gguf_get_str(m->gguf, key, &s))) return st;
    st = tern_str_append(out, s, strlen(s));
    free(s);
    return st;
}

/* ------------------------------------------------------------- public load */

void tm_fill_info(tern_model *m) {
    bool tied = m->output.data == m->tok_embd.data;
    tm_hparams *hp = &m->hp;
    tern_model_info *in = &m->info;
    in->arch = tm_model_arch(m)->name;
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
    /* the file's bytes (row_bytes may be a device layout's stride by now, e.g. a
     * tiled strip on the GPU) */
    size_t erb = tern_codec_row_bytes(m->tok_embd.type, (uint64_t)m->tok_embd.k);
    uint64_t emb = (uint64_t)(erb ? erb : m->tok_embd.row_bytes) * (uint64_t)m->tok_embd.n;
    in->decode_bytes_per_token = in->weight_bytes - (tied ? 0 : emb);
    uint64_t emb_elems = (uint64_t)m->tok_embd.k * (uint64_t)m->tok_embd.n;
    in->matmul_weights = m->mat_elems - (tied || m->mat_elems < emb_elems ? 0 : emb_elems);
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
    tm_backend_params bp = {.n_threads = p->n_threads, .tp = p->tp, .cuda_prefill = p->cuda_prefill,
                            .cuda_graphs_off = !p->cuda_graphs, .cuda_pdl_off = !p->cuda_pdl,
                            .cuda_profile = p->cuda_profile, .cuda_matmul = p->cuda_matmul,
                            .cuda_persistent = p->cuda_persistent,
                            .gdn_bf16 = p->gdn_state == TERN_GDN_STATE_BF16,
                            .cuda_gdn_chunk = p->cuda_gdn_chunk, .batch_invariant = p->batch_invariant};
    tern_status st = tm_backend_create(p->device, &bp, &m->be);
    if (st) {
        tern_model_free(m);
        return st;
    }
    m->be->m = m;
    if (p->gdn_state != TERN_GDN_STATE_F32 && p->gdn_state != TERN_GDN_STATE_BF16) {
        tern_model_free(m);
        return tern_fail(TERN_ERR_INVALID_ARG, "gdn_state %d: TERN_GDN_STATE_F32 or TERN_GDN_STATE_BF16",
                         p->gdn_state);
    }
    m->gdn_bf16 = p->gdn_state == TERN_GDN_STATE_BF16; /* before any session: it sizes their states */
    const tm_backend_vt *vt = m->be->vt;
    if (stat(path, &sb) != 0) {
        st = tern_fail(TERN_ERR_IO, "%s: cannot open (no such file or directory)", path);
    } else if (S_ISDIR(sb.st_mode)) {
        st = tm_load_mlx(m, path);
    } else {
        st = tm_load_gguf(m, path);
    }
    if (!st && vt->device_memory) st = tm_upload_model(m);
    if (!st) st = tm_plan_build(m, &m->plan);
    if (!st && vt->model_loaded) st = vt->model_loaded(m->be, m);
    if (!st && p->repack && (vt->caps & TM_CAP_HOST_REPACK)) {
        /* decode-layout copies; UNSUPPORTED = no faster layout on this CPU */
        int cap = m->hp.n_layer * 10 + 1;
        tern_qmat **file = malloc((size_t)cap * sizeof *file), **fast = malloc((size_t)cap * sizeof *fast);
        if (!file || !fast) st = tern_fail(TERN_ERR_NOMEM, "out of memory");
        int n = file && fast ? tm_model_mats(m, file, fast, cap) : 0;
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
            /* the copy serves every product: the file's pages of this matrix go */
            tm_drop_host_pages(m, file[i]->data, file[i]->row_bytes * (size_t)file[i]->n);
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
    m->info.device_name = vt->device_name ? vt->device_name(m->be) : "";
    m->progress = NULL;
    *out = m;
    return TERN_OK;
}
