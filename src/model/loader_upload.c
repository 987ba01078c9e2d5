/*
 * loader_upload.c - with a device back-end, every tensor the forward pass reads
 * (weights in their packed file bytes, norm gains, conv weights, sign vectors)
 * is copied once to the back-end's memory and the model's pointers replaced.
 */
#include "model/backend.h"
#include "model/loader.h"

#include "formats/gguf.h"

#include <stdlib.h>

/* ------------------------------------------------------------- device upload */

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
    tm_drop_host_pages(m, *p, n);
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
tern_status tm_upload_model(tern_model *m) {
    const tm_hparams *hp = &m->hp;
    /* refuse a model that cannot fit before copying anything (the repacked layouts
     * take the same bytes as the file's; 64 MiB spare for the back-end's own buffers) */
    if (m->be->vt->device_memory && m->be->vt->mem_available) {
        const uint64_t avail = m->be->vt->mem_available(m->be), need = m->info.weight_bytes;
        if (avail && need + ((uint64_t)64 << 20) > avail)
            return tern_fail(TERN_ERR_NOMEM,
                             "%s: the weights need %.2f GiB of %s memory but only %.2f GiB is free "
                             "(a smaller model, another device, or --device cpu)",
                             m->path, need / 1073741824.0, m->be->vt->name, avail / 1073741824.0);
    }
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
