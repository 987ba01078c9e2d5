/*
 * safetensors.h - safetensors reader (mmap, zero-copy, hostile-input
 * validation) and a small writer.
 *
 * File layout:
 *   u64 N (little endian) | N bytes of JSON header | byte buffer
 *   header = { "name": {"dtype": "F16", "shape": [d0, d1, ...],
 *                       "data_offsets": [begin, end]}, ...,
 *              "__metadata__": {"k": "v", ...} (optional, string values) }
 *   Offsets are relative to the byte buffer (file offset 8 + N). shape is
 *   row-major, outermost first (the reverse of GGUF's ne order).
 *
 * The reader checks: N against the file size (and a 100 MB cap), valid JSON
 * object, every entry an object with exactly a known dtype string, a shape of
 * non-negative integers (at most 8 dims) whose product * dtype size matches
 * end - begin without overflow, begin <= end <= buffer size, duplicate names,
 * no two tensors overlapping, __metadata__ string-to-string. Failures name the
 * file and the tensor/key. dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16
 * U8 BOOL F8_E4M3 F8_E5M2.
 */
#ifndef TERN_FORMATS_SAFETENSORS_H
#define TERN_FORMATS_SAFETENSORS_H

#include "core/common.h"

#define TERN_ST_MAX_DIMS 8

typedef struct tern_st_tensor {
    char *name;
    char dtype[8];              /* as in the file: "F16", "U32", ... */
    tern_dtype type;            /* tern equivalent, or TERN_DT_COUNT when none (U8, I64, BOOL, ...) */
    uint32_t elem_size;         /* bytes per element */
    uint32_t n_dims;            /* 0 for a scalar */
    uint64_t shape[TERN_ST_MAX_DIMS]; /* outermost first; unused = 1 */
    uint64_t n_elems;
    uint64_t begin, nbytes;     /* relative to the byte buffer */
    const uint8_t *data;        /* inside the mapping (NOT necessarily aligned) */
} tern_st_tensor;

typedef struct tern_st {
    tern_map map;
    uint64_t header_len;        /* N */
    uint64_t data_offset;       /* 8 + N */
    size_t n_tensors;
    tern_st_tensor *tensors;    /* in header order */
    size_t n_meta;
    char **meta_keys, **meta_vals; /* __metadata__ */
    void *index;                /* private */
} tern_st;

tern_status tern_st_open(const char *path, tern_st **out);
/* Parse from memory (fuzzers, tests); the buffer must outlive the handle. */
tern_status tern_st_open_mem(const void *data, size_t size, const char *name, tern_st **out);
void tern_st_close(tern_st *st);
const tern_st_tensor *tern_st_find(const tern_st *st, const char *name);
/* __metadata__ value or NULL. */
const char *tern_st_meta(const tern_st *st, const char *key);
/* Check a tensor's dtype and shape: fails with a message naming file and tensor.
 * dtype: e.g. "F16"; shape: n_dims values (outermost first). */
tern_status tern_st_expect(const tern_st *st, const tern_st_tensor *t, const char *dtype,
                           uint32_t n_dims, const uint64_t *shape);

/* ------------------------------------------------------------------ writer
 * Tensors are written contiguously in the order added (the reference loaders
 * refuse holes); the header is padded with spaces to a multiple of 8, like the
 * Python library. dtype strings as above; data from memory or a fill callback. */
typedef struct tern_st_writer tern_st_writer;
typedef tern_status (*tern_st_fill_fn)(void *dst, uint64_t nbytes, void *user);
tern_status tern_st_writer_new(tern_st_writer **out);
void tern_st_writer_free(tern_st_writer *w);
tern_status tern_st_w_set_meta(tern_st_writer *w, const char *key, const char *value);
tern_status tern_st_w_add(tern_st_writer *w, const char *name, const char *dtype, uint32_t n_dims,
                          const uint64_t *shape, const void *data, tern_st_fill_fn fill, void *user);
tern_status tern_st_w_write(tern_st_writer *w, const char *path, tern_progress_fn progress, void *puser);

/* "F16" -> element size (0 if unknown) and tern dtype (TERN_DT_COUNT if none). */
uint32_t tern_st_dtype_size(const char *dtype, tern_dtype *type);

#endif
