/*
 * safetensors.c - safetensors reader (mmap, zero-copy, validated) and writer.
 * Format and rules: see safetensors.h. The JSON header is parsed with cJSON.
 * The writer emits what the reference library does: tensors contiguous in the
 * order added (the Rust/Python loaders require offsets without holes), header
 * padded with spaces to a multiple of 8.
 */
#include "formats/safetensors.h"
#include "formats/json_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)

static const struct { const char *name; uint32_t size; tern_dtype type; } g_st_dtypes[] = {
    {"F64", 8, TERN_DT_F64}, {"F32", 4, TERN_DT_F32}, {"F16", 2, TERN_DT_F16},
    {"BF16", 2, TERN_DT_BF16}, {"I64", 8, TERN_DT_COUNT}, {"I32", 4, TERN_DT_I32},
    {"I16", 2, TERN_DT_I16}, {"I8", 1, TERN_DT_I8}, {"U64", 8, TERN_DT_COUNT},
    {"U32", 4, TERN_DT_U32}, {"U16", 2, TERN_DT_COUNT}, {"U8", 1, TERN_DT_COUNT},
    {"BOOL", 1, TERN_DT_COUNT}, {"F8_E4M3", 1, TERN_DT_COUNT}, {"F8_E5M2", 1, TERN_DT_COUNT},
};

uint32_t tern_st_dtype_size(const char *dtype, tern_dtype *type) {
    for (size_t i = 0; i < sizeof g_st_dtypes / sizeof g_st_dtypes[0]; i++)
        if (dtype && !strcmp(dtype, g_st_dtypes[i].name)) {
            if (type) *type = g_st_dtypes[i].type;
            return g_st_dtypes[i].size;
        }
    if (type) *type = TERN_DT_COUNT;
    return 0;
}

/* ------------------------------------------------------------ index */
typedef struct stidx { uint32_t *slots; size_t cap; bool owns_map; } stidx;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (uint8_t)*s; h *= 1099511628211ull; }
    return h;
}

const tern_st_tensor *tern_st_find(const tern_st *st, const char *name) {
    if (!st || !st->index || !name) return NULL;
    const stidx *ix = st->index;
    if (!ix->slots) return NULL;
    size_t h = (size_t)fnv1a(name) & (ix->cap - 1);
    while (ix->slots[h]) {
        const tern_st_tensor *t = &st->tensors[ix->slots[h] - 1];
        if (!strcmp(t->name, name)) return t;
        h = (h + 1) & (ix->cap - 1);
    }
    return NULL;
}

const char *tern_st_meta(const tern_st *st, const char *key) {
    if (!st) return NULL;
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_vals[i];
    return NULL;
}

void tern_st_close(tern_st *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].name) tern_free(st->tensors[i].name, strlen(st->tensors[i].name) + 1);
    tern_free(st->tensors, st->n_tensors * sizeof *st->tensors);
    for (size_t i = 0; i < st->n_meta; i++) {
        if (st->meta_keys[i]) tern_free(st->meta_keys[i], strlen(st->meta_keys[i]) + 1);
        if (st->meta_vals[i]) tern_free(st->meta_vals[i], strlen(st->meta_vals[i]) + 1);
    }
    tern_free(st->meta_keys, st->n_meta * sizeof *st->meta_keys);
    tern_free(st->meta_vals, st->n_meta * sizeof *st->meta_vals);
    stidx *ix = st->index;
    bool owns = true;
    if (ix) {
        owns = ix->owns_map;
        tern_free(ix->slots, ix->cap * sizeof *ix->slots);
        tern_free(ix, sizeof *ix);
    }
    if (owns) tern_map_close(&st->map);
    else free(st->map.path);
    tern_free(st, sizeof *st);
}

typedef struct ord_ent { uint64_t b, e; uint32_t i; } ord_ent;
static int ord_cmp(const void *a, const void *b) {
    const ord_ent *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b ? 1 : (x->e < y->e ? -1 : x->e > y->e);
}

static tern_status parse_tensor(tern_st *st, const char *src, const cJSON *e, tern_st_tensor *t, uint64_t buf_size) {
    if (!cJSON_IsObject(e))
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", src, t->name);
    char what[64];
    const char *dt;
    tern_status s;
    const cJSON *shape, *offs;
    if ((s = tern_json_req_str(e, "dtype", src, &dt)) || (s = tern_json_req_arr(e, "shape", src, &shape)) ||
        (s = tern_json_req_arr(e, "data_offsets", src, &offs)))
        return tern_fail_prefix(s, "tensor '%s'", t->name);
    t->elem_size = tern_st_dtype_size(dt, &t->type);
    if (!t->elem_size)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': unknown dtype \"%.16s\"", src, t->name, dt);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt);
    int nd = cJSON_GetArraySize(shape);
    if (nd > TERN_ST_MAX_DIMS)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': %d dims (max %d)", src, t->name, nd, TERN_ST_MAX_DIMS);
    t->n_dims = (uint32_t)nd;
    for (int d = 0; d < TERN_ST_MAX_DIMS; d++) t->shape[d] = 1;
    uint64_t n = 1;
    int d = 0;
    for (const cJSON *v = shape->child; v; v = v->next, d++) {
        int64_t x;
        snprintf(what, sizeof what, "shape[%d]", d);
        if ((s = tern_json_as_i64(v, 0, INT64_MAX, src, what, &x))) return tern_fail_prefix(s, "tensor '%s'", t->name);
        t->shape[d] = (uint64_t)x;
        if (!tern_mul64_ok(n, (uint64_t)x, &n))
            return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': element count overflows", src, t->name);
    }
    t->n_elems = n;
    uint64_t nb;
    if (!tern_mul64_ok(n, t->elem_size, &nb))
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': byte size overflows", src, t->name);
    if (cJSON_GetArraySize(offs) != 2)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': data_offsets must be [begin, end]", src, t->name);
    int64_t b, en;
    if ((s = tern_json_as_i64(offs->child, 0, INT64_MAX, src, "data_offsets[0]", &b)) ||
        (s = tern_json_as_i64(offs->child->next, 0, INT64_MAX, src, "data_offsets[1]", &en)))
        return tern_fail_prefix(s, "tensor '%s'", t->name);
    if (b > en || (uint64_t)en > buf_size)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] outside the %llu-byte buffer",
                         src, t->name, (long long)b, (long long)en, (unsigned long long)buf_size);
    if ((uint64_t)(en - b) != nb)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': data_offsets span %lld bytes but %s shape needs %llu",
                         src, t->name, (long long)(en - b), t->dtype, (unsigned long long)nb);
    t->begin = (uint64_t)b;
    t->nbytes = nb;
    return TERN_OK;
}

static tern_status parse(tern_st *st, const char *src) {
    size_t size = st->map.size;
    if (size < 8) return tern_fail(TERN_ERR_FORMAT, "%s: %zu bytes is too small for a safetensors file", src, size);
    uint64_t n = tern_rd64(st->map.data);
    if (n > size - 8)
        return tern_fail(TERN_ERR_FORMAT, "%s: header length %llu at offset 0 exceeds the file (%zu bytes)", src,
                         (unsigned long long)n, size);
    if (n > ST_MAX_HEADER)
        return tern_fail(TERN_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", src,
                         (unsigned long long)n, ST_MAX_HEADER);
    if (n < 2 || st->map.data[8] != '{')
        return tern_fail(TERN_ERR_FORMAT, "%s: header at offset 8 is not a JSON object", src);
    st->header_len = n;
    st->data_offset = 8 + n;
    uint64_t buf_size = size - st->data_offset;
    cJSON *j = NULL;
    tern_status s = tern_json_parse((const char *)st->map.data + 8, (size_t)n, src, &j);
    if (s) return s;
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); return tern_fail(TERN_ERR_FORMAT, "%s: header is not a JSON object", src); }
    size_t nt = 0;
    const cJSON *meta = NULL;
    for (const cJSON *e = j->child; e; e = e->next) {
        if (e->string && !strcmp(e->string, "__metadata__")) {
            if (meta) { cJSON_Delete(j); return tern_fail(TERN_ERR_FORMAT, "%s: duplicate __metadata__", src); }
            meta = e;
        } else nt++;
    }
    stidx *ix = st->index;
    st->tensors = tern_calloc(nt, sizeof *st->tensors);
    if (st->tensors) st->n_tensors = nt;
    size_t cap = 16;
    while (cap < nt * 2 + 1) cap <<= 1;
    ix->slots = tern_calloc(cap, sizeof *ix->slots);
    if (ix->slots) ix->cap = cap;
    if (!st->tensors || !ix->slots) { cJSON_Delete(j); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src); }
    size_t i = 0;
    for (const cJSON *e = j->child; e && !s; e = e->next) {
        if (e == meta) continue;
        tern_st_tensor *t = &st->tensors[i];
        if (!e->string || !*e->string) { s = tern_fail(TERN_ERR_FORMAT, "%s: tensor with an empty name", src); break; }
        t->name = tern_strdup(e->string);
        if (!t->name) { s = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src); break; }
        size_t h = (size_t)fnv1a(t->name) & (ix->cap - 1);
        while (ix->slots[h]) {
            if (!strcmp(st->tensors[ix->slots[h] - 1].name, t->name)) {
                s = tern_fail(TERN_ERR_FORMAT, "%s: duplicate tensor name '%s'", src, t->name);
                break;
            }
            h = (h + 1) & (ix->cap - 1);
        }
        if (s) break;
        ix->slots[h] = (uint32_t)i + 1;
        s = parse_tensor(st, src, e, t, buf_size);
        i++;
    }
    if (!s && meta) {
        if (!cJSON_IsObject(meta)) s = tern_fail(TERN_ERR_FORMAT, "%s: __metadata__ is not an object", src);
        size_t nm = 0;
        for (const cJSON *e = meta->child; e && !s; e = e->next) {
            if (!cJSON_IsString(e) || !e->valuestring)
                s = tern_fail(TERN_ERR_FORMAT, "%s: __metadata__ key '%s' is not a string", src, e->string ? e->string : "");
            nm++;
        }
        if (!s) {
            st->meta_keys = tern_calloc(nm, sizeof(char *));
            st->meta_vals = tern_calloc(nm, sizeof(char *));
            if (!st->meta_keys || !st->meta_vals) {
                tern_free(st->meta_keys, nm * sizeof(char *));
                tern_free(st->meta_vals, nm * sizeof(char *));
                st->meta_keys = st->meta_vals = NULL;
                s = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
            } else {
                st->n_meta = nm;
                size_t k = 0;
                for (const cJSON *e = meta->child; e; e = e->next, k++) {
                    st->meta_keys[k] = tern_strdup(e->string ? e->string : "");
                    st->meta_vals[k] = tern_strdup(e->valuestring);
                    if (!st->meta_keys[k] || !st->meta_vals[k]) { s = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src); break; }
                }
            }
        }
    }
    cJSON_Delete(j);
    if (s) return s;
    /* overlaps */
    if (nt) {
        ord_ent *o = tern_malloc(nt * sizeof *o);
        if (!o) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", src);
        size_t m = 0;
        for (size_t k = 0; k < nt; k++)
            if (st->tensors[k].nbytes) { o[m].b = st->tensors[k].begin; o[m].e = st->tensors[k].begin + st->tensors[k].nbytes; o[m].i = (uint32_t)k; m++; }
        qsort(o, m, sizeof *o, ord_cmp);
        for (size_t k = 1; k < m && !s; k++)
            if (o[k].b < o[k - 1].e)
                s = tern_fail(TERN_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (bytes %llu..%llu and %llu..%llu)", src,
                              st->tensors[o[k - 1].i].name, st->tensors[o[k].i].name, (unsigned long long)o[k - 1].b,
                              (unsigned long long)o[k - 1].e, (unsigned long long)o[k].b, (unsigned long long)o[k].e);
        tern_free(o, nt * sizeof *o);
        if (s) return s;
    }
    for (size_t k = 0; k < nt; k++) st->tensors[k].data = st->map.data + st->data_offset + st->tensors[k].begin;
    return TERN_OK;
}

/* Open over path's mapping (mapped) or over the caller's buffer (data, size). */
static tern_status open_any(const char *path, bool mapped, const void *data, size_t size, tern_st **out) {
    tern_st *st = tern_calloc(1, sizeof *st);
    stidx *ix = tern_calloc(1, sizeof *ix);
    if (!st || !ix) { tern_free(st, sizeof *st); tern_free(ix, sizeof *ix); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
    st->index = ix;
    st->map.fd = -1;
    tern_status s;
    if (mapped) {
        ix->owns_map = true;
        s = tern_map_open(path, &st->map);
    } else {
        st->map.data = data;
        st->map.size = data ? size : 0;
        st->map.path = strdup(path);
        s = TERN_OK;
    }
    if (!s) s = parse(st, path);
    if (s) { tern_st_close(st); return s; }
    *out = st;
    return TERN_OK;
}

tern_status tern_st_open(const char *path, tern_st **out) {
    if (!path || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_st_open: NULL argument");
    *out = NULL;
    return open_any(path, true, NULL, 0, out);
}

tern_status tern_st_open_mem(const void *data, size_t size, const char *name, tern_st **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_st_open_mem: NULL argument");
    *out = NULL;
    return open_any(name ? name : "<memory>", false, data, size, out);
}

tern_status tern_st_expect(const tern_st *st, const tern_st_tensor *t, const char *dtype, uint32_t n_dims,
                           const uint64_t *shape) {
    const char *src = st && st->map.path ? st->map.path : "<safetensors>";
    if (!t) return tern_fail(TERN_ERR_FORMAT, "%s: tensor missing", src);
    bool ok = !strcmp(t->dtype, dtype) && t->n_dims == n_dims;
    for (uint32_t d = 0; ok && d < n_dims; d++) ok = t->shape[d] == shape[d];
    if (ok) return TERN_OK;
    char want[160] = "", have[160] = "";
    size_t a = 0, b = 0;
    for (uint32_t d = 0; d < n_dims && a < sizeof want - 24; d++)
        a += snprintf(want + a, sizeof want - a, "%s%llu", d ? ", " : "", (unsigned long long)shape[d]);
    for (uint32_t d = 0; d < t->n_dims && b < sizeof have - 24; d++)
        b += snprintf(have + b, sizeof have - b, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    return tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s' is %s [%s], expected %s [%s]", src, t->name, t->dtype, have,
                     dtype, want);
}

/* ------------------------------------------------------------ writer */

typedef struct stw_t {
    char *name;
    char dtype[8];
    uint32_t n_dims;
    uint64_t shape[TERN_ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data;
    tern_st_fill_fn fill;
    void *user;
} stw_t;

struct tern_st_writer {
    stw_t *t;
    size_t n, cap;
    cJSON *meta;
};

tern_status tern_st_writer_new(tern_st_writer **out) {
    *out = tern_calloc(1, sizeof **out);
    if (!*out) return tern_fail(TERN_ERR_NOMEM, "safetensors writer: out of memory");
    return TERN_OK;
}

void tern_st_writer_free(tern_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) tern_free(w->t[i].name, strlen(w->t[i].name) + 1);
    tern_free(w->t, w->cap * sizeof *w->t);
    cJSON_Delete(w->meta);
    tern_free(w, sizeof *w);
}

tern_status tern_st_w_set_meta(tern_st_writer *w, const char *key, const char *value) {
    if (!w->meta && !(w->meta = cJSON_CreateObject())) return tern_fail(TERN_ERR_NOMEM, "safetensors writer: out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(w->meta, key);
    if (!cJSON_AddStringToObject(w->meta, key, value)) return tern_fail(TERN_ERR_NOMEM, "safetensors writer: out of memory");
    return TERN_OK;
}

tern_status tern_st_w_add(tern_st_writer *w, const char *name, const char *dtype, uint32_t n_dims,
                          const uint64_t *shape, const void *data, tern_st_fill_fn fill, void *user) {
    if (!name || !*name || !strcmp(name, "__metadata__"))
        return tern_fail(TERN_ERR_INVALID_ARG, "safetensors writer: bad tensor name '%s'", name ? name : "");
    uint32_t es = tern_st_dtype_size(dtype, NULL);
    if (!es) return tern_fail(TERN_ERR_INVALID_ARG, "safetensors writer: tensor '%s': unknown dtype '%s'", name, dtype);
    if (n_dims > TERN_ST_MAX_DIMS) return tern_fail(TERN_ERR_INVALID_ARG, "safetensors writer: tensor '%s': too many dims", name);
    if (!data && !fill) return tern_fail(TERN_ERR_INVALID_ARG, "safetensors writer: tensor '%s': no data", name);
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name)) return tern_fail(TERN_ERR_INVALID_ARG, "safetensors writer: duplicate tensor '%s'", name);
    stw_t t = {0};
    uint64_t nb = es;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.shape[d] = shape[d];
        if (shape[d] > (1ull << 53) || !tern_mul64_ok(nb, shape[d], &nb))
            return tern_fail(TERN_ERR_INVALID_ARG, "safetensors writer: tensor '%s': size overflows", name);
    }
    t.n_dims = n_dims;
    t.nbytes = nb;
    snprintf(t.dtype, sizeof t.dtype, "%s", dtype);
    t.data = data;
    t.fill = fill;
    t.user = user;
    if (!tern_grow(&w->t, &w->cap, w->n, sizeof *w->t, 64)) return tern_fail(TERN_ERR_NOMEM, "safetensors writer: out of memory");
    if (!(t.name = tern_strdup(name))) return tern_fail(TERN_ERR_NOMEM, "safetensors writer: out of memory");
    w->t[w->n++] = t;
    return TERN_OK;
}

tern_status tern_st_w_write(tern_st_writer *w, const char *path, tern_progress_fn progress, void *puser) {
    cJSON *h = cJSON_CreateObject();
    if (!h) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path);
    bool oom = false;
    if (w->meta) {
        cJSON *m = cJSON_Duplicate(w->meta, true);
        if (!m || !cJSON_AddItemToObject(h, "__metadata__", m)) oom = true;
    }
    uint64_t off = 0, total = 0;
    for (size_t i = 0; i < w->n && !oom; i++) {
        const stw_t *t = &w->t[i];
        cJSON *e = cJSON_CreateObject();
        cJSON *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        if (!e || !shape || !offs) { cJSON_Delete(e); cJSON_Delete(shape); cJSON_Delete(offs); oom = true; break; }
        cJSON_AddStringToObject(e, "dtype", t->dtype);
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToObject(e, "shape", shape);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + t->nbytes)));
        cJSON_AddItemToObject(e, "data_offsets", offs);
        cJSON_AddItemToObject(h, t->name, e);
        off += t->nbytes;
        total += t->nbytes;
    }
    char *js = oom ? NULL : cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!js) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path);
    size_t jl = strlen(js);
    uint64_t hl = (jl + 7) / 8 * 8;
    size_t tl = strlen(path) + 5;
    char *tmp = malloc(tl);
    if (!tmp) { free(js); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
    snprintf(tmp, tl, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        tern_status s = tern_fail(TERN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(js); free(tmp);
        return s;
    }
    tern_status s = TERN_OK;
    bool ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(js, 1, jl, f) == jl;
    for (uint64_t k = jl; ok && k < hl; k++) ok = fputc(' ', f) != EOF;
    free(js);
    if (!ok) s = tern_fail(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    uint64_t done = 0;
    for (size_t i = 0; i < w->n && !s; i++) {
        const stw_t *t = &w->t[i];
        if (t->data) {
            if (t->nbytes && fwrite(t->data, 1, t->nbytes, f) != t->nbytes)
                s = tern_fail(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        } else {
            void *b = tern_malloc(t->nbytes ? t->nbytes : 1);
            if (!b) { s = tern_fail(TERN_ERR_NOMEM, "%s: tensor '%s': out of memory", path, t->name); break; }
            s = t->fill(b, t->nbytes, t->user);
            if (s) tern_fail_prefix(s, "%s: tensor '%s'", path, t->name);
            else if (t->nbytes && fwrite(b, 1, t->nbytes, f) != t->nbytes)
                s = tern_fail(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
            tern_free(b, t->nbytes ? t->nbytes : 1);
        }
        done += t->nbytes;
        if (!s && progress && !progress(done, total, puser)) s = tern_fail(TERN_ERR_CANCELLED, "%s: cancelled", path);
    }
    if (fclose(f) != 0 && !s) s = tern_fail(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (!s && rename(tmp, path) != 0) s = tern_fail(TERN_ERR_IO, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
    if (s) unlink(tmp);
    free(tmp);
    return s;
}
