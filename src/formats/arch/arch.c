/*
 * arch.c - lookups over the architecture tables (arch.h): names of a role in
 * each format, name -> role, shapes from the hyperparameters. No tensor name is
 * spelled here; only the layer prefixes of the two namespaces.
 */
#include "formats/arch/arch.h"

#include <stdio.h>
#include <stdlib.h>

#define GGUF_LAYER "blk."
#define HF_LAYER "model.layers."

const tm_arch_desc *tm_arch_get(int id) {
    switch (id) {
    case TM_ARCH_QWEN35: return &tm_arch_qwen35;
    case TM_ARCH_QWEN3: return &tm_arch_qwen3;
    default: return NULL;
    }
}

const tm_arch_desc *tm_arch_by_name(const char *name) {
    for (int i = 0; name && i < TM_ARCH_COUNT; i++)
        if (!strcmp(tm_arch_get(i)->name, name)) return tm_arch_get(i);
    return NULL;
}

const tm_role *tm_arch_role(const tm_arch_desc *a, tm_role_id id) {
    for (int i = 0; i < a->n_roles; i++)
        if (a->roles[i]->id == id) return a->roles[i];
    return NULL;
}

int tm_arch_role_index(const tm_arch_desc *a, const tm_role *r) {
    for (int i = 0; i < a->n_roles; i++)
        if (a->roles[i] == r) return i;
    return -1;
}

bool tm_arch_layer_is_attn(const tm_arch_desc *a, int il, int interval) {
    return !a->hybrid || (interval > 0 && (il + 1) % interval == 0);
}

bool tm_role_in_layer(const tm_role *r, bool is_attn) {
    return r->lk == TM_LK_ALL || (r->lk == TM_LK_ATTN && is_attn) || (r->lk == TM_LK_GDN && !is_attn);
}

static bool fmt(char *buf, size_t n, const char *pfx, int il, const char *s, size_t drop) {
    size_t l = strlen(s);
    int w = pfx ? snprintf(buf, n, "%s%d.%.*s", pfx, il, (int)(l - drop), s)
                : snprintf(buf, n, "%.*s", (int)(l - drop), s);
    return w >= 0 && (size_t)w < n;
}

bool tm_role_gguf_name(const tm_role *r, int il, char *buf, size_t n) {
    return fmt(buf, n, r->lk == TM_LK_TOP ? NULL : GGUF_LAYER, il, r->gguf, 0);
}

bool tm_role_hf_name(const tm_role *r, int il, char *buf, size_t n) {
    return fmt(buf, n, r->lk == TM_LK_TOP ? NULL : HF_LAYER, il, r->hf, 0);
}

bool tm_role_mlx_module(const tm_role *r, int il, char *buf, size_t n) {
    size_t l = strlen(r->hf), drop = l > 7 && !strcmp(r->hf + l - 7, ".weight") ? 7 : 0;
    return fmt(buf, n, r->lk == TM_LK_TOP ? NULL : HF_LAYER, il, r->hf, drop);
}

/* "<pfx><digits>.<rest>": *il and the rest, or NULL. */
static const char *layer_rest(const char *name, const char *pfx, int *il) {
    size_t pl = strlen(pfx);
    if (strncmp(name, pfx, pl) || name[pl] < '0' || name[pl] > '9') return NULL;
    char *end;
    long L = strtol(name + pl, &end, 10);
    if (*end != '.' || L < 0 || L > 1 << 20) return NULL;
    *il = (int)L;
    return end + 1;
}

static const tm_role *find(const tm_arch_desc *a, const char *name, int *il, bool hf) {
    int L = 0;
    const char *rest = layer_rest(name, hf ? HF_LAYER : GGUF_LAYER, &L);
    for (int i = 0; i < a->n_roles; i++) {
        const tm_role *r = a->roles[i];
        const char *s = hf ? r->hf : r->gguf;
        if (r->lk == TM_LK_TOP ? !strcmp(name, s) : rest && !strcmp(rest, s)) {
            *il = r->lk == TM_LK_TOP ? 0 : L;
            return r;
        }
    }
    return NULL;
}

const tm_role *tm_arch_find_gguf(const tm_arch_desc *a, const char *name, int *il) { return find(a, name, il, false); }
const tm_role *tm_arch_find_hf(const tm_arch_desc *a, const char *name, int *il) { return find(a, name, il, true); }

bool tm_arch_hf_ignored(const tm_arch_desc *a, const char *hf) {
    for (const char *const *p = a->hf_ignored; p && *p; p++) {
        size_t l = strlen(*p);
        if (!strncmp(hf, *p, l)) return true;
        for (const char *s = strstr(hf, *p); s; s = strstr(s + 1, *p))
            if (s > hf && s[-1] == '.') return true;
    }
    return false;
}

int64_t tm_dim_value(tm_dim d, const tm_dims *x) {
    switch (d) {
    case TM_D_NONE: return 1;
    case TM_D_EMBD: return x->embd;
    case TM_D_FF: return x->ff;
    case TM_D_VOCAB: return x->vocab > 0 ? x->vocab : -1;
    case TM_D_HEAD_DIM: return x->head_dim;
    case TM_D_Q: return x->n_head * x->head_dim * (x->attn_gate ? 2 : 1);
    case TM_D_KV: return x->n_head_kv * x->head_dim;
    case TM_D_ATTN_OUT: return x->n_head * x->head_dim;
    case TM_D_GDN_C: return 2 * x->ssm_n_k * x->ssm_dk + x->ssm_n_v * x->ssm_dv;
    case TM_D_GDN_V: return x->ssm_n_v * x->ssm_dv;
    case TM_D_GDN_NV: return x->ssm_n_v;
    case TM_D_GDN_DV: return x->ssm_dv;
    case TM_D_CONV_K: return x->conv_k;
    }
    return -1;
}

bool tm_role_is_vector(const tm_role *r) { return r->n == TM_D_NONE; }

void tm_role_shape(const tm_role *r, const tm_dims *x, int64_t *k, int64_t *n) {
    *k = tm_dim_value(r->k, x);
    *n = tm_dim_value(r->n, x);
}
