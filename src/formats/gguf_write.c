/*
 * gguf_write.c - GGUF v3 writer (the layout of gguf.h, the rules of ggml's
 * gguf_write_to_buf): header, kvs in insertion order, tensor infos, zero padding
 * to `general.alignment` (default 32), then each tensor's bytes followed by zero
 * padding to the alignment. Offsets are relative to the data section and every
 * one is aligned, so llama.cpp's contiguity check (offset == running padded
 * size) holds for files written here.
 *
 * Metadata is serialised into memory when set (setting a key again replaces
 * it); tensor bytes come from caller memory or a fill callback at write time.
 * The file is written to PATH.tmp and renamed, so a failed write leaves no file.
 */
#include "formats/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct wkv {
    char *key;
    uint8_t *val;      /* serialised: u32 type + value */
    size_t val_len;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    tern_dtype type;
    uint64_t nbytes;
    const void *data;
    tern_gguf_fill_fn fill;
    void *user;
} wtensor;

struct tern_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    uint32_t alignment;
};

/* --------------------------------------------------------- byte buffer */
typedef struct buf { uint8_t *p; size_t n, cap; bool oom; } buf;
static void b_put(buf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + n) nc *= 2;
        uint8_t *q = tern_realloc(b->p, b->cap, nc);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void b_u32(buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(buf *b, const char *s, uint64_t n) { b_u64(b, n); b_put(b, s, n); }

tern_status tern_gguf_writer_new(tern_gguf_writer **out) {
    *out = tern_calloc(1, sizeof **out);
    if (!*out) return tern_fail(TERN_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->alignment = 32;
    return TERN_OK;
}

void tern_gguf_writer_free(tern_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        tern_free(w->kv[i].key, strlen(w->kv[i].key) + 1);
        tern_free(w->kv[i].val, w->kv[i].val_len);
    }
    tern_free(w->kv, w->cap_kv * sizeof *w->kv);
    for (size_t i = 0; i < w->n_t; i++) tern_free(w->t[i].name, strlen(w->t[i].name) + 1);
    tern_free(w->t, w->cap_t * sizeof *w->t);
    tern_free(w, sizeof *w);
}

/* Take ownership of a serialised value (b) under key. */
static tern_status put_kv(tern_gguf_writer *w, const char *key, buf *b) {
    if (b->oom) { tern_free(b->p, b->cap); return tern_fail(TERN_ERR_NOMEM, "gguf writer: out of memory"); }
    if (!key || !*key) { tern_free(b->p, b->cap); return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: empty key"); }
    /* shrink accounting to the exact length (b->cap is what was allocated) */
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            tern_free(w->kv[i].val, w->kv[i].val_len);
            w->kv[i].val = b->p;
            w->kv[i].val_len = b->cap;
            return TERN_OK;
        }
    if (!tern_grow(&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv, 32)) {
        tern_free(b->p, b->cap);
        return tern_fail(TERN_ERR_NOMEM, "gguf writer: out of memory");
    }
    char *k = tern_strdup(key);
    if (!k) { tern_free(b->p, b->cap); return tern_fail(TERN_ERR_NOMEM, "gguf writer: out of memory"); }
    w->kv[w->n_kv].key = k;
    w->kv[w->n_kv].val = b->p;
    w->kv[w->n_kv].val_len = b->cap;
    w->n_kv++;
    return TERN_OK;
}
/* The serialised value is b->p[0 .. used); val_len keeps the allocated size for
 * accounting, the used length is recomputed from the type at write time. To keep
 * it simple the used length is stored in the first 8 bytes. */

static tern_status set_scalar(tern_gguf_writer *w, const char *key, tern_gguf_vtype t, const void *v, size_t n) {
    buf b = {0};
    uint64_t used = 4 + n;
    b_u64(&b, used);
    b_u32(&b, (uint32_t)t);
    b_put(&b, v, n);
    return put_kv(w, key, &b);
}

tern_status tern_gguf_w_set_u32(tern_gguf_writer *w, const char *key, uint32_t v) {
    if (!strcmp(key, "general.alignment")) {
        if (v == 0 || (v & (v - 1)))
            return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: general.alignment %u is not a power of two", v);
        w->alignment = v;
    }
    return set_scalar(w, key, TERN_GGUF_UINT32, &v, 4);
}
tern_status tern_gguf_w_set_i32(tern_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, TERN_GGUF_INT32, &v, 4);
}
tern_status tern_gguf_w_set_u64(tern_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, TERN_GGUF_UINT64, &v, 8);
}
tern_status tern_gguf_w_set_f32(tern_gguf_writer *w, const char *key, float v) {
    return set_scalar(w, key, TERN_GGUF_FLOAT32, &v, 4);
}
tern_status tern_gguf_w_set_bool(tern_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, TERN_GGUF_BOOL, &b, 1);
}
tern_status tern_gguf_w_set_str(tern_gguf_writer *w, const char *key, const char *v) {
    buf b = {0};
    size_t n = strlen(v);
    b_u64(&b, 4 + 8 + n);
    b_u32(&b, TERN_GGUF_STRING);
    b_str(&b, v, n);
    return put_kv(w, key, &b);
}


tern_status tern_gguf_w_set_arr(tern_gguf_writer *w, const char *key, tern_gguf_vtype etype,
                                const void *data, uint64_t n) {
    size_t es = tern_gguf_vtype_size(etype);
    uint64_t bytes;
    if (!es) return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: key '%s': array element type %s is not numeric",
                              key, tern_gguf_vtype_name(etype));
    if (!tern_mul64_ok(n, es, &bytes) || bytes > SIZE_MAX / 2)
        return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: key '%s': array too large", key);
    buf b = {0};
    b_u64(&b, 4 + 4 + 8 + bytes);
    b_u32(&b, TERN_GGUF_ARRAY);
    b_u32(&b, etype);
    b_u64(&b, n);
    if (bytes) b_put(&b, data, bytes);
    return put_kv(w, key, &b);
}

tern_status tern_gguf_w_set_arr_str(tern_gguf_writer *w, const char *key,
                                    const char *const *strs, const uint64_t *lens, uint64_t n) {
    buf b = {0};
    b_u64(&b, 0);
    b_u32(&b, TERN_GGUF_ARRAY);
    b_u32(&b, TERN_GGUF_STRING);
    b_u64(&b, n);
    for (uint64_t i = 0; i < n && !b.oom; i++)
        b_str(&b, strs[i], lens ? lens[i] : strlen(strs[i]));
    if (!b.oom) { uint64_t used = b.n - 8; memcpy(b.p, &used, 8); }
    return put_kv(w, key, &b);
}

tern_status tern_gguf_w_copy_kv(tern_gguf_writer *w, const tern_gguf *src,
                                bool (*skip)(const char *key, void *u), void *u) {
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const tern_gguf_kv *kv = &src->kv[i];
        if (skip && skip(kv->key, u)) continue;
        tern_status st;
        buf b = {0};
        b_u64(&b, 0);
        b_u32(&b, kv->type);
        switch (kv->type) {
        case TERN_GGUF_STRING: b_str(&b, kv->v.str.ptr, kv->v.str.len); break;
        case TERN_GGUF_ARRAY:
            b_u32(&b, kv->arr_type);
            b_u64(&b, kv->arr_n);
            if (kv->arr_type == TERN_GGUF_STRING)
                for (uint64_t j = 0; j < kv->arr_n && !b.oom; j++) b_str(&b, kv->arr_str[j].ptr, kv->arr_str[j].len);
            else if (kv->arr_n)
                b_put(&b, kv->arr_data, kv->arr_n * tern_gguf_vtype_size(kv->arr_type));
            break;
        default: {
            /* re-encode the scalar at its original width */
            uint8_t tmp[8];
            size_t es = tern_gguf_vtype_size(kv->type);
            if (kv->type == TERN_GGUF_FLOAT32) { float f = (float)kv->v.f64; memcpy(tmp, &f, 4); }
            else if (kv->type == TERN_GGUF_FLOAT64) memcpy(tmp, &kv->v.f64, 8);
            else memcpy(tmp, &kv->v.u64, 8); /* little endian: low bytes first (i64 same bits) */
            b_put(&b, tmp, es);
        }
        }
        if (!b.oom) { uint64_t used = b.n - 8; memcpy(b.p, &used, 8); }
        if (!strcmp(kv->key, "general.alignment") && kv->type == TERN_GGUF_UINT32) w->alignment = (uint32_t)kv->v.u64;
        if ((st = put_kv(w, kv->key, &b))) return st;
    }
    return TERN_OK;
}

tern_status tern_gguf_w_add_tensor(tern_gguf_writer *w, const char *name, uint32_t n_dims,
                                   const uint64_t *ne, tern_dtype type, const void *data,
                                   tern_gguf_fill_fn fill, void *user) {
    if (!name || !*name) return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: empty tensor name");
    if (n_dims < 1 || n_dims > 4)
        return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %u not in 1..4", name, n_dims);
    if (tern_dtype_to_ggml(type) == UINT32_MAX)
        return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: tensor '%s': type %s has no ggml id", name, tern_dtype_name(type));
    if (!data && !fill)
        return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: tensor '%s': neither data nor fill", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return tern_fail(TERN_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    wtensor t = {0};
    t.n_dims = n_dims;
    for (int d = 0; d < 4; d++) t.ne[d] = d < (int)n_dims ? ne[d] : 1;
    size_t be = tern_dtype_block_elems(type), bb = tern_dtype_block_bytes(type);
    if (t.ne[0] == 0 || t.ne[0] % be)
        return tern_fail(TERN_ERR_SHAPE, "gguf writer: tensor '%s': row length %llu is not a multiple of the %s block (%zu)",
                         name, (unsigned long long)t.ne[0], tern_dtype_name(type), be);
    uint64_t nb = t.ne[0] / be * bb;
    for (int d = 1; d < 4; d++)
        if (t.ne[d] == 0 || !tern_mul64_ok(nb, t.ne[d], &nb))
            return tern_fail(TERN_ERR_SHAPE, "gguf writer: tensor '%s': bad shape", name);
    t.nbytes = nb;
    t.type = type;
    t.data = data;
    t.fill = fill;
    t.user = user;
    t.name = tern_strdup(name);
    if (!t.name) return tern_fail(TERN_ERR_NOMEM, "gguf writer: out of memory");
    if (!tern_grow(&w->t, &w->cap_t, w->n_t, sizeof *w->t, 64)) {
        tern_free(t.name, strlen(name) + 1);
        return tern_fail(TERN_ERR_NOMEM, "gguf writer: out of memory");
    }
    w->t[w->n_t++] = t;
    return TERN_OK;
}

static uint64_t pad_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static tern_status wr(FILE *f, const void *p, size_t n, const char *path) {
    if (n && fwrite(p, 1, n, f) != n) return tern_fail(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return TERN_OK;
}
static tern_status wr_zeros(FILE *f, uint64_t n, const char *path) {
    static const uint8_t z[4096];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        tern_status st = wr(f, z, k, path);
        if (st) return st;
        n -= k;
    }
    return TERN_OK;
}

tern_status tern_gguf_w_write(tern_gguf_writer *w, const char *path, tern_progress_fn progress, void *puser) {
    /* header + kvs + infos into memory */
    buf h = {0};
    b_u32(&h, 0x46554747u);
    b_u32(&h, 3);
    b_u64(&h, w->n_t);
    b_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t used;
        memcpy(&used, w->kv[i].val, 8);
        b_str(&h, w->kv[i].key, strlen(w->kv[i].key));
        b_put(&h, w->kv[i].val + 8, used);
    }
    uint64_t off = 0, total = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        b_str(&h, t->name, strlen(t->name));
        b_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) b_u64(&h, t->ne[d]);
        b_u32(&h, tern_dtype_to_ggml(t->type));
        b_u64(&h, off);
        off = pad_up(off + t->nbytes, w->alignment);
        total += t->nbytes;
    }
    if (h.oom) { tern_free(h.p, h.cap); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
    size_t tl = strlen(path) + 5;
    char *tmp = malloc(tl);
    if (!tmp) { tern_free(h.p, h.cap); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
    snprintf(tmp, tl, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        tern_status st = tern_fail(TERN_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        tern_free(h.p, h.cap);
        return st;
    }
    tern_status st = wr(f, h.p, h.n, path);
    if (!st) st = wr_zeros(f, pad_up(h.n, w->alignment) - h.n, path);
    tern_free(h.p, h.cap);
    uint64_t done = 0;
    for (size_t i = 0; i < w->n_t && !st; i++) {
        const wtensor *t = &w->t[i];
        if (t->data) {
            st = wr(f, t->data, t->nbytes, path);
        } else {
            void *tmpb = tern_malloc(t->nbytes ? t->nbytes : 1);
            if (!tmpb) { st = tern_fail(TERN_ERR_NOMEM, "%s: tensor '%s': out of memory (%llu bytes)", path, t->name,
                                        (unsigned long long)t->nbytes); break; }
            st = t->fill(tmpb, t->nbytes, t->user);
            if (st) tern_fail_prefix(st, "%s: tensor '%s'", path, t->name);
            else st = wr(f, tmpb, t->nbytes, path);
            tern_free(tmpb, t->nbytes ? t->nbytes : 1);
        }
        if (!st) st = wr_zeros(f, pad_up(t->nbytes, w->alignment) - t->nbytes, path);
        done += t->nbytes;
        if (!st && progress && !progress(done, total, puser))
            st = tern_fail(TERN_ERR_CANCELLED, "%s: cancelled", path);
    }
    if (fclose(f) != 0 && !st) st = tern_fail(TERN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (!st && rename(tmp, path) != 0) st = tern_fail(TERN_ERR_IO, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
    if (st) unlink(tmp);
    free(tmp);
    return st;
}
