/*
 * common.h - internal helpers shared by every module: error reporting,
 * logging, checked size arithmetic, fp16/bf16 conversion, allocation with
 * accounting, file mapping, growable strings and timers. Nothing here is public API.
 */
#ifndef TERN_CORE_COMMON_H
#define TERN_CORE_COMMON_H

#include "tern.h"
#include <stdarg.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#if defined(__GNUC__)
#define TERN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TERN_LIKELY(x) __builtin_expect(!!(x), 1)
#define TERN_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TERN_PRINTF(a, b)
#define TERN_LIKELY(x) (x)
#define TERN_UNLIKELY(x) (x)
#endif

/* ---- errors: store a message for tern_last_error() and return the status.
 * Usage: return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' at offset %llu: ...", path, ...); */
tern_status tern_fail(tern_status s, const char *fmt, ...) TERN_PRINTF(2, 3);
/* Prepend context to the current message: "ctx: old message". Returns s. */
tern_status tern_fail_prefix(tern_status s, const char *fmt, ...) TERN_PRINTF(2, 3);
void tern_clear_error(void);

/* Programmer errors (never input errors): print file:line and abort. */
#define TERN_ASSERT(c) \
    do { if (TERN_UNLIKELY(!(c))) tern_assert_fail(#c, __FILE__, __LINE__); } while (0)
void tern_assert_fail(const char *cond, const char *file, int line);

/* ---- logging through the user callback (silent by default). */
void tern_log(tern_log_level lvl, const char *fmt, ...) TERN_PRINTF(2, 3);

/* ---- checked arithmetic: return false on overflow. */
static inline bool tern_mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool tern_add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool tern_mul64_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool tern_add64_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- half precision. Exact conversions (round-to-nearest-even for f32->f16/bf16). */
float tern_f16_to_f32(uint16_t h);
uint16_t tern_f32_to_f16(float f);
static inline float tern_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v; v.u = (uint32_t)h << 16; return v.f;
}
uint16_t tern_f32_to_bf16(float f);
/* Unaligned little-endian loads (weights in a mapping are not aligned). */
static inline uint16_t tern_rd16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t tern_rd32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t tern_rd64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* ---- allocation with accounting. All library allocations of significant size
 * go through these so tern can print the bytes it allocates. A test hook can
 * make the n-th allocation fail (tern_alloc_fail_after). */
void *tern_malloc(size_t n);
void *tern_calloc(size_t n, size_t size);
void *tern_realloc(void *p, size_t old_n, size_t n);
/* Room for one more element in a growable array: pp points at the array pointer
 * (tern_realloc'd, *cap elements of elem bytes, n in use); when n == *cap the array
 * doubles (to `first` elements when empty). false when out of memory, the array
 * unchanged. Usage: if (!tern_grow(&v->items, &v->cap, v->n, sizeof *v->items, 64)) ... */
bool tern_grow(void *pp, size_t *cap, size_t n, size_t elem, size_t first);
/* 64-byte aligned allocation (kernels, KV caches); free with tern_free_aligned. */
void *tern_alloc_aligned(size_t n);
void tern_free_aligned(void *p, size_t n);
/* Zeroed memory whose pages the kernel backs only when first touched (large buffers
 * such as KV caches: RSS grows with the positions used); page-aligned. Free with
 * tern_free_lazy(p, n). tern_zero_lazy gives the pages of [p, p+n) back (they read as
 * zero again) instead of writing zeros over them. */
void *tern_alloc_lazy(size_t n);
/* Like tern_alloc_aligned (free with tern_free_aligned), 2 MiB aligned and marked
 * for transparent huge pages where the system has them (weights streamed by kernels:
 * fewer TLB misses and page faults). */
void *tern_alloc_huge(size_t n);
void tern_free_lazy(void *p, size_t n);
void tern_zero_lazy(void *p, size_t n);
void tern_free(void *p, size_t n);
char *tern_strdup(const char *s);
char *tern_strndup(const char *s, size_t n);
/* Bytes currently allocated through the functions above, and the peak. */
size_t tern_alloc_current(void);
size_t tern_alloc_peak(void);
/* Test hook: the allocation after `n` more successful ones fails; -1 disables. */
void tern_alloc_fail_after(long n);

/* ---- read-only file mapping. */
typedef struct tern_map {
    const uint8_t *data;  /* NULL for an empty file */
    size_t size;
    int fd;
    char *path;           /* owned copy, for messages */
} tern_map;
tern_status tern_map_open(const char *path, tern_map *out);
void tern_map_close(tern_map *m);
/* Read a whole (small) file into a NUL-terminated buffer (JSON configs). */
tern_status tern_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len);

/* ---- strings (str.c; tern_str and tern_tokens are in tern.h): make room for `extra`
 * more bytes plus the NUL, growing by doubling. */
tern_status tern_str_reserve(tern_str *s, size_t extra);
/* Write code point cp (< 0x110000) as UTF-8 at o (room for 4 bytes); returns the length. */
size_t tern_utf8_put(uint32_t cp, char *o);

/* ---- time. */
double tern_now_s(void);        /* monotonic seconds */
/* Peak resident set size of this process in bytes (0 when unknown). */
size_t tern_peak_rss_bytes(void);

#endif /* TERN_CORE_COMMON_H */
