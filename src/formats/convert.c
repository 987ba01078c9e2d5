/*
 * convert.c - `tern convert` library part: GGUF <-> GGUF transcodes between the
 * ternary layouts (PQ2_0, PTQ1_0, fork Q2_0, mainline Q2_0 g64), streamed tensor
 * by tensor through the GGUF writer's fill callback, and dispatch to the MLX pack
 * directions (convert_mlx.c). Rules in convert.h.
 */
#include "formats/convert.h"

#include "formats/codecs.h"
#include "formats/convert_internal.h"
#include "formats/gguf.h"
#include "formats/hf_meta.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

bool tern_convert_target_parse(const char *s, tern_convert_target *out) {
    static const char *names[] = {"pq2_0", "ptq1_0", "q2_0", "q2_0_g64", "mlx"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *out = (tern_convert_target)i;
            return true;
        }
    return false;
}

static tern_dtype target_dtype(tern_convert_target t) {
    switch (t) {
    case TERN_CONV_PQ2_0: return TERN_DT_PQ2_0;
    case TERN_CONV_PTQ1_0: return TERN_DT_PTQ1_0;
    case TERN_CONV_Q2_0: return TERN_DT_Q2_0;
    case TERN_CONV_Q2_0_G64: return TERN_DT_Q2_0_G64;
    default: return TERN_DT_COUNT;
    }
}

typedef struct xcode_job {
    const tern_gguf_tensor *t;
    tern_dtype to;
} xcode_job;

static tern_status fill_transcode(void *dst, uint64_t nbytes, void *user) {
    xcode_job *j = user;
    uint64_t K = j->t->ne[0], N = j->t->n_elems / K;
    if (tern_codec_row_bytes(j->to, K) * N != nbytes)
        return tern_fail(TERN_ERR_INTERNAL, "tensor '%s': size mismatch", j->t->name);
    return tern_transcode_rows(j->t->type, j->t->data, j->to, dst, K, N, j->t->name);
}

tern_status tern_convert_set_apply(tern_gguf_writer *w, const char *a) {
    if (!a) return tern_fail(TERN_ERR_INVALID_ARG, "convert: NULL --set assignment");
    const char *eq = strchr(a, '=');
    const char *colon = eq ? strchr(eq + 1, ':') : NULL;
    if (!eq || eq == a || !colon)
        return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set '%s': expected KEY=TYPE:VALUE (TYPE f32, i32, u32, bool or str)", a);
    char key[256], type[8];
    size_t kn = (size_t)(eq - a), tn = (size_t)(colon - eq - 1);
    if (kn >= sizeof key) return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set: key longer than 255 bytes");
    if (tn >= sizeof type)
        return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set '%s': unknown type (f32, i32, u32, bool or str)", a);
    memcpy(key, a, kn);
    key[kn] = 0;
    memcpy(type, eq + 1, tn);
    type[tn] = 0;
    const char *v = colon + 1;
    char *end = NULL;
    if (!strcmp(type, "str")) return w ? tern_gguf_w_set_str(w, key, v) : TERN_OK;
    if (!strcmp(type, "bool")) {
        if (strcmp(v, "true") && strcmp(v, "false"))
            return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set %s: bool value '%s' is not true or false", key, v);
        return w ? tern_gguf_w_set_bool(w, key, v[0] == 't') : TERN_OK;
    }
    if (!strcmp(type, "f32")) {
        errno = 0;
        float f = strtof(v, &end);
        if (!*v || *end || errno || !isfinite(f))
            return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set %s: '%s' is not a finite float", key, v);
        return w ? tern_gguf_w_set_f32(w, key, f) : TERN_OK;
    }
    if (!strcmp(type, "i32") || !strcmp(type, "u32")) {
        bool u = type[0] == 'u';
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno || x < (u ? 0 : INT32_MIN) || x > (u ? (long long)UINT32_MAX : INT32_MAX))
            return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set %s: '%s' is not a %s", key, v,
                             u ? "32-bit unsigned integer" : "32-bit integer");
        if (!w) return TERN_OK;
        return u ? tern_gguf_w_set_u32(w, key, (uint32_t)x) : tern_gguf_w_set_i32(w, key, (int32_t)x);
    }
    return tern_fail(TERN_ERR_INVALID_ARG, "convert: --set %s: unknown type '%s' (f32, i32, u32, bool or str)", key, type);
}

static tern_status gguf_to_gguf(const tern_gguf *g, const char *out, const tern_convert_opts *o) {
    tern_dtype to = target_dtype(o->to);
    tern_gguf_writer *w = NULL;
    xcode_job *jobs = NULL;
    tern_status st = tern_gguf_writer_new(&w);
    if (st) return st;
    jobs = tern_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *jobs);
    if (!jobs) {
        tern_gguf_writer_free(w);
        return tern_fail(TERN_ERR_NOMEM, "convert: out of memory");
    }
    st = tern_gguf_w_copy_kv(w, g, NULL, NULL);
    int n_tern = 0;
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        if (t->type == TERN_DT_Q1_0) {
            st = tern_fail(TERN_ERR_UNSUPPORTED,
                           "%s: tensor '%s' is Q1_0 (binary): tern convert only transcodes "
                           "ternary layouts",
                           g->map.path, t->name);
            break;
        }
        if (tern_codec_is_ternary(t->type)) {
            if (t->ne[0] % 128) {
                st = tern_fail(TERN_ERR_UNSUPPORTED,
                               "%s: tensor '%s': row length %llu is not a multiple of 128",
                               g->map.path, t->name, (unsigned long long)t->ne[0]);
                break;
            }
            jobs[i].t = t;
            jobs[i].to = to;
            n_tern++;
            st = tern_gguf_w_add_tensor(w, t->name, t->n_dims, t->ne, to, NULL, fill_transcode,
                                        &jobs[i]);
        } else {
            st = tern_gguf_w_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL, NULL);
        }
    }
    if (!st && n_tern == 0)
        st = tern_fail(TERN_ERR_FORMAT, "%s: no ternary tensors to convert", g->map.path);
    /* setting an existing key replaces it in place: key order is kept */
    if (!st) st = tern_gguf_w_set_u32(w, "general.file_type", tern_hf_file_type(to));
    if (!st && o->name) st = tern_gguf_w_set_str(w, "general.name", o->name);
    for (size_t i = 0; i < o->n_set && !st; i++) st = tern_convert_set_apply(w, o->set[i]);
    if (!st) st = tern_gguf_w_write(w, out, o->progress, o->progress_user);
    tern_free(jobs, (g->n_tensors ? g->n_tensors : 1) * sizeof *jobs);
    tern_gguf_writer_free(w);
    return st;
}

static bool is_dir(const char *p) {
    struct stat s;
    return stat(p, &s) == 0 && S_ISDIR(s.st_mode);
}

tern_status tern_convert(const char *in, const char *out, const tern_convert_opts *o) {
    if (!in || !out || !o) return tern_fail(TERN_ERR_INVALID_ARG, "convert: NULL argument");
    for (size_t i = 0; i < o->n_set; i++) {
        tern_status sst = tern_convert_set_apply(NULL, o->set[i]);
        if (sst) return sst;
    }
    if (o->n_set && (o->to == TERN_CONV_MLX || is_dir(in)))
        return tern_fail(TERN_ERR_UNSUPPORTED, "convert: --set writes GGUF metadata: it works GGUF to GGUF only");
    if (is_dir(in)) {
        if (o->to == TERN_CONV_MLX)
            return tern_fail(TERN_ERR_UNSUPPORTED, "convert: %s is already an MLX pack", in);
        return tern_convert_mlx_to_gguf(in, out, o);
    }
    tern_gguf *g = NULL;
    tern_status st = tern_gguf_open(in, &g);
    if (st) return st;
    if (o->to == TERN_CONV_MLX)
        st = tern_convert_gguf_to_mlx(g, out, o);
    else
        st = gguf_to_gguf(g, out, o);
    tern_gguf_close(g);
    return st;
}

tern_status tern_convert_model(const char *in, const char *out, const char *to, const char *name,
                               tern_progress_fn progress, void *user) {
    tern_convert_opts o = {0};
    if (!to || !tern_convert_target_parse(to, &o.to))
        return tern_fail(TERN_ERR_INVALID_ARG, "convert: unknown target '%s' (pq2_0, ptq1_0, q2_0, q2_0_g64, mlx)",
                         to ? to : "(null)");
    o.name = name;
    o.progress = progress;
    o.progress_user = user;
    return tern_convert(in, out, &o);
}
