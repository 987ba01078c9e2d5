/*
 * gguf.c - GGUF v3 reader: mmap, zero-copy, every byte validated before use.
 *
 * Speaks the GGUF container described in gguf.h (ggml's gguf.cpp is the
 * reference for the rules: magic, version, counts, power-of-two alignment,
 * offsets inside the data section). Tensor data is never copied: each
 * tern_gguf_tensor.data points into the read-only mapping.
 *
 * ggml type 42 (Q2_0) has two layouts in the wild under the same id (PrismML's
 * fork: 128 weights in 34 B; mainline ggml: 64 weights in 18 B). Nothing in the
 * metadata says which, so the layout is inferred from the tensor spans (the gap
 * to the next tensor's offset, or to the end of the file for the last one); all
 * Q2_0 tensors of a file must agree on one layout, otherwise the file is refused.
 *
 * The writer lives in gguf_write.c.
 */
#include "formats/gguf.h"

#include <stdio.h>
#include <stdlib.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* ------------------------------------------------------------ type tables */

bool tern_ggml_type_to_dtype(uint32_t ggml_type, tern_dtype *out) {
    switch (ggml_type) {
    case 0: *out = TERN_DT_F32; return true;
    case 1: *out = TERN_DT_F16; return true;
    case 8: *out = TERN_DT_Q8_0; return true;
    case 24: *out = TERN_DT_I8; return true;
    case 25: *out = TERN_DT_I16; return true;
    case 26: *out = TERN_DT_I32; return true;
    case 28: *out = TERN_DT_F64; return true;
    case 30: *out = TERN_DT_BF16; return true;
    case 41: *out = TERN_DT_Q1_0; return true;
    case 42: *out = TERN_DT_Q2_0; return true; /* variant resolved from spans */
    case 142: *out = TERN_DT_PQ2_0; return true;
    case 143: *out = TERN_DT_PTQ1_0; return true;
    default: return false;
    }
}

uint32_t tern_dtype_to_ggml(tern_dtype t) {
    switch (t) {
    case TERN_DT_F32: return 0;
    case TERN_DT_F16: return 1;
    case TERN_DT_Q8_0: return 8;
    case TERN_DT_I8: return 24;
    case TERN_DT_I16: return 25;
    case TERN_DT_I32: return 26;
    case TERN_DT_F64: return 28;
    case TERN_DT_BF16: return 30;
    case TERN_DT_Q1_0: return 41;
    case TERN_DT_Q2_0: return 42;
    case TERN_DT_Q2_0_G64: return 42;
    case TERN_DT_PQ2_0: return 142;
    case TERN_DT_PTQ1_0: return 143;
    default: return UINT32_MAX; /* U32 has no ggml id */
    }
}

const char *tern_gguf_vtype_name(tern_gguf_vtype t) {
    static const char *names[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32",
                                  "FLOAT32", "BOOL", "STRING", "ARRAY", "UINT64", "INT64",
                                  "FLOAT64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

size_t tern_gguf_vtype_size(uint32_t t) {
    switch (t) {
    case TERN_GGUF_UINT8: case TERN_GGUF_INT8: case TERN_GGUF_BOOL: return 1;
    case TERN_GGUF_UINT16: case TERN_GGUF_INT16: return 2;
    case TERN_GGUF_UINT32: case TERN_GGUF_INT32: case TERN_GGUF_FLOAT32: return 4;
    case TERN_GGUF_UINT64: case TERN_GGUF_INT64: case TERN_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}
static bool vtype_is_unsigned(uint32_t t) {
    return t == TERN_GGUF_UINT8 || t == TERN_GGUF_UINT16 || t == TERN_GGUF_UINT32 ||
           t == TERN_GGUF_UINT64;
}
static bool vtype_is_signed(uint32_t t) {
    return t == TERN_GGUF_INT8 || t == TERN_GGUF_INT16 || t == TERN_GGUF_INT32 ||
           t == TERN_GGUF_INT64;
}

/* ------------------------------------------------------------ name index
 * Open addressing over FNV-1a hashes; keys and tensor names in separate tables. */
typedef struct gidx {
    uint32_t *kv_slots, *t_slots; /* index+1, 0 = empty */
    size_t kv_cap, t_cap;
    bool owns_map;                /* false for tern_gguf_open_mem */
} gidx;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
    return h;
}
static size_t cap_for(uint64_t n) {
    size_t c = 16;
    while (c < n * 2 + 1) c <<= 1;
    return c;
}

/* ------------------------------------------------------------ the reader */

typedef struct rd {
    const uint8_t *p;
    size_t size, pos;
    const char *name;
} rd;

static tern_status rd_need(rd *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return tern_fail(TERN_ERR_FORMAT, "%s: truncated at offset %zu: %s needs %llu bytes, %zu left",
                         r->name, r->pos, what, (unsigned long long)n, r->size - r->pos);
    return TERN_OK;
}
static tern_status rd_u32(rd *r, uint32_t *v, const char *what) {
    tern_status st = rd_need(r, 4, what);
    if (st) return st;
    *v = tern_rd32(r->p + r->pos);
    r->pos += 4;
    return TERN_OK;
}
static tern_status rd_u64(rd *r, uint64_t *v, const char *what) {
    tern_status st = rd_need(r, 8, what);
    if (st) return st;
    *v = tern_rd64(r->p + r->pos);
    r->pos += 8;
    return TERN_OK;
}
static tern_status rd_str(rd *r, tern_gguf_str *s, const char *what) {
    uint64_t n;
    size_t at = r->pos;
    tern_status st = rd_u64(r, &n, what);
    if (st) return st;
    if (n > r->size - r->pos)
        return tern_fail(TERN_ERR_FORMAT, "%s: %s at offset %zu: string length %llu exceeds the file (%zu bytes left)",
                         r->name, what, at, (unsigned long long)n, r->size - r->pos);
    s->ptr = (const char *)r->p + r->pos;
    s->len = n;
    r->pos += n;
    return TERN_OK;
}

static void kv_free(tern_gguf_kv *kv) {
    if (kv->key) tern_free(kv->key, strlen(kv->key) + 1);
    if (kv->arr_str) tern_free(kv->arr_str, kv->arr_n * sizeof *kv->arr_str);
}

void tern_gguf_close(tern_gguf *g) {
    if (!g) return;
    gidx *ix = g->index;
    if (g->kv) {
        for (uint64_t i = 0; i < g->n_kv; i++) kv_free(&g->kv[i]);
        tern_free(g->kv, g->n_kv * sizeof *g->kv);
    }
    if (g->tensors) {
        for (uint64_t i = 0; i < g->n_tensors; i++)
            if (g->tensors[i].name) tern_free(g->tensors[i].name, strlen(g->tensors[i].name) + 1);
        tern_free(g->tensors, g->n_tensors * sizeof *g->tensors);
    }
    bool owns = true;
    if (ix) {
        owns = ix->owns_map;
        tern_free(ix->kv_slots, ix->kv_cap * sizeof *ix->kv_slots);
        tern_free(ix->t_slots, ix->t_cap * sizeof *ix->t_slots);
        tern_free(ix, sizeof *ix);
    }
    if (owns) tern_map_close(&g->map);
    else free(g->map.path);
    tern_free(g, sizeof *g);
}

/* Copy a name out of the file: refuse embedded NULs (they would make the
 * NUL-terminated copy lie) and absurd lengths. */
static tern_status dup_name(rd *r, const tern_gguf_str *s, size_t at, const char *what, char **out) {
    if (s->len == 0)
        return tern_fail(TERN_ERR_FORMAT, "%s: %s at offset %zu is empty", r->name, what, at);
    if (s->len > 65535)
        return tern_fail(TERN_ERR_FORMAT, "%s: %s at offset %zu is %llu bytes long (max 65535)",
                         r->name, what, at, (unsigned long long)s->len);
    if (memchr(s->ptr, 0, s->len))
        return tern_fail(TERN_ERR_FORMAT, "%s: %s at offset %zu contains a NUL byte", r->name, what, at);
    *out = tern_strndup(s->ptr, s->len);
    if (!*out) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", r->name);
    return TERN_OK;
}

static tern_status read_kv(rd *r, tern_gguf_kv *kv) {
    size_t at = r->pos;
    kv->file_offset = at;
    tern_gguf_str key;
    tern_status st = rd_str(r, &key, "metadata key");
    if (st) return st;
    if ((st = dup_name(r, &key, at, "metadata key", &kv->key))) return st;
    uint32_t t;
    if ((st = rd_u32(r, &t, "value type"))) return tern_fail_prefix(st, "key '%s'", kv->key);
    if (t > TERN_GGUF_FLOAT64)
        return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %zu: unknown value type %u",
                         r->name, kv->key, at, t);
    kv->type = (tern_gguf_vtype)t;
    if (t == TERN_GGUF_STRING) {
        if ((st = rd_str(r, &kv->v.str, "string value"))) return tern_fail_prefix(st, "key '%s'", kv->key);
        return TERN_OK;
    }
    if (t == TERN_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        if ((st = rd_u32(r, &et, "array type")) || (st = rd_u64(r, &n, "array count")))
            return tern_fail_prefix(st, "key '%s'", kv->key);
        if (et > TERN_GGUF_FLOAT64)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %zu: unknown array element type %u",
                             r->name, kv->key, at, et);
        if (et == TERN_GGUF_ARRAY)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %zu: nested arrays are not supported",
                             r->name, kv->key, at);
        kv->arr_type = (tern_gguf_vtype)et;
        kv->arr_n = n;
        if (et == TERN_GGUF_STRING) {
            /* each string needs at least its 8-byte length: bound n before allocating */
            if (n > (r->size - r->pos) / 8)
                return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %zu: string array count %llu exceeds the file",
                                 r->name, kv->key, at, (unsigned long long)n);
            kv->arr_str = tern_calloc(n, sizeof *kv->arr_str);
            if (!kv->arr_str) { kv->arr_n = 0; return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", r->name); }
            for (uint64_t i = 0; i < n; i++)
                if ((st = rd_str(r, &kv->arr_str[i], "array string")))
                    return tern_fail_prefix(st, "key '%s' element %llu", kv->key, (unsigned long long)i);
            return TERN_OK;
        }
        size_t es = tern_gguf_vtype_size(et);
        uint64_t bytes;
        if (!tern_mul64_ok(n, es, &bytes) || bytes > r->size - r->pos)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %zu: array of %llu %s exceeds the file",
                             r->name, kv->key, at, (unsigned long long)n, tern_gguf_vtype_name(et));
        kv->arr_data = r->p + r->pos;
        if (et == TERN_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (kv->arr_data[i] > 1)
                    return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' element %llu: bool value %u is not 0 or 1",
                                     r->name, kv->key, (unsigned long long)i, kv->arr_data[i]);
        r->pos += bytes;
        return TERN_OK;
    }
    size_t es = tern_gguf_vtype_size(t);
    if ((st = rd_need(r, es, "value"))) return tern_fail_prefix(st, "key '%s'", kv->key);
    const uint8_t *p = r->p + r->pos;
    switch (t) {
    case TERN_GGUF_UINT8: kv->v.u64 = p[0]; break;
    case TERN_GGUF_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case TERN_GGUF_BOOL:
        if (p[0] > 1)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %zu: bool value %u is not 0 or 1",
                             r->name, kv->key, at, p[0]);
        kv->v.u64 = p[0];
        break;
    case TERN_GGUF_UINT16: kv->v.u64 = tern_rd16(p); break;
    case TERN_GGUF_INT16: kv->v.i64 = (int16_t)tern_rd16(p); break;
    case TERN_GGUF_UINT32: kv->v.u64 = tern_rd32(p); break;
    case TERN_GGUF_INT32: kv->v.i64 = (int32_t)tern_rd32(p); break;
    case TERN_GGUF_UINT64: kv->v.u64 = tern_rd64(p); break;
    case TERN_GGUF_INT64: kv->v.i64 = (int64_t)tern_rd64(p); break;
    case TERN_GGUF_FLOAT32: { float f; memcpy(&f, p, 4); kv->v.f64 = f; break; }
    case TERN_GGUF_FLOAT64: { double d; memcpy(&d, p, 8); kv->v.f64 = d; break; }
    default: break;
    }
    r->pos += es;
    return TERN_OK;
}

/* Insert into an open-addressing table; returns the index of an existing entry
 * with the same name (duplicate) or -1 when inserted. */
static long idx_insert(uint32_t *slots, size_t cap, const char *name, uint32_t i,
                       const char *(*name_of)(const tern_gguf *, uint32_t), const tern_gguf *g) {
    size_t h = (size_t)fnv1a(name, strlen(name)) & (cap - 1);
    while (slots[h]) {
        if (!strcmp(name_of(g, slots[h] - 1), name)) return (long)(slots[h] - 1);
        h = (h + 1) & (cap - 1);
    }
    slots[h] = i + 1;
    return -1;
}
static const char *kv_name(const tern_gguf *g, uint32_t i) { return g->kv[i].key; }
static const char *t_name(const tern_gguf *g, uint32_t i) { return g->tensors[i].name; }

static long idx_find(const uint32_t *slots, size_t cap, const char *name,
                     const char *(*name_of)(const tern_gguf *, uint32_t), const tern_gguf *g) {
    if (!slots || !name) return -1;
    size_t h = (size_t)fnv1a(name, strlen(name)) & (cap - 1);
    while (slots[h]) {
        if (!strcmp(name_of(g, slots[h] - 1), name)) return (long)(slots[h] - 1);
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

const tern_gguf_kv *tern_gguf_find_kv(const tern_gguf *g, const char *key) {
    if (!g || !g->index) return NULL;
    const gidx *ix = g->index;
    long i = idx_find(ix->kv_slots, ix->kv_cap, key, kv_name, g);
    return i < 0 ? NULL : &g->kv[i];
}

const tern_gguf_tensor *tern_gguf_find_tensor(const tern_gguf *g, const char *name) {
    if (!g || !g->index) return NULL;
    const gidx *ix = g->index;
    long i = idx_find(ix->t_slots, ix->t_cap, name, t_name, g);
    return i < 0 ? NULL : &g->tensors[i];
}

static uint64_t tensor_bytes(const tern_gguf_tensor *t, tern_dtype dt, bool *ok) {
    size_t be = tern_dtype_block_elems(dt), bb = tern_dtype_block_bytes(dt);
    *ok = false;
    if (t->ne[0] % be) return 0;
    uint64_t row = t->ne[0] / be * bb, total = row;
    for (uint32_t d = 1; d < 4; d++)
        if (!tern_mul64_ok(total, t->ne[d], &total)) return 0;
    *ok = true;
    return total;
}

typedef struct span_ent { uint64_t off; uint32_t i; } span_ent;
static int span_cmp(const void *a, const void *b) {
    const span_ent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : (x->i < y->i ? -1 : x->i > y->i);
}

static uint64_t pad_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Does a tensor of `bytes` fit a span (the distance to the next tensor)? The
 * writer pads each tensor to the alignment, so span == pad_up(bytes). For the
 * last tensor the file may or may not carry the final padding. */
static bool span_fits(uint64_t bytes, uint64_t span, uint64_t align, bool last) {
    if (bytes > span) return false;
    if (last) return span - bytes < align || span == pad_up(bytes, align);
    return span == pad_up(bytes, align);
}

/* A table of n entries (zeroed, stored through arrp, count set) and its name index of
 * cap_for(n) slots. */
static tern_status alloc_indexed(const char *name, const char *what, uint64_t n, size_t elem, void *arrp,
                                 uint64_t *count, uint32_t **slots, size_t *cap) {
    void *arr = tern_calloc(n, elem);
    if (!arr) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory (%llu %s)", name, (unsigned long long)n, what);
    memcpy(arrp, &arr, sizeof arr);
    *count = n;
    *cap = cap_for(n);
    if (!(*slots = tern_calloc(*cap, sizeof **slots))) { *cap = 0; return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", name); }
    return TERN_OK;
}

static tern_status parse(tern_gguf *g, const char *name) {
    rd r = {g->map.data, g->map.size, 0, name};
    tern_status st;
    uint32_t magic;
    if (g->map.size < 24)
        return tern_fail(TERN_ERR_FORMAT, "%s: %zu bytes is too small for a GGUF header (24 bytes)", name, g->map.size);
    rd_u32(&r, &magic, "magic");
    if (magic != GGUF_MAGIC)
        return tern_fail(TERN_ERR_FORMAT, "%s: not a GGUF file (magic 0x%08x at offset 0, expected \"GGUF\")", name, magic);
    rd_u32(&r, &g->version, "version");
    if (g->version != 3)
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: GGUF version %u at offset 4 is not supported (only v3)", name, g->version);
    uint64_t nt, nkv;
    rd_u64(&r, &nt, "tensor count");
    rd_u64(&r, &nkv, "kv count");
    /* A kv needs >= 8 (key len) + 1 + 4 (type) + 1 bytes; a tensor info >= 8+1+4+8+4+8. */
    if (nkv > (r.size - r.pos) / 14)
        return tern_fail(TERN_ERR_FORMAT, "%s: kv count %llu at offset 16 cannot fit in a %zu-byte file",
                         name, (unsigned long long)nkv, r.size);
    if (nt > (r.size - r.pos) / 33)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor count %llu at offset 8 cannot fit in a %zu-byte file",
                         name, (unsigned long long)nt, r.size);
    gidx *ix = g->index;
    if ((st = alloc_indexed(name, "kvs", nkv, sizeof *g->kv, &g->kv, &g->n_kv, &ix->kv_slots, &ix->kv_cap)))
        return st;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < nkv; i++) {
        tern_gguf_kv *kv = &g->kv[i];
        if ((st = read_kv(&r, kv))) return st;
        long dup = idx_insert(ix->kv_slots, ix->kv_cap, kv->key, (uint32_t)i, kv_name, g);
        if (dup >= 0)
            return tern_fail(TERN_ERR_FORMAT, "%s: duplicate key '%s' at offset %llu (first at offset %llu)",
                             name, kv->key, (unsigned long long)kv->file_offset,
                             (unsigned long long)g->kv[dup].file_offset);
        if (!strcmp(kv->key, "general.alignment")) {
            if (kv->type != TERN_GGUF_UINT32)
                return tern_fail(TERN_ERR_FORMAT, "%s: key 'general.alignment' at offset %llu has type %s, expected UINT32",
                                 name, (unsigned long long)kv->file_offset, tern_gguf_vtype_name(kv->type));
            uint64_t a = kv->v.u64;
            if (a == 0 || (a & (a - 1)) || a > (1u << 30))
                return tern_fail(TERN_ERR_FORMAT, "%s: key 'general.alignment' at offset %llu: %llu is not a power of two",
                                 name, (unsigned long long)kv->file_offset, (unsigned long long)a);
            g->alignment = (uint32_t)a;
        }
    }
    if ((st = alloc_indexed(name, "tensors", nt, sizeof *g->tensors, &g->tensors, &g->n_tensors, &ix->t_slots,
                            &ix->t_cap)))
        return st;
    for (uint64_t i = 0; i < nt; i++) {
        tern_gguf_tensor *t = &g->tensors[i];
        size_t at = r.pos;
        t->info_offset = at;
        tern_gguf_str s;
        if ((st = rd_str(&r, &s, "tensor name"))) return tern_fail_prefix(st, "tensor %llu", (unsigned long long)i);
        if ((st = dup_name(&r, &s, at, "tensor name", &t->name))) return st;
        if ((st = rd_u32(&r, &t->n_dims, "n_dims"))) return tern_fail_prefix(st, "tensor '%s'", t->name);
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' at offset %zu: n_dims %u not in 1..4", name, t->name, at, t->n_dims);
        for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if ((st = rd_u64(&r, &t->ne[d], "ne"))) return tern_fail_prefix(st, "tensor '%s'", t->name);
            if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
                return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' at offset %zu: ne[%u] = %llu is out of range",
                                 name, t->name, at, d, (unsigned long long)t->ne[d]);
        }
        uint64_t ne_all = 1;
        for (uint32_t d = 0; d < 4; d++)
            if (!tern_mul64_ok(ne_all, t->ne[d], &ne_all) || ne_all > INT64_MAX)
                return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' at offset %zu: element count overflows", name, t->name, at);
        t->n_elems = ne_all;
        if ((st = rd_u32(&r, &t->ggml_type, "type"))) return tern_fail_prefix(st, "tensor '%s'", t->name);
        if (!tern_ggml_type_to_dtype(t->ggml_type, &t->type))
            return tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' at offset %zu: ggml type %u is not supported "
                             "(F32, F16, BF16, Q8_0, I8/I16/I32, F64, Q1_0 41, Q2_0 42, PQ2_0 142, PTQ1_0 143)",
                             name, t->name, at, t->ggml_type);
        if ((st = rd_u64(&r, &t->offset, "offset"))) return tern_fail_prefix(st, "tensor '%s'", t->name);
        long dup = idx_insert(ix->t_slots, ix->t_cap, t->name, (uint32_t)i, t_name, g);
        if (dup >= 0)
            return tern_fail(TERN_ERR_FORMAT, "%s: duplicate tensor name '%s' at offset %zu (first at offset %llu)",
                             name, t->name, at, (unsigned long long)g->tensors[dup].info_offset);
    }
    uint64_t meta_end = r.pos;
    g->data_offset = pad_up(meta_end, g->alignment);
    if (g->data_offset > r.size) {
        if (nt > 0)
            return tern_fail(TERN_ERR_FORMAT, "%s: data section at offset %llu starts past the end of the file (%zu bytes)",
                             name, (unsigned long long)g->data_offset, r.size);
        g->data_offset = r.size; /* no tensors: trailing padding may be absent */
    }
    uint64_t data_size = r.size - g->data_offset;

    /* Sort by offset to get spans, check alignment and overlaps. */
    span_ent *ord = NULL;
    if (nt) {
        ord = tern_malloc(nt * sizeof *ord);
        if (!ord) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", name);
        for (uint64_t i = 0; i < nt; i++) { ord[i].off = g->tensors[i].offset; ord[i].i = (uint32_t)i; }
        qsort(ord, nt, sizeof *ord, span_cmp);
    }
    st = TERN_OK;
    /* Q2_0 layout: bit 0 = fork g128 possible, bit 1 = mainline g64 possible. */
    unsigned q2_ok = 3;
    const char *q2_first_bad = NULL;
    for (uint64_t k = 0; k < nt && !st; k++) {
        tern_gguf_tensor *t = &g->tensors[ord[k].i];
        if (t->offset % g->alignment) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' (info at offset %llu): data offset %llu is not a multiple of the alignment %u",
                           name, t->name, (unsigned long long)t->info_offset, (unsigned long long)t->offset, g->alignment);
            break;
        }
        if (t->offset > data_size) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' (info at offset %llu): data offset %llu is past the end of the data section (%llu bytes)",
                           name, t->name, (unsigned long long)t->info_offset, (unsigned long long)t->offset,
                           (unsigned long long)data_size);
            break;
        }
        bool last = k + 1 == nt;
        uint64_t span = (last ? data_size : ord[k + 1].off) - t->offset;
        if (t->ggml_type == 42) {
            bool ok128, ok64;
            uint64_t b128 = tensor_bytes(t, TERN_DT_Q2_0, &ok128);
            uint64_t b64 = tensor_bytes(t, TERN_DT_Q2_0_G64, &ok64);
            unsigned m = (ok128 && span_fits(b128, span, g->alignment, last) ? 1u : 0u) |
                         (ok64 && span_fits(b64, span, g->alignment, last) ? 2u : 0u);
            if (m == 0) {
                st = tern_fail(TERN_ERR_FORMAT, "%s: Q2_0 tensor '%s' (info at offset %llu): its %llu-byte span fits neither "
                               "the PrismML layout (128/34 B: %llu bytes) nor mainline (64/18 B: %llu bytes)",
                               name, t->name, (unsigned long long)t->info_offset, (unsigned long long)span,
                               (unsigned long long)(ok128 ? b128 : 0), (unsigned long long)(ok64 ? b64 : 0));
                break;
            }
            if ((q2_ok & m) == 0) {
                st = tern_fail(TERN_ERR_FORMAT, "%s: Q2_0 tensors disagree on the block layout: '%s' fits only %s, '%s' only %s",
                               name, q2_first_bad ? q2_first_bad : "?", q2_ok == 1 ? "128/34 B" : "64/18 B",
                               t->name, m == 1 ? "128/34 B" : "64/18 B");
                break;
            }
            if (m != 3) q2_first_bad = t->name;
            q2_ok &= m;
            continue; /* bounds checked once the layout is known */
        }
        bool ok;
        t->nbytes = tensor_bytes(t, t->type, &ok);
        if (!ok) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' (info at offset %llu): row length %llu is not a multiple of the %s block (%zu)",
                           name, t->name, (unsigned long long)t->info_offset, (unsigned long long)t->ne[0],
                           tern_dtype_name(t->type), tern_dtype_block_elems(t->type));
            break;
        }
        if (t->nbytes > span) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' (info at offset %llu): %llu bytes at data offset %llu %s",
                           name, t->name, (unsigned long long)t->info_offset, (unsigned long long)t->nbytes,
                           (unsigned long long)t->offset,
                           last ? "run past the end of the file" : "overlap the next tensor");
            break;
        }
    }
    if (!st) {
        bool any42 = false;
        for (uint64_t i = 0; i < nt; i++) any42 |= g->tensors[i].ggml_type == 42;
        if (any42 && q2_ok == 3)
            st = tern_fail(TERN_ERR_FORMAT, "%s: ambiguous Q2_0 layout: every Q2_0 tensor's span fits both the PrismML "
                           "128/34 B and the mainline 64/18 B block; refusing to guess", name);
        for (uint64_t k = 0; k < nt && !st && any42; k++) {
            tern_gguf_tensor *t = &g->tensors[ord[k].i];
            if (t->ggml_type != 42) continue;
            t->type = q2_ok == 1 ? TERN_DT_Q2_0 : TERN_DT_Q2_0_G64;
            bool ok;
            t->nbytes = tensor_bytes(t, t->type, &ok);
            bool last = k + 1 == nt;
            uint64_t span = (last ? data_size : ord[k + 1].off) - t->offset;
            if (!ok || t->nbytes > span)
                st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': %llu bytes do not fit its span", name, t->name,
                               (unsigned long long)t->nbytes);
        }
    }
    if (ord) tern_free(ord, nt * sizeof *ord);
    if (st) return st;
    for (uint64_t i = 0; i < nt; i++)
        g->tensors[i].data = g->map.data + g->data_offset + g->tensors[i].offset;
    return TERN_OK;
}

/* Open over path's mapping (mapped) or over the caller's buffer (data, size). */
static tern_status open_any(const char *path, bool mapped, const void *data, size_t size, tern_gguf **out) {
    tern_gguf *g = tern_calloc(1, sizeof *g);
    gidx *ix = tern_calloc(1, sizeof *ix);
    if (!g || !ix) { tern_free(g, sizeof *g); tern_free(ix, sizeof *ix); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
    g->index = ix;
    g->map.fd = -1;
    tern_status st;
    if (mapped) {
        ix->owns_map = true;
        st = tern_map_open(path, &g->map);
    } else {
        g->map.data = data;
        g->map.size = data ? size : 0;
        g->map.path = strdup(path);
        st = TERN_OK;
    }
    if (!st) st = parse(g, path);
    if (st) { tern_gguf_close(g); return st; }
    *out = g;
    return TERN_OK;
}

tern_status tern_gguf_open(const char *path, tern_gguf **out) {
    if (!out || !path) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gguf_open: NULL argument");
    *out = NULL;
    return open_any(path, true, NULL, 0, out);
}

tern_status tern_gguf_open_mem(const void *data, size_t size, const char *name, tern_gguf **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_gguf_open_mem: NULL argument");
    *out = NULL;
    return open_any(name ? name : "<memory>", false, data, size, out);
}

/* ------------------------------------------------------------ typed getters */

static const char *gname(const tern_gguf *g) { return g->map.path ? g->map.path : "<gguf>"; }

static tern_status type_err(const tern_gguf *g, const tern_gguf_kv *kv, const char *want) {
    return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %llu has type %s, expected %s", gname(g), kv->key,
                     (unsigned long long)kv->file_offset, tern_gguf_vtype_name(kv->type), want);
}

static tern_status u64_of(const tern_gguf *g, const tern_gguf_kv *kv, uint64_t *out) {
    if (vtype_is_unsigned(kv->type)) { *out = kv->v.u64; return TERN_OK; }
    if (vtype_is_signed(kv->type)) {
        if (kv->v.i64 < 0)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' at offset %llu is negative (%lld), expected an unsigned value",
                             gname(g), kv->key, (unsigned long long)kv->file_offset, (long long)kv->v.i64);
        *out = (uint64_t)kv->v.i64;
        return TERN_OK;
    }
    return type_err(g, kv, "an integer");
}
static tern_status i64_of(const tern_gguf *g, const tern_gguf_kv *kv, int64_t *out) {
    if (vtype_is_signed(kv->type)) { *out = kv->v.i64; return TERN_OK; }
    if (vtype_is_unsigned(kv->type)) {
        if (kv->v.u64 > INT64_MAX)
            return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' value %llu does not fit int64", gname(g), kv->key,
                             (unsigned long long)kv->v.u64);
        *out = (int64_t)kv->v.u64;
        return TERN_OK;
    }
    return type_err(g, kv, "an integer");
}
static tern_status str_of(const tern_gguf *g, const tern_gguf_kv *kv, char **out) {
    if (kv->type != TERN_GGUF_STRING) return type_err(g, kv, "STRING");
    char *s = malloc(kv->v.str.len + 1);
    if (!s) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", gname(g));
    memcpy(s, kv->v.str.ptr, kv->v.str.len);
    s[kv->v.str.len] = 0;
    *out = s;
    return TERN_OK;
}

/* One getter for every type: the key's value converted into out (of the type the
 * public getter names); a missing key is an error unless opt. */
typedef enum { GET_U64, GET_I64, GET_F64, GET_BOOL, GET_STR } get_kind;
static tern_status get(const tern_gguf *g, const char *key, bool opt, get_kind k, void *out) {
    const tern_gguf_kv *kv = tern_gguf_find_kv(g, key);
    if (!kv) return opt ? TERN_OK : tern_fail(TERN_ERR_FORMAT, "%s: required key '%s' is missing", gname(g), key);
    switch (k) {
    case GET_U64: return u64_of(g, kv, out);
    case GET_I64: return i64_of(g, kv, out);
    case GET_F64:
        if (kv->type != TERN_GGUF_FLOAT32 && kv->type != TERN_GGUF_FLOAT64) return type_err(g, kv, "FLOAT32 or FLOAT64");
        *(double *)out = kv->v.f64;
        return TERN_OK;
    case GET_BOOL:
        if (kv->type != TERN_GGUF_BOOL) return type_err(g, kv, "BOOL");
        *(bool *)out = kv->v.u64 != 0;
        return TERN_OK;
    case GET_STR: return str_of(g, kv, out);
    }
    return TERN_ERR_INTERNAL;
}
tern_status tern_gguf_get_u64(const tern_gguf *g, const char *key, uint64_t *out) { return get(g, key, false, GET_U64, out); }
tern_status tern_gguf_get_u64_opt(const tern_gguf *g, const char *key, uint64_t *out) { return get(g, key, true, GET_U64, out); }
tern_status tern_gguf_get_i64(const tern_gguf *g, const char *key, int64_t *out) { return get(g, key, false, GET_I64, out); }
tern_status tern_gguf_get_f64(const tern_gguf *g, const char *key, double *out) { return get(g, key, false, GET_F64, out); }
tern_status tern_gguf_get_f64_opt(const tern_gguf *g, const char *key, double *out) { return get(g, key, true, GET_F64, out); }
tern_status tern_gguf_get_bool(const tern_gguf *g, const char *key, bool *out) { return get(g, key, false, GET_BOOL, out); }
tern_status tern_gguf_get_str(const tern_gguf *g, const char *key, char **out) { return get(g, key, false, GET_STR, out); }
tern_status tern_gguf_get_str_opt(const tern_gguf *g, const char *key, char **out) { return get(g, key, true, GET_STR, out); }

int64_t tern_gguf_arr_i64(const tern_gguf_kv *kv, uint64_t i) {
    if (!kv || kv->type != TERN_GGUF_ARRAY || !kv->arr_data || i >= kv->arr_n) return 0;
    const uint8_t *p = kv->arr_data + i * tern_gguf_vtype_size(kv->arr_type);
    switch (kv->arr_type) {
    case TERN_GGUF_UINT8: case TERN_GGUF_BOOL: return p[0];
    case TERN_GGUF_INT8: return (int8_t)p[0];
    case TERN_GGUF_UINT16: return tern_rd16(p);
    case TERN_GGUF_INT16: return (int16_t)tern_rd16(p);
    case TERN_GGUF_UINT32: return tern_rd32(p);
    case TERN_GGUF_INT32: return (int32_t)tern_rd32(p);
    case TERN_GGUF_UINT64: return (int64_t)tern_rd64(p);
    case TERN_GGUF_INT64: return (int64_t)tern_rd64(p);
    case TERN_GGUF_FLOAT32: { float f; memcpy(&f, p, 4); return f > -9.2e18f && f < 9.2e18f ? (int64_t)f : 0; }
    case TERN_GGUF_FLOAT64: { double d; memcpy(&d, p, 8); return d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0; }
    default: return 0;
    }
}

double tern_gguf_arr_f64(const tern_gguf_kv *kv, uint64_t i) {
    if (!kv || kv->type != TERN_GGUF_ARRAY || !kv->arr_data || i >= kv->arr_n) return 0;
    const uint8_t *p = kv->arr_data + i * tern_gguf_vtype_size(kv->arr_type);
    switch (kv->arr_type) {
    case TERN_GGUF_FLOAT32: { float f; memcpy(&f, p, 4); return f; }
    case TERN_GGUF_FLOAT64: { double d; memcpy(&d, p, 8); return d; }
    case TERN_GGUF_UINT64: return (double)tern_rd64(p);
    default: return (double)tern_gguf_arr_i64(kv, i);
    }
}
