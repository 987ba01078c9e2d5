/*
 * hadamard.c - parse and validate the PrismML Hadamard contract (hadamard.h)
 * from GGUF `prism.hadamard.*` keys or hadamard.json, cross-check it against a
 * file's tensors, and write it back (GGUF keys, or JSON in the pack's own
 * layout: Python json.dumps(indent=1), no trailing newline).
 */
#include "formats/hadamard.h"
#include "formats/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PFX "prism.hadamard."

/* ------------------------------------------------------------ name set */
typedef struct hidx { uint32_t *slots; size_t cap; } hidx; /* value: (i+1) for weights, (i+1)|1<<31 for inverse */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (uint8_t)*s; h *= 1099511628211ull; }
    return h;
}
static const char *slot_name(const tern_hadamard_meta *h, uint32_t v) {
    uint32_t i = (v & 0x7fffffffu) - 1;
    return (v >> 31) ? h->inverse_names[i] : h->weight_names[i];
}
/* 0 when absent, else the slot value. */
static uint32_t set_find(const tern_hadamard_meta *h, const char *name) {
    const hidx *ix = h->index;
    if (!ix || !name) return 0;
    size_t k = (size_t)fnv1a(name) & (ix->cap - 1);
    while (ix->slots[k]) {
        if (!strcmp(slot_name(h, ix->slots[k]), name)) return ix->slots[k];
        k = (k + 1) & (ix->cap - 1);
    }
    return 0;
}

void tern_hadamard_free(tern_hadamard_meta *h) {
    if (!h) return;
    if (h->signs)
        for (uint32_t i = 0; i < h->n_widths; i++)
            if (h->signs[i]) tern_free(h->signs[i], (size_t)h->widths[i] * sizeof(float));
    tern_free(h->signs, h->n_widths * sizeof *h->signs);
    tern_free(h->widths, h->n_widths * sizeof *h->widths);
    for (uint32_t i = 0; h->weight_names && i < h->n_weights; i++)
        if (h->weight_names[i]) tern_free(h->weight_names[i], strlen(h->weight_names[i]) + 1);
    tern_free(h->weight_names, h->n_weights * sizeof(char *));
    for (uint32_t i = 0; h->inverse_names && i < h->n_inverse; i++)
        if (h->inverse_names[i]) tern_free(h->inverse_names[i], strlen(h->inverse_names[i]) + 1);
    tern_free(h->inverse_names, h->n_inverse * sizeof(char *));
    hidx *ix = h->index;
    if (ix) { tern_free(ix->slots, ix->cap * sizeof *ix->slots); tern_free(ix, sizeof *ix); }
    tern_free(h, sizeof *h);
}

/* Build the name set; refuses empty names, duplicates and a name in both lists. */
static tern_status build_index(tern_hadamard_meta *h, const char *src) {
    hidx *ix = tern_calloc(1, sizeof *ix);
    if (!ix) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    h->index = ix;
    size_t n = (size_t)h->n_weights + h->n_inverse;
    ix->cap = 16;
    while (ix->cap < n * 2 + 1) ix->cap <<= 1;
    ix->slots = tern_calloc(ix->cap, sizeof *ix->slots);
    if (!ix->slots) { ix->cap = 0; return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src); }
    for (size_t j = 0; j < n; j++) {
        bool inv = j >= h->n_weights;
        uint32_t i = (uint32_t)(inv ? j - h->n_weights : j);
        const char *name = inv ? h->inverse_names[i] : h->weight_names[i];
        const char *key = inv ? PFX "inverse_weight_names" : PFX "weight_names";
        if (!*name) return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' entry %u is empty", src, key, i);
        uint32_t prev = set_find(h, name);
        if (prev)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s': '%s' is listed twice%s", src, key, name,
                             ((prev >> 31) != (uint32_t)inv) ? " (in weight_names and inverse_weight_names)" : "");
        size_t k = (size_t)fnv1a(name) & (ix->cap - 1);
        while (ix->slots[k]) k = (k + 1) & (ix->cap - 1);
        ix->slots[k] = (i + 1) | (inv ? 1u << 31 : 0);
    }
    return TERN_OK;
}

/* Checks shared by both sources once scalars and widths are in place. */
static tern_status check_scalars(const tern_hadamard_meta *h, const char *src, const char *transform, const char *axis,
                                 const char *mode) {
    if (h->version != 1)
        return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "version' is %u, only version 1 is supported", src, h->version);
    if (h->block_size == 0 || (h->block_size & (h->block_size - 1)))
        return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "block_size' = %u is not a power of two", src, h->block_size);
    if (strcmp(transform, TERN_HADAMARD_TRANSFORM))
        return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "transform' is \"%.80s\", the only accepted value is \"%s\"",
                         src, transform, TERN_HADAMARD_TRANSFORM);
    if (strcmp(axis, TERN_HADAMARD_AXIS))
        return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "axis' is \"%.80s\", expected \"%s\"", src, axis, TERN_HADAMARD_AXIS);
    if (strcmp(mode, "explicit"))
        return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_mode' is \"%.80s\", expected \"explicit\"", src, mode);
    return TERN_OK;
}

/* Allocate widths/signs from n widths read by get_w; sign values via get_s. */
typedef tern_status (*get_int_fn)(const void *arr, uint64_t i, int64_t *v, const char *src, const char *key);

static tern_status fill_signs(tern_hadamard_meta *h, const char *src, const void *warr, uint64_t nw, get_int_fn get_w,
                              const void *sarr, uint64_t ns, get_int_fn get_s) {
    if (nw == 0) return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_widths' is empty", src);
    if (nw > 4096) return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_widths' has %llu entries (max 4096)", src, (unsigned long long)nw);
    h->widths = tern_calloc(nw, sizeof *h->widths);
    h->signs = tern_calloc(nw, sizeof *h->signs);
    if (!h->widths || !h->signs) {
        tern_free(h->widths, nw * sizeof *h->widths);
        tern_free(h->signs, nw * sizeof *h->signs);
        h->widths = NULL;
        h->signs = NULL;
        return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    }
    h->n_widths = (uint32_t)nw;
    uint64_t sum = 0;
    tern_status st;
    for (uint64_t i = 0; i < nw; i++) {
        int64_t w;
        if ((st = get_w(warr, i, &w, src, PFX "sign_widths"))) return st;
        if (w <= 0 || w > (1 << 30))
            return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_widths' entry %llu = %lld is out of range", src,
                             (unsigned long long)i, (long long)w);
        if (w % h->block_size)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_widths' entry %llu = %lld is not a multiple of "
                             "block_size %u", src, (unsigned long long)i, (long long)w, h->block_size);
        for (uint64_t j = 0; j < i; j++)
            if (h->widths[j] == (uint32_t)w)
                return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_widths' lists width %lld twice", src, (long long)w);
        h->widths[i] = (uint32_t)w;
        sum += (uint64_t)w;
    }
    if (sum != ns)
        return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_values' has %llu entries but sign_widths sum to %llu",
                         src, (unsigned long long)ns, (unsigned long long)sum);
    uint64_t at = 0;
    for (uint32_t i = 0; i < nw; i++) {
        h->signs[i] = tern_malloc((size_t)h->widths[i] * sizeof(float));
        if (!h->signs[i]) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
        for (uint32_t k = 0; k < h->widths[i]; k++, at++) {
            int64_t v;
            if ((st = get_s(sarr, at, &v, src, PFX "sign_values"))) return st;
            if (v != 1 && v != -1)
                return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_values' entry %llu = %lld is not +1 or -1", src,
                                 (unsigned long long)at, (long long)v);
            h->signs[i][k] = (float)v;
        }
    }
    return TERN_OK;
}

/* ------------------------------------------------------------ GGUF source */

static tern_status gguf_int(const void *arr, uint64_t i, int64_t *v, const char *src, const char *key) {
    const tern_gguf_kv *kv = arr;
    (void)src; (void)key;
    *v = tern_gguf_arr_i64(kv, i);
    return TERN_OK;
}

static tern_status gguf_arr(const tern_gguf *g, const char *key, bool strings, const tern_gguf_kv **out) {
    const tern_gguf_kv *kv = tern_gguf_find_kv(g, key);
    const char *src = g->map.path ? g->map.path : "<gguf>";
    if (!kv) return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is missing (the prism.hadamard contract is incomplete)", src, key);
    if (kv->type != TERN_GGUF_ARRAY)
        return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' has type %s, expected an array", src, key, tern_gguf_vtype_name(kv->type));
    bool is_str = kv->arr_type == TERN_GGUF_STRING;
    bool is_int = kv->arr_type <= TERN_GGUF_INT32 || kv->arr_type == TERN_GGUF_UINT64 || kv->arr_type == TERN_GGUF_INT64;
    if (strings ? !is_str : !is_int)
        return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is an array of %s, expected %s", src, key,
                         tern_gguf_vtype_name(kv->arr_type), strings ? "STRING" : "integers");
    *out = kv;
    return TERN_OK;
}

static tern_status copy_names(const tern_gguf_kv *kv, char ***out, uint32_t *n, const char *src) {
    if (kv->arr_n > (1u << 24)) return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' has too many entries", src, kv->key);
    *out = tern_calloc(kv->arr_n, sizeof(char *));
    if (!*out) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    *n = (uint32_t)kv->arr_n;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        if (memchr(kv->arr_str[i].ptr, 0, kv->arr_str[i].len))
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' entry %llu contains a NUL byte", src, kv->key, (unsigned long long)i);
        (*out)[i] = tern_strndup(kv->arr_str[i].ptr, kv->arr_str[i].len);
        if (!(*out)[i]) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    }
    return TERN_OK;
}

tern_status tern_hadamard_from_gguf(const tern_gguf *g, tern_hadamard_meta **out) {
    *out = NULL;
    const char *src = g->map.path ? g->map.path : "<gguf>";
    bool any = false;
    for (uint64_t i = 0; i < g->n_kv && !any; i++) any = !strncmp(g->kv[i].key, PFX, strlen(PFX));
    if (!any) return TERN_OK;
    tern_hadamard_meta *h = tern_calloc(1, sizeof *h);
    if (!h) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    tern_status st;
    uint64_t ver = 0, bs = 0;
    char *transform = NULL, *axis = NULL, *mode = NULL;
    const tern_gguf_kv *w, *s, *wn, *inv;
    if ((st = tern_gguf_get_u64(g, PFX "version", &ver))) goto fail;
    if ((st = tern_gguf_get_u64(g, PFX "block_size", &bs))) goto fail;
    if (ver > UINT32_MAX || bs > (1u << 30)) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "%s' is out of range", src, ver > UINT32_MAX ? "version" : "block_size");
        goto fail;
    }
    h->version = (uint32_t)ver;
    h->block_size = (uint32_t)bs;
    if ((st = tern_gguf_get_str(g, PFX "transform", &transform)) || (st = tern_gguf_get_str(g, PFX "axis", &axis)) ||
        (st = tern_gguf_get_str(g, PFX "sign_mode", &mode)))
        goto fail;
    if ((st = check_scalars(h, src, transform, axis, mode))) goto fail;
    if ((st = gguf_arr(g, PFX "sign_widths", false, &w)) || (st = gguf_arr(g, PFX "sign_values", false, &s)) ||
        (st = gguf_arr(g, PFX "weight_names", true, &wn)) || (st = gguf_arr(g, PFX "inverse_weight_names", true, &inv)))
        goto fail;
    if ((st = fill_signs(h, src, w, w->arr_n, gguf_int, s, s->arr_n, gguf_int))) goto fail;
    if ((st = copy_names(wn, &h->weight_names, &h->n_weights, src))) goto fail;
    if ((st = copy_names(inv, &h->inverse_names, &h->n_inverse, src))) goto fail;
    if ((st = tern_gguf_get_bool(g, PFX "gdn_v_grouped", &h->gdn_v_grouped))) goto fail;
    if ((st = build_index(h, src))) goto fail;
    free(transform); free(axis); free(mode);
    *out = h;
    return TERN_OK;
fail:
    free(transform); free(axis); free(mode);
    tern_hadamard_free(h);
    return st;
}

/* ------------------------------------------------------------ JSON source */

static const cJSON *jkey(const cJSON *j, const char *name, char *buf, size_t n) {
    snprintf(buf, n, PFX "%s", name);
    const cJSON *v = tern_json_get(j, buf);
    if (!v) { v = tern_json_get(j, name); if (v) snprintf(buf, n, "%s", name); }
    return v;
}

typedef struct jarr { const cJSON **items; uint64_t n; } jarr;

static tern_status json_int(const void *arr, uint64_t i, int64_t *v, const char *src, const char *key) {
    const jarr *a = arr;
    char what[128];
    snprintf(what, sizeof what, "key '%s' entry %llu", key, (unsigned long long)i);
    return tern_json_as_i64(a->items[i], INT32_MIN, INT32_MAX, src, what, v);
}

static tern_status json_array(const cJSON *j, const char *name, const char *src, jarr *out) {
    char key[96];
    const cJSON *a = jkey(j, name, key, sizeof key);
    if (!a) return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "%s' is missing", src, name);
    if (!cJSON_IsArray(a)) return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is not an array", src, key);
    uint64_t n = 0;
    for (const cJSON *e = a->child; e; e = e->next) n++;
    out->items = tern_malloc(n * sizeof *out->items);
    if (!out->items) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    out->n = 0;
    for (const cJSON *e = a->child; e; e = e->next) out->items[out->n++] = e;
    return TERN_OK;
}

static tern_status json_names(const cJSON *j, const char *name, const char *src, char ***out, uint32_t *n) {
    jarr a = {0};
    tern_status st = json_array(j, name, src, &a);
    if (st) return st;
    *out = tern_calloc(a.n, sizeof(char *));
    if (!*out) { tern_free(a.items, a.n * sizeof *a.items); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src); }
    *n = (uint32_t)a.n;
    for (uint64_t i = 0; i < a.n && !st; i++) {
        if (!cJSON_IsString(a.items[i]) || !a.items[i]->valuestring)
            st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "%s' entry %llu is not a string", src, name, (unsigned long long)i);
        else if (!((*out)[i] = tern_strdup(a.items[i]->valuestring)))
            st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
    }
    tern_free(a.items, a.n * sizeof *a.items);
    return st;
}

tern_status tern_hadamard_from_json(const char *text, size_t len, const char *src, tern_hadamard_meta **out) {
    *out = NULL;
    cJSON *j = NULL;
    tern_status st = tern_json_parse(text, len, src, &j);
    if (st) return st;
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); return tern_fail(TERN_ERR_FORMAT, "%s: not a JSON object", src); }
    tern_hadamard_meta *h = tern_calloc(1, sizeof *h);
    jarr w = {0}, s = {0};
    if (!h) { cJSON_Delete(j); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src); }
    char key[96];
    const cJSON *v;
    int64_t x;
    const char *str[3];
    static const char *snames[3] = {"transform", "axis", "sign_mode"};
    static const char *inames[2] = {"version", "block_size"};
    for (int i = 0; i < 2; i++) {
        if (!(v = jkey(j, inames[i], key, sizeof key))) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "%s' is missing", src, inames[i]);
            goto done;
        }
        char what[128];
        snprintf(what, sizeof what, "key '%s'", key);
        if ((st = tern_json_as_i64(v, 0, 1 << 30, src, what, &x))) goto done;
        if (i == 0) h->version = (uint32_t)x; else h->block_size = (uint32_t)x;
    }
    for (int i = 0; i < 3; i++) {
        if (!(v = jkey(j, snames[i], key, sizeof key))) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "%s' is missing", src, snames[i]);
            goto done;
        }
        if (!cJSON_IsString(v) || !v->valuestring) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is not a string", src, key);
            goto done;
        }
        str[i] = v->valuestring;
    }
    if ((st = check_scalars(h, src, str[0], str[1], str[2]))) goto done;
    if ((st = json_array(j, "sign_widths", src, &w)) || (st = json_array(j, "sign_values", src, &s))) goto done;
    if ((st = fill_signs(h, src, &w, w.n, json_int, &s, s.n, json_int))) goto done;
    if ((st = json_names(j, "weight_names", src, &h->weight_names, &h->n_weights))) goto done;
    if ((st = json_names(j, "inverse_weight_names", src, &h->inverse_names, &h->n_inverse))) goto done;
    if (!(v = jkey(j, "gdn_v_grouped", key, sizeof key))) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "gdn_v_grouped' is missing", src);
        goto done;
    }
    if (!cJSON_IsBool(v)) { st = tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is not a bool", src, key); goto done; }
    h->gdn_v_grouped = cJSON_IsTrue(v);
    st = build_index(h, src);
done:
    tern_free(w.items, w.n * sizeof *w.items);
    tern_free(s.items, s.n * sizeof *s.items);
    cJSON_Delete(j);
    if (st) { tern_hadamard_free(h); return st; }
    *out = h;
    return TERN_OK;
}

tern_status tern_hadamard_from_json_file(const char *path, tern_hadamard_meta **out) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    tern_status st = tern_read_file(path, 256u << 20, &buf, &len);
    if (st) return st;
    st = tern_hadamard_from_json(buf, len, path, out);
    free(buf);
    return st;
}

/* ------------------------------------------------------------ signs only */

/* The sign part alone (block_size, sign_widths, sign_values), from a GGUF's
 * prism.hadamard.* keys or a JSON object, with the same limits as the whole
 * contract (fill_signs). block_size defaults to 1024 when absent. */
tern_status tern_hadamard_signs_from_file(const char *path, tern_hadamard_meta **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tern_fail(TERN_ERR_IO, "%s: cannot open signs file", path);
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    tern_hadamard_meta *h = tern_calloc(1, sizeof *h);
    if (!h) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path);
    h->version = 1;
    tern_status st;
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        tern_gguf *g = NULL;
        if ((st = tern_gguf_open(path, &g))) { tern_hadamard_free(h); return st; }
        uint64_t bs = 1024;
        const tern_gguf_kv *w = NULL, *s = NULL;
        st = tern_gguf_get_u64_opt(g, PFX "block_size", &bs);
        if (!st && (bs == 0 || bs > (1u << 30) || (bs & (bs - 1))))
            st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "block_size' = %llu is not a power of two", path,
                           (unsigned long long)bs);
        h->block_size = (uint32_t)bs;
        if (!st && !(st = gguf_arr(g, PFX "sign_widths", false, &w)) && !(st = gguf_arr(g, PFX "sign_values", false, &s)))
            st = fill_signs(h, path, w, w->arr_n, gguf_int, s, s->arr_n, gguf_int);
        tern_gguf_close(g);
    } else {
        char *buf = NULL;
        size_t len = 0;
        cJSON *j = NULL;
        jarr w = {0}, s = {0};
        if ((st = tern_read_file(path, 256u << 20, &buf, &len))) { tern_hadamard_free(h); return st; }
        st = tern_json_parse(buf, len, path, &j);
        free(buf);
        if (!st && !cJSON_IsObject(j)) st = tern_fail(TERN_ERR_FORMAT, "%s: not a JSON object", path);
        int64_t bs = 1024;
        char key[96];
        const cJSON *b = st ? NULL : jkey(j, "block_size", key, sizeof key);
        if (b) {
            char what[128];
            snprintf(what, sizeof what, "key '%s'", key);
            st = tern_json_as_i64(b, 1, 1 << 30, path, what, &bs);
        }
        if (!st && (bs & (bs - 1)))
            st = tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "block_size' = %lld is not a power of two", path, (long long)bs);
        h->block_size = (uint32_t)bs;
        if (!st && !(st = json_array(j, "sign_widths", path, &w)) && !(st = json_array(j, "sign_values", path, &s)))
            st = fill_signs(h, path, &w, w.n, json_int, &s, s.n, json_int);
        tern_free(w.items, w.n * sizeof *w.items);
        tern_free(s.items, s.n * sizeof *s.items);
        cJSON_Delete(j);
    }
    if (!st) st = build_index(h, path);
    if (st) { tern_hadamard_free(h); return st; }
    *out = h;
    return TERN_OK;
}

/* ------------------------------------------------------------ queries */

const float *tern_hadamard_signs_for_width(const tern_hadamard_meta *h, uint64_t K) {
    if (!h) return NULL;
    for (uint32_t i = 0; i < h->n_widths; i++)
        if (h->widths[i] == K) return h->signs[i];
    return NULL;
}
bool tern_hadamard_is_folded(const tern_hadamard_meta *h, const char *name) {
    uint32_t v = h ? set_find(h, name) : 0;
    return v && !(v >> 31);
}
bool tern_hadamard_is_inverse(const tern_hadamard_meta *h, const char *name) {
    uint32_t v = h ? set_find(h, name) : 0;
    return v && (v >> 31);
}

tern_status tern_hadamard_validate(const tern_hadamard_meta *h, tern_hadamard_lookup_fn lookup, void *user, const char *src) {
    for (uint64_t j = 0; j < (uint64_t)h->n_weights + h->n_inverse; j++) {
        bool inv = j >= h->n_weights;
        const char *name = inv ? h->inverse_names[j - h->n_weights] : h->weight_names[j];
        const char *key = inv ? PFX "inverse_weight_names" : PFX "weight_names";
        uint64_t K = 0;
        bool tern = false;
        if (!lookup(name, &K, &tern, user))
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' lists '%s', which is not a tensor of the file", src, key, name);
        if (!tern)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' lists '%s', which is not ternary (a float matrix cannot carry "
                             "a folded rotation)", src, key, name);
        if (K % h->block_size)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "block_size' = %u does not divide K = %llu of '%s'", src,
                             h->block_size, (unsigned long long)K, name);
        if (!tern_hadamard_signs_for_width(h, K))
            return tern_fail(TERN_ERR_FORMAT, "%s: key '" PFX "sign_widths' has no sign vector for K = %llu (tensor '%s')",
                             src, (unsigned long long)K, name);
    }
    return TERN_OK;
}

static bool gguf_lookup(const char *name, uint64_t *K, bool *tern, void *user) {
    const tern_gguf_tensor *t = tern_gguf_find_tensor(user, name);
    if (!t) return false;
    *K = t->ne[0];
    *tern = tern_dtype_is_packed_ternary(t->type) && t->type != TERN_DT_Q1_0;
    return true;
}

tern_status tern_hadamard_validate_gguf(const tern_hadamard_meta *h, const tern_gguf *g) {
    return tern_hadamard_validate(h, gguf_lookup, (void *)g, g->map.path ? g->map.path : "<gguf>");
}

/* ------------------------------------------------------------ copy / write */

tern_status tern_hadamard_clone(const tern_hadamard_meta *h, char *(*rename)(const char *name, void *u), void *u,
                                tern_hadamard_meta **out) {
    *out = NULL;
    tern_hadamard_meta *c = tern_calloc(1, sizeof *c);
    if (!c) return tern_fail(TERN_ERR_NOMEM, "hadamard: out of memory");
    c->version = h->version;
    c->block_size = h->block_size;
    c->gdn_v_grouped = h->gdn_v_grouped;
    tern_status st = TERN_OK;
    c->widths = tern_calloc(h->n_widths, sizeof *c->widths);
    c->signs = tern_calloc(h->n_widths, sizeof *c->signs);
    c->weight_names = tern_calloc(h->n_weights, sizeof(char *));
    c->inverse_names = tern_calloc(h->n_inverse, sizeof(char *));
    if (!c->widths || !c->signs || !c->weight_names || !c->inverse_names) {
        tern_free(c->widths, h->n_widths * sizeof *c->widths);
        tern_free(c->signs, h->n_widths * sizeof *c->signs);
        tern_free(c->weight_names, h->n_weights * sizeof(char *));
        tern_free(c->inverse_names, h->n_inverse * sizeof(char *));
        tern_free(c, sizeof *c);
        return tern_fail(TERN_ERR_NOMEM, "hadamard: out of memory");
    }
    c->n_widths = h->n_widths;
    c->n_weights = h->n_weights;
    c->n_inverse = h->n_inverse;
    for (uint32_t i = 0; i < h->n_widths && !st; i++) {
        c->widths[i] = h->widths[i];
        c->signs[i] = tern_malloc((size_t)h->widths[i] * sizeof(float));
        if (!c->signs[i]) st = tern_fail(TERN_ERR_NOMEM, "hadamard: out of memory");
        else memcpy(c->signs[i], h->signs[i], (size_t)h->widths[i] * sizeof(float));
    }
    for (uint64_t j = 0; j < (uint64_t)h->n_weights + h->n_inverse && !st; j++) {
        bool inv = j >= h->n_weights;
        const char *name = inv ? h->inverse_names[j - h->n_weights] : h->weight_names[j];
        char *r = rename ? rename(name, u) : NULL;
        char *d = tern_strdup(r ? r : name);
        free(r);
        if (!d) { st = tern_fail(TERN_ERR_NOMEM, "hadamard: out of memory"); break; }
        if (inv) c->inverse_names[j - h->n_weights] = d; else c->weight_names[j] = d;
    }
    if (!st) st = build_index(c, "hadamard clone");
    if (st) { tern_hadamard_free(c); return st; }
    *out = c;
    return TERN_OK;
}

tern_status tern_hadamard_to_gguf(const tern_hadamard_meta *h, tern_gguf_writer *w) {
    tern_status st;
    if ((st = tern_gguf_w_set_u32(w, PFX "version", h->version)) ||
        (st = tern_gguf_w_set_u32(w, PFX "block_size", h->block_size)) ||
        (st = tern_gguf_w_set_str(w, PFX "transform", TERN_HADAMARD_TRANSFORM)) ||
        (st = tern_gguf_w_set_str(w, PFX "axis", TERN_HADAMARD_AXIS)) ||
        (st = tern_gguf_w_set_str(w, PFX "sign_mode", "explicit")))
        return st;
    uint64_t total = 0;
    for (uint32_t i = 0; i < h->n_widths; i++) total += h->widths[i];
    int32_t *v = tern_malloc((total + h->n_widths) * sizeof *v);
    if (!v) return tern_fail(TERN_ERR_NOMEM, "hadamard: out of memory");
    for (uint32_t i = 0; i < h->n_widths; i++) v[i] = (int32_t)h->widths[i];
    st = tern_gguf_w_set_arr(w, PFX "sign_widths", TERN_GGUF_INT32, v, h->n_widths);
    uint64_t at = 0;
    for (uint32_t i = 0; i < h->n_widths; i++)
        for (uint32_t k = 0; k < h->widths[i]; k++) v[at++] = h->signs[i][k] < 0 ? -1 : 1;
    if (!st) st = tern_gguf_w_set_arr(w, PFX "sign_values", TERN_GGUF_INT32, v, total);
    tern_free(v, (total + h->n_widths) * sizeof *v);
    if (!st) st = tern_gguf_w_set_arr_str(w, PFX "weight_names", (const char *const *)h->weight_names, NULL, h->n_weights);
    if (!st) st = tern_gguf_w_set_arr_str(w, PFX "inverse_weight_names", (const char *const *)h->inverse_names, NULL, h->n_inverse);
    if (!st) st = tern_gguf_w_set_bool(w, PFX "gdn_v_grouped", h->gdn_v_grouped);
    return st;
}

/* Growable text buffer (plain malloc: the result is handed to the caller). */
typedef struct tb { char *p; size_t n, cap; bool oom; } tb;
static void tb_put(tb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void tb_str(tb *b, const char *s) { tb_put(b, s, strlen(s)); }
/* JSON string escaped by cJSON (ASCII names print as json.dumps does). */
static void tb_jstr(tb *b, const char *s) {
    cJSON *tmp = cJSON_CreateString(s);
    char *e = tmp ? cJSON_PrintUnformatted(tmp) : NULL;
    if (e) tb_str(b, e); else b->oom = true;
    free(e);
    cJSON_Delete(tmp);
}

tern_status tern_hadamard_to_json(const tern_hadamard_meta *h, char **out) {
    tb b = {0};
    char num[64];
    tb_str(&b, "{\n \"" PFX "version\": ");
    snprintf(num, sizeof num, "%u", h->version);
    tb_str(&b, num);
    tb_str(&b, ",\n \"" PFX "block_size\": ");
    snprintf(num, sizeof num, "%u", h->block_size);
    tb_str(&b, num);
    tb_str(&b, ",\n \"" PFX "transform\": \"" TERN_HADAMARD_TRANSFORM "\",\n \"" PFX "axis\": \"" TERN_HADAMARD_AXIS
               "\",\n \"" PFX "sign_mode\": \"explicit\",\n \"" PFX "sign_widths\": [");
    for (uint32_t i = 0; i < h->n_widths; i++) {
        snprintf(num, sizeof num, "%s\n  %u", i ? "," : "", h->widths[i]);
        tb_str(&b, num);
    }
    tb_str(&b, h->n_widths ? "\n ],\n \"" PFX "sign_values\": [" : "],\n \"" PFX "sign_values\": [");
    bool first = true;
    for (uint32_t i = 0; i < h->n_widths; i++)
        for (uint32_t k = 0; k < h->widths[i]; k++) {
            tb_str(&b, first ? "\n  " : ",\n  ");
            tb_str(&b, h->signs[i][k] < 0 ? "-1" : "1");
            first = false;
        }
    tb_str(&b, first ? "],\n \"" PFX "weight_names\": [" : "\n ],\n \"" PFX "weight_names\": [");
    for (uint32_t i = 0; i < h->n_weights; i++) { tb_str(&b, i ? ",\n  " : "\n  "); tb_jstr(&b, h->weight_names[i]); }
    tb_str(&b, h->n_weights ? "\n ],\n \"" PFX "inverse_weight_names\": [" : "],\n \"" PFX "inverse_weight_names\": [");
    for (uint32_t i = 0; i < h->n_inverse; i++) { tb_str(&b, i ? ",\n  " : "\n  "); tb_jstr(&b, h->inverse_names[i]); }
    tb_str(&b, h->n_inverse ? "\n ],\n \"" PFX "gdn_v_grouped\": " : "],\n \"" PFX "gdn_v_grouped\": ");
    tb_str(&b, h->gdn_v_grouped ? "true\n}" : "false\n}");
    if (b.oom) { free(b.p); return tern_fail(TERN_ERR_NOMEM, "hadamard: out of memory"); }
    *out = b.p;
    return TERN_OK;
}
