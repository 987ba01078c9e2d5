/*
 * check.h - the tiny test harness every tests/unit/test_*.c uses.
 *
 *   TEST(name) { CHECK(cond); CHECK_EQ_INT(a, b); CHECK_NEAR(a, b, tol); }
 *   int main(void) { RUN(name); ...; return check_summary(); }
 *
 * A failed CHECK prints file:line and the expression and marks the current test
 * failed (it goes on, so one run shows every failure). check_summary() prints
 * "N passed, N failed" (and ", N skipped") and returns the process exit code:
 * 1 when a check failed, else 77 (ctest's SKIP_RETURN_CODE: "Skipped") when a
 * test was skipped, else 0.
 * SKIP("why") ends a test as skipped and says why, loudly: for what the test needs
 * and this machine lacks (fixtures, a GPU), so the whole executable reports skipped.
 * SKIP_OPTIONAL("why") ends a test as skipped without that effect: for an optional
 * extra (an ISA the CPU lacks, an optional Python oracle) while the rest ran.
 * fixtures_dir() gives ../shared/fixtures (TERN_FIXTURES overrides) or NULL.
 */
#ifndef TERN_TEST_CHECK_H
#define TERN_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* unused in a test file whose tests are all compiled out (test_cuda_kernels without CUDA) */
__attribute__((unused)) static int check_passed, check_failed, check_skipped;
__attribute__((unused)) static int check_cur_failed, check_cur_skipped, check_optional_skipped;
__attribute__((unused)) static const char *check_cur_name;

#define TEST(name) static void name(void)

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s\n", __FILE__, __LINE__,        \
                    check_cur_name, #c);                                          \
            check_cur_failed = 1;                                                 \
        }                                                                         \
    } while (0)

#define CHECK_MSG(c, ...)                                                         \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s: ", __FILE__, __LINE__,        \
                    check_cur_name, #c);                                          \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            check_cur_failed = 1;                                                 \
        }                                                                         \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                        \
    do {                                                                          \
        long long _a = (long long)(a), _b = (long long)(b);                       \
        if (_a != _b) {                                                           \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s == %s (%lld vs %lld)\n",       \
                    __FILE__, __LINE__, check_cur_name, #a, #b, _a, _b);          \
            check_cur_failed = 1;                                                 \
        }                                                                         \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                     \
    do {                                                                          \
        double _a = (double)(a), _b = (double)(b);                                \
        if (!(fabs(_a - _b) <= (tol))) {                                          \
            fprintf(stderr, "  FAIL %s:%d [%s]: |%s - %s| = %g > %g (%g vs %g)\n",\
                    __FILE__, __LINE__, check_cur_name, #a, #b, fabs(_a - _b),    \
                    (double)(tol), _a, _b);                                       \
            check_cur_failed = 1;                                                 \
        }                                                                         \
    } while (0)

#define CHECK_STR(a, b)                                                           \
    do {                                                                          \
        const char *_a = (a), *_b = (b);                                          \
        if (!_a || !_b || strcmp(_a, _b) != 0) {                                  \
            fprintf(stderr, "  FAIL %s:%d [%s]: %s == %s (\"%s\" vs \"%s\")\n",   \
                    __FILE__, __LINE__, check_cur_name, #a, #b,                   \
                    _a ? _a : "(null)", _b ? _b : "(null)");                      \
            check_cur_failed = 1;                                                 \
        }                                                                         \
    } while (0)

#define SKIP(...)                                                                 \
    do {                                                                          \
        fprintf(stderr, "  SKIP [%s]: ", check_cur_name);                         \
        fprintf(stderr, __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                      \
        check_cur_skipped = 1;                                                    \
        return;                                                                   \
    } while (0)

#define SKIP_OPTIONAL(...)                                                        \
    do {                                                                          \
        fprintf(stderr, "  SKIP [%s] (optional): ", check_cur_name);              \
        fprintf(stderr, __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                      \
        check_cur_skipped = 2;                                                    \
        return;                                                                   \
    } while (0)

/* TERN_TEST_ONLY=SUBSTRING runs only the tests whose name contains it (a device call
 * running one test under compute-sanitizer); the others are not counted. */
static inline int check_selected(const char *name) {
    const char *o = getenv("TERN_TEST_ONLY");
    return !o || !*o || strstr(name, o) != NULL;
}

#define RUN(name)                                                                 \
    if (check_selected(#name)) do {                                               \
        check_cur_name = #name;                                                   \
        check_cur_failed = 0;                                                     \
        check_cur_skipped = 0;                                                    \
        name();                                                                   \
        if (check_cur_failed) { check_failed++; fprintf(stderr, "not ok %s\n", #name); } \
        else if (check_cur_skipped == 2) { check_optional_skipped++; fprintf(stderr, "skip %s (optional)\n", #name); } \
        else if (check_cur_skipped) { check_skipped++; fprintf(stderr, "skip %s\n", #name); } \
        else { check_passed++; fprintf(stderr, "ok %s\n", #name); }               \
    } while (0)

static inline int check_summary(void) {
    if (check_skipped || check_optional_skipped)
        printf("%d passed, %d failed, %d skipped\n", check_passed, check_failed,
               check_skipped + check_optional_skipped);
    else
        printf("%d passed, %d failed\n", check_passed, check_failed);
    if (check_failed) return 1;
    if (check_skipped) {
        printf("SKIPPED: %d test(s) could not run here (see SKIP lines above)\n", check_skipped);
        return 77;
    }
    return 0;
}

/* The fixtures folder: $TERN_FIXTURES, else the build's default (../shared/fixtures
 * next to the source tree). Returns NULL and prints a loud warning if absent. */
static inline const char *fixtures_dir(void) {
    const char *d = getenv("TERN_FIXTURES");
    if (!d || !*d) d = getenv("TERN_FIXTURES_DEFAULT");
    struct stat st;
    if (!d || stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr,
                "\n*** FIXTURES MISSING: set TERN_FIXTURES to ../shared/fixtures; "
                "fixture tests are SKIPPED ***\n\n");
        return NULL;
    }
    return d;
}

/* Read a whole file into a NUL-terminated malloc'd buffer (free()); its size
 * in *n when n != NULL. NULL when it cannot be read. */
static inline void *check_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)sz + 1)) != NULL) {
        if (fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
        else { b[sz] = 0; if (n) *n = (size_t)sz; }
    }
    fclose(f);
    return b;
}

/* Path join into a static buffer rotation (4 slots). */
static inline const char *fixture_path(const char *rel) {
    static char buf[4][1024];
    static int slot;
    const char *d = fixtures_dir();
    if (!d) return NULL;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", d, rel);
    return b;
}

/* Deterministic xorshift RNG for tests: fresh data per run comes from the seed
 * printed at start (TERN_TEST_SEED overrides). */
static unsigned long long check_rng_state = 0x9E3779B97F4A7C15ull;
static inline void check_seed(void) {
    const char *s = getenv("TERN_TEST_SEED");
    unsigned long long seed = s ? strtoull(s, NULL, 0) : (unsigned long long)time(NULL);
    check_rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    fprintf(stderr, "test seed %llu (set TERN_TEST_SEED to repeat)\n", seed);
}
static inline unsigned long long check_rand_u64(void) {
    unsigned long long x = check_rng_state;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return check_rng_state = x;
}
static inline double check_rand_unit(void) { /* [0,1) */
    return (double)(check_rand_u64() >> 11) * (1.0 / 9007199254740992.0);
}
static inline float check_rand_normal(void) {
    double u1 = check_rand_unit() + 1e-300, u2 = check_rand_unit();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Index of the largest of v[0..n) (the first on ties), and the gap between the
 * largest and the second largest (model parity checks). */
static inline int check_argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}
static inline float check_top2_margin(const float *v, int n) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (v[i] > a) { b = a; a = v[i]; }
        else if (v[i] > b) b = v[i];
    }
    return a - b;
}

#endif
