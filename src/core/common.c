/*
 * common.c - error messages (thread-local), logging, half-precision
 * conversion, accounted allocation, file mapping, timers.
 */
#include "core/common.h"
#include "core/blocks.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ errors */

static _Thread_local char g_err[1024];

const char *tern_last_error(void) { return g_err; }
void tern_clear_error(void) { g_err[0] = 0; }

tern_status tern_fail(tern_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    tern_log(TERN_LOG_DEBUG, "error %s: %s", tern_status_str(s), g_err);
    return s;
}

tern_status tern_fail_prefix(tern_status s, const char *fmt, ...) {
    char old[sizeof g_err], pre[512];
    memcpy(old, g_err, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(g_err, sizeof g_err, "%s: %s", pre, old);
    return s;
}

const char *tern_status_str(tern_status s) {
    switch (s) {
    case TERN_OK: return "TERN_OK";
    case TERN_ERR_INVALID_ARG: return "TERN_ERR_INVALID_ARG";
    case TERN_ERR_IO: return "TERN_ERR_IO";
    case TERN_ERR_FORMAT: return "TERN_ERR_FORMAT";
    case TERN_ERR_UNSUPPORTED: return "TERN_ERR_UNSUPPORTED";
    case TERN_ERR_NOMEM: return "TERN_ERR_NOMEM";
    case TERN_ERR_SHAPE: return "TERN_ERR_SHAPE";
    case TERN_ERR_RANGE: return "TERN_ERR_RANGE";
    case TERN_ERR_CONTEXT_FULL: return "TERN_ERR_CONTEXT_FULL";
    case TERN_ERR_INTERNAL: return "TERN_ERR_INTERNAL";
    case TERN_ERR_CANCELLED: return "TERN_ERR_CANCELLED";
    case TERN_ERR_NOT_FOUND: return "TERN_ERR_NOT_FOUND";
    }
    return "TERN_ERR_UNKNOWN";
}

#ifndef TERN_VERSION_STRING
#error "TERN_VERSION_STRING comes from CMakeLists.txt project(VERSION)"
#endif
const char *tern_version(void) { return TERN_VERSION_STRING; }

void tern_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "tern: internal assertion failed: %s (%s:%d)\n", cond, file, line);
    abort();
}

/* ----------------------------------------------------------------- logging */

static tern_log_fn g_log_fn;
static void *g_log_user;
static tern_log_level g_log_max = TERN_LOG_INFO;

void tern_set_log(tern_log_fn fn, void *user, tern_log_level max_level) {
    g_log_fn = fn;
    g_log_user = user;
    g_log_max = max_level;
}

void tern_log(tern_log_level lvl, const char *fmt, ...) {
    if (!g_log_fn || lvl > g_log_max) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_log_fn(lvl, buf, g_log_user);
}

/* ------------------------------------------------------------------- dtypes */

static const struct { const char *name; size_t be, bb; bool tern; } g_dt[TERN_DT_COUNT] = {
    [TERN_DT_F32] = {"F32", 1, 4, false},
    [TERN_DT_F16] = {"F16", 1, 2, false},
    [TERN_DT_BF16] = {"BF16", 1, 2, false},
    [TERN_DT_Q8_0] = {"Q8_0", TERN_QK8_0, TERN_Q8_0_BYTES, false},
    [TERN_DT_PQ2_0] = {"PQ2_0", TERN_QK128, TERN_PQ2_0_BYTES, true},
    [TERN_DT_PTQ1_0] = {"PTQ1_0", TERN_QK128, TERN_PTQ1_0_BYTES, true},
    [TERN_DT_Q1_0] = {"Q1_0", TERN_QK128, TERN_Q1_0_BYTES, true},
    [TERN_DT_Q2_0] = {"Q2_0", TERN_QK128, TERN_PQ2_0_BYTES, true},
    [TERN_DT_Q2_0_G64] = {"Q2_0_G64", TERN_QK64, TERN_Q2_0_G64_BYTES, true},
    [TERN_DT_I8] = {"I8", 1, 1, false},
    [TERN_DT_I16] = {"I16", 1, 2, false},
    [TERN_DT_I32] = {"I32", 1, 4, false},
    [TERN_DT_U32] = {"U32", 1, 4, false},
    [TERN_DT_F64] = {"F64", 1, 8, false},
};

const char *tern_dtype_name(tern_dtype t) {
    return (unsigned)t < TERN_DT_COUNT ? g_dt[t].name : "?";
}
size_t tern_dtype_block_elems(tern_dtype t) {
    return (unsigned)t < TERN_DT_COUNT ? g_dt[t].be : 0;
}
size_t tern_dtype_block_bytes(tern_dtype t) {
    return (unsigned)t < TERN_DT_COUNT ? g_dt[t].bb : 0;
}
bool tern_dtype_is_packed_ternary(tern_dtype t) {
    return (unsigned)t < TERN_DT_COUNT && g_dt[t].tern;
}

/* ------------------------------------------------------------ half floats */

float tern_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            man &= 0x3ff;
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t tern_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0));
    if (ax >= 0x477ff000) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000) return (uint16_t)sign; /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - ... */
        /* value = m * 2^(e-150); half subnormal unit = 2^-24 -> q = m * 2^(e-126) */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = (ax >> 23) - 127 + 15;
    uint32_t m = ax & 0x7fffff;
    uint32_t q = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

uint16_t tern_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
    uint32_t r = 0x7fff + ((x >> 16) & 1);
    return (uint16_t)((x + r) >> 16);
}

/* -------------------------------------------------------------- allocation */

static atomic_size_t g_cur, g_peak;
static atomic_long g_fail_after = -1;

static bool alloc_should_fail(void) {
    long n = atomic_load(&g_fail_after);
    if (n < 0) return false;
    if (n == 0) return true;
    atomic_fetch_sub(&g_fail_after, 1);
    return false;
}
void tern_alloc_fail_after(long n) { atomic_store(&g_fail_after, n); }

static void acct_add(size_t n) {
    size_t c = atomic_fetch_add(&g_cur, n) + n;
    size_t p = atomic_load(&g_peak);
    while (c > p && !atomic_compare_exchange_weak(&g_peak, &p, c)) {}
}
static void acct_sub(size_t n) { atomic_fetch_sub(&g_cur, n); }

void *tern_malloc(size_t n) {
    if (alloc_should_fail()) return NULL;
    void *p = malloc(n ? n : 1);
    if (p) acct_add(n);
    return p;
}
void *tern_calloc(size_t n, size_t size) {
    size_t t;
    if (!tern_mul_ok(n, size, &t) || alloc_should_fail()) return NULL;
    void *p = calloc(t ? t : 1, 1);
    if (p) acct_add(t);
    return p;
}
void *tern_realloc(void *p, size_t old_n, size_t n) {
    if (alloc_should_fail()) return NULL;
    void *q = realloc(p, n ? n : 1);
    if (q) { acct_sub(p ? old_n : 0); acct_add(n); }
    return q;
}
bool tern_grow(void *pp, size_t *cap, size_t n, size_t elem, size_t first) {
    if (n < *cap) return true;
    size_t nc = *cap ? *cap * 2 : first, bytes;
    if (nc <= n || !tern_mul_ok(nc, elem, &bytes)) return false;
    void *p;
    memcpy(&p, pp, sizeof p);
    void *q = tern_realloc(p, *cap * elem, bytes);
    if (!q) return false;
    memcpy(pp, &q, sizeof q);
    *cap = nc;
    return true;
}
void *tern_alloc_aligned(size_t n) {
    if (alloc_should_fail()) return NULL;
    size_t r = (n + 63) & ~(size_t)63;
    if (r < n) return NULL;
    void *p = aligned_alloc(64, r ? r : 64);
    if (p) acct_add(n);
    return p;
}
void *tern_alloc_huge(size_t n) {
    if (alloc_should_fail()) return NULL;
    const size_t huge = (size_t)2 << 20;
    size_t r = (n + 63) & ~(size_t)63;
    if (r < n) return NULL;
    void *p = aligned_alloc(huge, r ? r : 64);
    if (!p) return NULL;
#if defined(MADV_HUGEPAGE)
    /* whole huge pages only: the tail stays on small pages (no RSS past n) */
    if (r >= huge) (void)madvise(p, r & ~(huge - 1), MADV_HUGEPAGE);
#endif
    acct_add(n);
    return p;
}
void *tern_alloc_lazy(size_t n) {
    if (alloc_should_fail()) return NULL;
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) return NULL;
    acct_add(n);
    return p;
}
void tern_free_lazy(void *p, size_t n) {
    if (!p) return;
    acct_sub(n);
    munmap(p, n ? n : 1);
}
void tern_zero_lazy(void *p, size_t n) {
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, b = a + n;
    uintptr_t s0 = (a + ps - 1) & ~(ps - 1), s1 = b & ~(ps - 1);
    if (s1 <= s0) {
        memset(p, 0, n);
        return;
    }
    memset(p, 0, s0 - a);
    memset((void *)s1, 0, b - s1);
    /* private anonymous pages: dropped pages read back as zeros */
    if (madvise((void *)s0, s1 - s0, MADV_DONTNEED) != 0) memset((void *)s0, 0, s1 - s0);
}
void tern_free_aligned(void *p, size_t n) {
    if (!p) return;
    acct_sub(n);
    free(p);
}
void tern_free(void *p, size_t n) {
    if (!p) return;
    acct_sub(n);
    free(p);
}
char *tern_strdup(const char *s) { return tern_strndup(s, strlen(s)); }
char *tern_strndup(const char *s, size_t n) {
    char *d = tern_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}
size_t tern_alloc_current(void) { return atomic_load(&g_cur); }
size_t tern_alloc_peak(void) { return atomic_load(&g_peak); }

/* ------------------------------------------------------------- file mapping */

tern_status tern_map_open(const char *path, tern_map *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tern_fail(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tern_fail(TERN_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tern_fail(TERN_ERR_IO, "%s: not a regular file", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return tern_fail(TERN_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        out->data = p;
    }
    out->fd = fd;
    out->path = strdup(path);
    return TERN_OK;
}

void tern_map_close(tern_map *m) {
    if (!m) return;
    if (m->data) munmap((void *)m->data, m->size);
    if (m->fd >= 0) close(m->fd);
    free(m->path);
    memset(m, 0, sizeof *m);
    m->fd = -1;
}

tern_status tern_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tern_fail(TERN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) { fclose(f); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > max_bytes) {
                free(buf);
                fclose(f);
                return tern_fail(TERN_ERR_FORMAT, "%s: file larger than %zu bytes", path, max_bytes);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); fclose(f); return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", path); }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + len, 1, cap - 1 - len, f);
        len += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return tern_fail(TERN_ERR_IO, "%s: read error", path); }
    if (len > max_bytes) { free(buf); return tern_fail(TERN_ERR_FORMAT, "%s: file larger than %zu bytes", path, max_bytes); }
    buf[len] = 0;
    *out = buf; /* plain malloc: free() it */
    if (out_len) *out_len = len;
    return TERN_OK;
}

/* -------------------------------------------------------------------- time */

double tern_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

size_t tern_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}
