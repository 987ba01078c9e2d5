/*
 * cli_util.c - argument parsing, error printing, the progress bar and the model
 * parameters taken from the environment.
 */
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "tern %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try 'tern %s --help')\n", cmd);
    return 2;
}

int cli_lib_error(const char *cmd, tern_status st) {
    const char *m = tern_last_error();
    fprintf(stderr, "tern %s: %s\n", cmd, (m && *m) ? m : tern_status_str(st));
    return 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
double cli_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_f64(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int cli_argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

bool cli_parse_ids(const char *s, int32_t **out, size_t *n) {
    size_t cap = 64, len = 0;
    int32_t *a = malloc(cap * sizeof *a);
    if (!a) return false;
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && *end != ',' && *end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')) {
            free(a);
            return false;
        }
        if (len == cap) {
            cap *= 2;
            int32_t *b = realloc(a, cap * sizeof *a);
            if (!b) { free(a); return false; }
            a = b;
        }
        a[len++] = (int32_t)v;
        p = end;
    }
    *out = a;
    *n = len;
    return true;
}

char *cli_read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - 1 - n, f);
        n += r;
        if (!r) break;
    }
    b[n] = 0;
    if (len) *len = n;
    return b;
}

bool cli_is_one_of(const char *a, const char *list) {
    size_t n = strlen(a);
    for (const char *p = list; *p;) {
        while (*p == ' ') p++;
        const char *e = p;
        while (*e && *e != ' ') e++;
        if ((size_t)(e - p) == n && n > 0 && !strncmp(p, a, n)) return true;
        p = e;
    }
    return false;
}

bool cli_is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

int cli_parse_cache_type(const char *cmd, int argc, char **argv, int *i, tern_cache_type *k,
                         tern_cache_type *v) {
    const char *a = argv[*i];
    int which; /* 1 keys, 2 values, 3 both */
    if (!strcmp(a, "--cache-type")) which = 3;
    else if (!strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk")) which = 1;
    else if (!strcmp(a, "--cache-type-v") || !strcmp(a, "-ctv")) which = 2;
    else return 0;
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "%s needs a value (f32, f16, bf16 or q8_0)", a);
        return 2;
    }
    tern_cache_type t;
    const char *val = argv[++*i];
    if (tern_cache_type_parse(val, &t) != TERN_OK) {
        cli_usage_error(cmd, "bad value '%s' for %s (f32, f16, bf16 or q8_0)", val, a);
        return 2;
    }
    if (which & 1) *k = t;
    if (which & 2) *v = t;
    return 1;
}

int cli_parse_gdn_state(const char *cmd, int argc, char **argv, int *i, int *gdn_state) {
    const char *a = argv[*i];
    if (strcmp(a, "--gdn-state")) return 0;
    const char *val = *i + 1 < argc ? argv[++*i] : NULL;
    if (val && !strcmp(val, "f32")) *gdn_state = TERN_GDN_STATE_F32;
    else if (val && !strcmp(val, "bf16")) *gdn_state = TERN_GDN_STATE_BF16;
    else {
        cli_usage_error(cmd, "bad value '%s' for --gdn-state (f32 or bf16)", val ? val : "");
        return 2;
    }
    return 1;
}

void cli_cache_line(const tern_session *s, char *buf, size_t n) {
    const tern_cache_type k = tern_session_cache_type(s, false), v = tern_session_cache_type(s, true);
    char types[32];
    if (k == v) snprintf(types, sizeof types, "%s", tern_cache_type_name(k));
    else snprintf(types, sizeof types, "%s/%s", tern_cache_type_name(k), tern_cache_type_name(v));
    snprintf(buf, n, "KV cache %s: %.3f MiB now (%d tokens), %.1f MiB at ctx %d", types,
             tern_session_cache_bytes(s, tern_session_pos(s)) / 1048576.0, tern_session_pos(s),
             tern_session_cache_bytes(s, tern_session_n_ctx(s)) / 1048576.0, tern_session_n_ctx(s));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, const char *label, bool quiet) {
    p->label = label;
    p->quiet = quiet;
    p->t0 = now_s();
    p->last_pct = -1;
}

bool cli_progress_cb(uint64_t done, uint64_t total, void *user) {
    cli_progress *p = user;
    if (p->quiet || total == 0) return true;
    int pct = (int)(100.0 * (double)done / (double)total);
    if (pct == p->last_pct) return true;
    p->last_pct = pct;
    int w = 30, fill = pct * w / 100;
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = 0;
    double el = now_s() - p->t0;
    fprintf(stderr, "\r%s [%s] %3d%% %.1fs", p->label, bar, pct, el);
    fflush(stderr);
    return true;
}

void cli_progress_done(cli_progress *p) {
    if (p->quiet) return;
    if (p->last_pct >= 0) fprintf(stderr, "\n");
}

void cli_model_params_from_env(tern_model_params *p) {
    tern_model_params_default(p);
    cli_env_model_params(p);
}
