/*
 * gguf.h - GGUF v3 reader (mmap, zero-copy, hostile-input validation) and writer.
 *
 * File layout (little endian):
 *   magic "GGUF" u32 version(3) u64 n_tensors u64 n_kv
 *   n_kv x { string key, u32 value_type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
 *   padding to `general.alignment` (u32 key, default 32, power of two)
 *   data section: tensor bytes at data_offset + offset (each offset aligned)
 *   string = u64 length + bytes (no NUL). Array = u32 elem_type, u64 count, elems.
 *
 * The reader validates before use: magic, version, every count against the file
 * size and SIZE_MAX, string/array lengths, value types, duplicate keys and tensor
 * names, alignment (power of two), n_dims in 1..4, every ne > 0 and products
 * without overflow, known type ids, every tensor's offset+bytes inside the data
 * section and aligned, row length a multiple of the block size. Failures name the
 * file, the key or tensor and the byte offset.
 *
 * ggml type id 42 (Q2_0) exists in two layouts (PrismML fork: 128/34 B blocks;
 * mainline: 64/18 B blocks). The reader infers the layout from the tensor spans
 * (distance to the next tensor's offset, or to the end of the data section for the
 * last one) and reports TERN_DT_Q2_0 or TERN_DT_Q2_0_G64; a file where the spans
 * fit both or neither is refused with a clear message.
 */
#ifndef TERN_FORMATS_GGUF_H
#define TERN_FORMATS_GGUF_H

#include "core/common.h"

typedef enum tern_gguf_vtype {
    TERN_GGUF_UINT8 = 0, TERN_GGUF_INT8 = 1, TERN_GGUF_UINT16 = 2, TERN_GGUF_INT16 = 3,
    TERN_GGUF_UINT32 = 4, TERN_GGUF_INT32 = 5, TERN_GGUF_FLOAT32 = 6, TERN_GGUF_BOOL = 7,
    TERN_GGUF_STRING = 8, TERN_GGUF_ARRAY = 9, TERN_GGUF_UINT64 = 10, TERN_GGUF_INT64 = 11,
    TERN_GGUF_FLOAT64 = 12
} tern_gguf_vtype;

/* A string inside the mapping: NOT NUL-terminated. */
typedef struct tern_gguf_str {
    const char *ptr;
    uint64_t len;
} tern_gguf_str;

typedef struct tern_gguf_kv {
    char *key;                  /* NUL-terminated copy */
    tern_gguf_vtype type;
    uint64_t file_offset;       /* where the kv starts, for messages */
    union {
        uint64_t u64;           /* any unsigned int type, and bool (0/1) */
        int64_t i64;            /* any signed int type */
        double f64;             /* float32 / float64 */
        tern_gguf_str str;
    } v;
    /* arrays */
    tern_gguf_vtype arr_type;   /* element type (never ARRAY: nested arrays refused) */
    uint64_t arr_n;
    const uint8_t *arr_data;    /* raw little-endian elements in the mapping (numeric) */
    tern_gguf_str *arr_str;     /* for string arrays: arr_n entries (allocated) */
} tern_gguf_kv;

typedef struct tern_gguf_tensor {
    char *name;                 /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[4];             /* ne[0] = row length (K), ne[1] = rows (N), ...; unused = 1 */
    uint32_t ggml_type;         /* the raw id in the file */
    tern_dtype type;            /* resolved (Q2_0 variants told apart) */
    uint64_t offset;            /* relative to the data section */
    uint64_t nbytes;
    uint64_t n_elems;
    const uint8_t *data;        /* inside the mapping */
    uint64_t info_offset;       /* file offset of the tensor info, for messages */
} tern_gguf_tensor;

typedef struct tern_gguf {
    tern_map map;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;       /* start of the data section in the file */
    uint64_t n_kv, n_tensors;
    tern_gguf_kv *kv;
    tern_gguf_tensor *tensors;
    /* private: hash index for names/keys */
    void *index;
} tern_gguf;

/* Open and validate. On failure *out is NULL and the message names the problem. */
tern_status tern_gguf_open(const char *path, tern_gguf **out);
/* Parse from memory (fuzzers, tests). The buffer must outlive the handle. */
tern_status tern_gguf_open_mem(const void *data, size_t size, const char *name, tern_gguf **out);
void tern_gguf_close(tern_gguf *g);

/* Size of a scalar value type; 0 for STRING/ARRAY/unknown. */
size_t tern_gguf_vtype_size(uint32_t t);

/* Lookups: NULL when absent. */
const tern_gguf_kv *tern_gguf_find_kv(const tern_gguf *g, const char *key);
const tern_gguf_tensor *tern_gguf_find_tensor(const tern_gguf *g, const char *name);

/* Typed getters with type checking. Return TERN_ERR_FORMAT (naming the key and
 * its actual type) on a type mismatch, TERN_ERR_FORMAT on absence unless the
 * _opt variant is used (which returns TERN_OK and leaves *out untouched). Integer
 * getters accept any integer type whose value fits. */
tern_status tern_gguf_get_u64(const tern_gguf *g, const char *key, uint64_t *out);
tern_status tern_gguf_get_u64_opt(const tern_gguf *g, const char *key, uint64_t *out);
tern_status tern_gguf_get_i64(const tern_gguf *g, const char *key, int64_t *out);
tern_status tern_gguf_get_f64(const tern_gguf *g, const char *key, double *out);
tern_status tern_gguf_get_f64_opt(const tern_gguf *g, const char *key, double *out);
tern_status tern_gguf_get_bool(const tern_gguf *g, const char *key, bool *out);
/* String: returns a NUL-terminated copy in *out (free with free()). */
tern_status tern_gguf_get_str(const tern_gguf *g, const char *key, char **out);
tern_status tern_gguf_get_str_opt(const tern_gguf *g, const char *key, char **out);
/* Array element access helpers (i-th numeric element converted). */
int64_t tern_gguf_arr_i64(const tern_gguf_kv *kv, uint64_t i);
double tern_gguf_arr_f64(const tern_gguf_kv *kv, uint64_t i);

const char *tern_gguf_vtype_name(tern_gguf_vtype t);

/* ------------------------------------------------------------------ writer
 * Build metadata and tensor list in memory, then stream tensor data in order.
 * Tensor data is supplied either as a pointer (copied at write time) or by a
 * callback (for synth/quantize streaming). Alignment 32 unless set. */
typedef struct tern_gguf_writer tern_gguf_writer;

tern_status tern_gguf_writer_new(tern_gguf_writer **out);
void tern_gguf_writer_free(tern_gguf_writer *w);
tern_status tern_gguf_w_set_u32(tern_gguf_writer *w, const char *key, uint32_t v);
tern_status tern_gguf_w_set_i32(tern_gguf_writer *w, const char *key, int32_t v);
tern_status tern_gguf_w_set_u64(tern_gguf_writer *w, const char *key, uint64_t v);
tern_status tern_gguf_w_set_f32(tern_gguf_writer *w, const char *key, float v);
tern_status tern_gguf_w_set_bool(tern_gguf_writer *w, const char *key, bool v);
tern_status tern_gguf_w_set_str(tern_gguf_writer *w, const char *key, const char *v);
/* Arrays: numeric elements in `etype` layout (little endian) or strings. */
tern_status tern_gguf_w_set_arr(tern_gguf_writer *w, const char *key, tern_gguf_vtype etype,
                                const void *data, uint64_t n);
tern_status tern_gguf_w_set_arr_str(tern_gguf_writer *w, const char *key,
                                    const char *const *strs, const uint64_t *lens, uint64_t n);
/* Copy every kv of `src` except those for which skip(key) returns true. */
tern_status tern_gguf_w_copy_kv(tern_gguf_writer *w, const tern_gguf *src,
                                bool (*skip)(const char *key, void *u), void *u);
/* Tensor with data in memory (must stay valid until write) or a filler callback
 * fill(dst, nbytes, user) called once at write time. ggml_type is the file id. */
typedef tern_status (*tern_gguf_fill_fn)(void *dst, uint64_t nbytes, void *user);
tern_status tern_gguf_w_add_tensor(tern_gguf_writer *w, const char *name, uint32_t n_dims,
                                   const uint64_t *ne, tern_dtype type, const void *data,
                                   tern_gguf_fill_fn fill, void *user);
tern_status tern_gguf_w_write(tern_gguf_writer *w, const char *path, tern_progress_fn progress,
                              void *puser);

/* ggml ids <-> tern_dtype. Q2_0 variants both map to 42. Returns false if unknown. */
bool tern_ggml_type_to_dtype(uint32_t ggml_type, tern_dtype *out);
uint32_t tern_dtype_to_ggml(tern_dtype t);

#endif
