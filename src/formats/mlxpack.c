/*
 * mlxpack.c - reader for PrismML's MLX 2-bit pack directory (format: mlxpack.h):
 * config.json + hadamard.json + model.safetensors. Validates the quantization
 * block, every module's words/scales/biases (biases exactly -scales, else the
 * pack is not ternary), the Hadamard contract against the tensors, and maps the
 * Hugging Face text_config onto GGUF hyperparameter names.
 */
#include "formats/mlxpack.h"
#include "formats/hf_meta.h"
#include "formats/json_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define CFG_MAX (64u << 20)

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool is_file(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

bool tern_mlxpack_is_dir(const char *dir) {
    struct stat st;
    if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    char *a = join(dir, "config.json"), *b = join(dir, "model.safetensors");
    bool ok = is_file(a) && is_file(b);
    free(a);
    free(b);
    return ok;
}

void tern_mlxpack_close(tern_mlxpack *p) {
    if (!p) return;
    for (size_t i = 0; p->modules && i < p->n_modules; i++) {
        free(p->modules[i].path);
        free(p->modules[i].prefix);
    }
    tern_free(p->modules, p->n_modules * sizeof *p->modules);
    cJSON_Delete(p->config);
    tern_st_close(p->st);
    tern_hadamard_free(p->hadamard);
    free(p->dir);
    tern_free(p, sizeof *p);
}

const tern_st_tensor *tern_mlxpack_tensor(const tern_mlxpack *p, const char *name) {
    if (!p || !p->st || !name) return NULL;
    const tern_st_tensor *t = tern_st_find(p->st, name);
    if (t || !p->tensor_prefix || !*p->tensor_prefix) return t;
    char buf[512];
    if ((size_t)snprintf(buf, sizeof buf, "%s%s", p->tensor_prefix, name) >= sizeof buf) return NULL;
    return tern_st_find(p->st, buf);
}

const tern_mlx_module *tern_mlxpack_module(const tern_mlxpack *p, const char *path) {
    for (size_t i = 0; p && path && i < p->n_modules; i++)
        if (!strcmp(p->modules[i].path, path) || !strcmp(p->modules[i].prefix, path)) return &p->modules[i];
    return NULL;
}

/* ------------------------------------------------------------ config getters */

static const char *cfg_src(const tern_mlxpack *p) { (void)p; return "config.json (text_config)"; }

tern_status tern_mlxpack_cfg_i64(const tern_mlxpack *p, const char *key, int64_t *out) {
    tern_status st = tern_json_req_i64(p->text_config, key, INT64_MIN / 2, INT64_MAX / 2, cfg_src(p), out);
    return st ? tern_fail_prefix(st, "%s", p->dir) : st;
}
tern_status tern_mlxpack_cfg_i64_opt(const tern_mlxpack *p, const char *key, int64_t *out) {
    tern_status st = tern_json_opt_i64(p->text_config, key, INT64_MIN / 2, INT64_MAX / 2, cfg_src(p), out);
    return st ? tern_fail_prefix(st, "%s", p->dir) : st;
}
tern_status tern_mlxpack_cfg_f64(const tern_mlxpack *p, const char *key, double *out) {
    tern_status st = tern_json_req_f64(p->text_config, key, cfg_src(p), out);
    return st ? tern_fail_prefix(st, "%s", p->dir) : st;
}
tern_status tern_mlxpack_cfg_f64_opt(const tern_mlxpack *p, const char *key, double *out) {
    tern_status st = tern_json_opt_f64(p->text_config, key, cfg_src(p), out);
    return st ? tern_fail_prefix(st, "%s", p->dir) : st;
}
tern_status tern_mlxpack_cfg_bool_opt(const tern_mlxpack *p, const char *key, bool *out) {
    tern_status st = tern_json_opt_bool(p->text_config, key, cfg_src(p), out);
    return st ? tern_fail_prefix(st, "%s", p->dir) : st;
}

/* ------------------------------------------------------------ modules */

static const tern_st_tensor *mod_tensor(const tern_mlxpack *p, const tern_mlx_module *m, const char *suffix) {
    char buf[600];
    if ((size_t)snprintf(buf, sizeof buf, "%s.%s", m->prefix, suffix) >= sizeof buf) return NULL;
    return tern_st_find(p->st, buf);
}

/* Shapes, dtypes and biases == -scales of one module (no code scan). */
static tern_status check_module(const tern_mlxpack *p, const tern_mlx_module *m, tern_mlx_ternary *out) {
    const char *src = p->st->map.path;
    const tern_st_tensor *w = mod_tensor(p, m, "weight"), *s = mod_tensor(p, m, "scales"), *b = mod_tensor(p, m, "biases");
    if (!w) return tern_fail(TERN_ERR_FORMAT, "%s: module '%s': tensor '%s.weight' is missing", src, m->path, m->prefix);
    if (!s || !b)
        return tern_fail(TERN_ERR_FORMAT, "%s: module '%s': '%s.%s' is missing (a ternary module needs weight, scales, biases)",
                         src, m->path, m->prefix, s ? "biases" : "scales");
    if (strcmp(w->dtype, "U32") || w->n_dims != 2)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' is %s with %u dims, expected U32 [N, K/16]", src, w->name,
                         w->dtype, w->n_dims);
    uint64_t N = w->shape[0], K = w->shape[1] * 16, G = p->group_size;
    if (N == 0 || K == 0 || K % G)
        return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s': K = %llu is not a positive multiple of group_size %llu", src,
                         w->name, (unsigned long long)K, (unsigned long long)G);
    uint64_t shp[2] = {N, K / G};
    tern_status st;
    if ((st = tern_st_expect(p->st, s, "F16", 2, shp)) || (st = tern_st_expect(p->st, b, "F16", 2, shp))) return st;
    for (uint64_t i = 0; i < N * (K / G); i++) {
        uint16_t sv = tern_rd16(s->data + 2 * i), bv = tern_rd16(b->data + 2 * i);
        if ((sv ^ bv) == 0x8000 && (sv & 0x7fff) <= 0x7c00) continue; /* fast path: exact negation, not NaN */
        float fs = tern_f16_to_f32(sv), fb = tern_f16_to_f32(bv);
        if (!(fb == -fs))
            return tern_fail(TERN_ERR_FORMAT, "%s: module '%s' is not ternary: biases[%llu][%llu] = %g but scales = %g "
                             "(biases must be exactly -scales)", src, m->path, (unsigned long long)(i / (K / G)),
                             (unsigned long long)(i % (K / G)), fb, fs);
    }
    const tern_st_tensor *sg = mod_tensor(p, m, "signs");
    if (sg) {
        uint64_t ks[1] = {K};
        if ((st = tern_st_expect(p->st, sg, "F16", 1, ks))) return st;
    }
    if (out) {
        out->module = m;
        out->N = N;
        out->K = K;
        out->group_size = (uint32_t)G;
        out->words = w->data;
        out->scales = s->data;
        out->biases = b->data;
        out->signs = sg ? sg->data : NULL;
    }
    return TERN_OK;
}

tern_status tern_mlxpack_ternary(const tern_mlxpack *p, const tern_mlx_module *m, tern_mlx_ternary *out) {
    tern_mlx_ternary t;
    tern_status st = check_module(p, m, &t);
    if (st) return st;
    const char *src = p->st->map.path;
    uint64_t nw = t.N * (t.K / 16);
    /* fast scan: 64 bits at a time, 4 KB per check; locate only on a hit */
    uint64_t i = 0;
    for (; i + 512 <= nw; i += 512) {
        uint64_t acc = 0;
        for (uint64_t k = 0; k < 512; k += 2) {
            uint64_t w = tern_rd64(t.words + 4 * (i + k));
            acc |= w & (w >> 1);
        }
        if (acc & 0x5555555555555555ull) break;
    }
    for (; i < nw; i++) {
        uint32_t w = tern_rd32(t.words + 4 * i);
        uint32_t c3 = w & (w >> 1) & 0x55555555u;
        if (c3) {
            int j = __builtin_ctz(c3) / 2;
            return tern_fail(TERN_ERR_FORMAT, "%s: module '%s': code 3 at row %llu, column %llu (byte offset %llu of "
                             "'%s.weight'): not a ternary code", src, m->path, (unsigned long long)(i / (t.K / 16)),
                             (unsigned long long)((i % (t.K / 16)) * 16 + j), (unsigned long long)(4 * i), m->prefix);
        }
    }
    if (t.signs) {
        char wname[600];
        snprintf(wname, sizeof wname, "%s.weight", m->prefix);
        const float *ref = p->hadamard ? tern_hadamard_signs_for_width(p->hadamard, t.K) : NULL;
        for (uint64_t k = 0; k < t.K; k++) {
            uint16_t v = tern_rd16(t.signs + 2 * k);
            if (v != 0x3C00 && v != 0xBC00)
                return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s.signs' element %llu is not +1 or -1", src, m->prefix,
                                 (unsigned long long)k);
            if (ref && (ref[k] < 0) != (v == 0xBC00))
                return tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s.signs' element %llu disagrees with hadamard.json's "
                                 "sign vector for K = %llu", src, m->prefix, (unsigned long long)k, (unsigned long long)t.K);
        }
    }
    if (out) *out = t;
    return TERN_OK;
}

/* Hadamard validation lookup in the pack's namespace: "X.weight" of a module. */
static bool pack_lookup(const char *name, uint64_t *K, bool *tern, void *user) {
    const tern_mlxpack *p = user;
    const tern_st_tensor *t = tern_st_find(p->st, name);
    if (!t) return false;
    *tern = false;
    *K = t->n_dims ? t->shape[t->n_dims - 1] : 0;
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight") && !strcmp(t->dtype, "U32") && t->n_dims == 2) {
        char buf[600];
        snprintf(buf, sizeof buf, "%.*s.scales", (int)(n - 7), name);
        if (tern_st_find(p->st, buf)) {
            *tern = true;
            *K = t->shape[1] * 16;
        }
    }
    return true;
}

tern_status tern_mlxpack_open(const char *dir, tern_mlxpack **out) {
    if (!dir || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_mlxpack_open: NULL argument");
    *out = NULL;
    tern_mlxpack *p = tern_calloc(1, sizeof *p);
    if (!p) return tern_fail(TERN_ERR_NOMEM, "%s: out of memory", dir);
    p->dir = strdup(dir);
    tern_status st = TERN_OK;
    char *cfg_path = join(dir, "config.json"), *st_path = join(dir, "model.safetensors"), *h_path = NULL;
    if (!p->dir || !cfg_path || !st_path) { st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", dir); goto done; }
    if ((st = tern_json_parse_file(cfg_path, CFG_MAX, &p->config))) goto done;
    const cJSON *c = p->config;
    if (!cJSON_IsObject(c)) { st = tern_fail(TERN_ERR_FORMAT, "%s: not a JSON object", cfg_path); goto done; }
    if ((st = tern_json_req_str(c, "model_type", cfg_path, &p->model_type))) goto done;
    const cJSON *tc = tern_json_get(c, "text_config");
    if (tc && !cJSON_IsObject(tc)) { st = tern_fail(TERN_ERR_FORMAT, "%s: key 'text_config' is not an object", cfg_path); goto done; }
    p->text_config = tc ? tc : c;
    p->text_model_type = "";
    if ((st = tern_json_opt_str(p->text_config, "model_type", cfg_path, &p->text_model_type))) goto done;
    const cJSON *q;
    if ((st = tern_json_req_obj(c, "quantization", cfg_path, &q))) goto done;
    int64_t bits, gs;
    const char *mode;
    if ((st = tern_json_req_i64(q, "bits", 1, 64, cfg_path, &bits)) ||
        (st = tern_json_req_i64(q, "group_size", 1, 1 << 20, cfg_path, &gs)) ||
        (st = tern_json_req_str(q, "mode", cfg_path, &mode)))
        goto done;
    if (bits != 2) { st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: quantization.bits = %lld; only 2-bit ternary packs are supported", cfg_path, (long long)bits); goto done; }
    if (gs % 16 || (gs & (gs - 1))) { st = tern_fail(TERN_ERR_FORMAT, "%s: quantization.group_size = %lld is not a power of two >= 16", cfg_path, (long long)gs); goto done; }
    if (strcmp(mode, "affine")) { st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: quantization.mode is \"%.40s\", expected \"affine\"", cfg_path, mode); goto done; }
    p->bits = (uint32_t)bits;
    p->group_size = (uint32_t)gs;
    if ((st = tern_st_open(st_path, &p->st))) goto done;
    const cJSON *mods;
    if ((st = tern_json_req_arr(c, "modules", cfg_path, &mods))) goto done;
    size_t nm = (size_t)cJSON_GetArraySize(mods);
    p->modules = tern_calloc(nm, sizeof *p->modules);
    if (!p->modules) { st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", dir); goto done; }
    p->n_modules = nm;
    p->tensor_prefix = "";
    size_t i = 0;
    for (const cJSON *e = mods->child; e && i < nm; e = e->next, i++) {
        tern_mlx_module *m = &p->modules[i];
        char what[64];
        snprintf(what, sizeof what, "%s: modules[%zu]", cfg_path, i);
        if (!cJSON_IsObject(e)) { st = tern_fail(TERN_ERR_FORMAT, "%s is not an object", what); goto done; }
        const char *path, *dt = "float16";
        int64_t blk = 0;
        if ((st = tern_json_req_str(e, "path", what, &path)) || (st = tern_json_opt_i64(e, "block", 0, 1 << 30, what, &blk)) ||
            (st = tern_json_opt_bool(e, "embedding", what, &m->embedding)) || (st = tern_json_opt_str(e, "dtype", what, &dt)))
            goto done;
        m->block = (uint32_t)blk;
        snprintf(m->dtype, sizeof m->dtype, "%s", dt);
        m->path = strdup(path);
        if (!m->path) { st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", dir); goto done; }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(p->modules[k].path, path)) { st = tern_fail(TERN_ERR_FORMAT, "%s: module path '%s' is listed twice", what, path); goto done; }
        /* resolve the tensor prefix: P.weight or language_model.P.weight */
        static const char *pfx[] = {"", "language_model."};
        for (int k = 0; k < 2 && !m->prefix; k++) {
            size_t n = strlen(pfx[k]) + strlen(path) + 8;
            char *buf = malloc(n + 1);
            if (!buf) { st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", dir); goto done; }
            snprintf(buf, n + 1, "%s%s.weight", pfx[k], path);
            if (tern_st_find(p->st, buf)) {
                buf[n - 8] = 0; /* drop ".weight" */
                m->prefix = buf;
                if (i == 0) p->tensor_prefix = pfx[k];
            } else free(buf);
        }
        if (!m->prefix) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: module '%s' has no tensor '%s.weight' in %s", cfg_path, path, path, st_path);
            goto done;
        }
        if ((st = check_module(p, m, NULL))) goto done;
    }
    /* hadamard.json (the name may be given by config.hadamard_config) */
    const char *hname = "hadamard.json";
    if ((st = tern_json_opt_str(c, "hadamard_config", cfg_path, &hname))) goto done;
    if (strchr(hname, '/') || !strcmp(hname, "..") || !*hname) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: key 'hadamard_config' must be a file name in the pack, not \"%.80s\"", cfg_path, hname);
        goto done;
    }
    h_path = join(dir, hname);
    if (!h_path) { st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory", dir); goto done; }
    if (is_file(h_path)) {
        if ((st = tern_hadamard_from_json_file(h_path, &p->hadamard))) goto done;
        if ((st = tern_hadamard_validate(p->hadamard, pack_lookup, p, h_path))) goto done;
    } else if (tern_json_get(c, "hadamard_config")) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: key 'hadamard_config' names %s, which does not exist", cfg_path, h_path);
        goto done;
    }
done:
    free(cfg_path);
    free(st_path);
    free(h_path);
    if (st) { tern_mlxpack_close(p); return st; }
    *out = p;
    return TERN_OK;
}

/* ------------------------------------------------------------ GGUF hyperparameters */

tern_status tern_mlxpack_gguf_hparams(const tern_mlxpack *p, const char **arch, tern_mlx_emit_fn emit,
                                      tern_mlx_emit_arr_fn emit_arr, void *user) {
    const cJSON *t = p->text_config;
    const char *src = "config.json";
    const char *tmt = p->text_model_type ? p->text_model_type : "";
    const char *a;
    if (!strcmp(tmt, "qwen3_5_text") || !strcmp(tmt, "qwen3_5") || strstr(p->model_type, "qwen35") || strstr(p->model_type, "qwen3_5"))
        a = "qwen35";
    else if (!strcmp(tmt, "qwen3") || !strcmp(p->model_type, "qwen3"))
        a = "qwen3";
    else
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s/config.json: model_type '%s' / text_config.model_type '%s' is not qwen35 or qwen3",
                         p->dir, p->model_type, tmt);
    *arch = a;
    char key[128];
    struct { const char *hf, *gg; } ints[] = {
        {"num_hidden_layers", "block_count"}, {"max_position_embeddings", "context_length"},
        {"hidden_size", "embedding_length"}, {"intermediate_size", "feed_forward_length"},
        {"num_attention_heads", "attention.head_count"}, {"num_key_value_heads", "attention.head_count_kv"},
        {"head_dim", "attention.key_length"}, {"head_dim", "attention.value_length"},
        {"linear_conv_kernel_dim", "ssm.conv_kernel"}, {"linear_key_head_dim", "ssm.state_size"},
        {"linear_num_key_heads", "ssm.group_count"}, {"linear_num_value_heads", "ssm.time_step_rank"},
    };
    size_t n_ints = !strcmp(a, "qwen35") ? sizeof ints / sizeof ints[0] : 8;
    tern_status st;
    for (size_t i = 0; i < n_ints; i++) {
        int64_t v;
        const cJSON *j = tern_json_get(t, ints[i].hf);
        if (!j) continue;
        if ((st = tern_json_as_i64(j, 0, INT64_MAX / 2, src, ints[i].hf, &v))) return tern_fail_prefix(st, "%s", p->dir);
        snprintf(key, sizeof key, "%s.%s", a, ints[i].gg);
        emit(key, (double)v, true, user);
    }
    double eps;
    if (tern_json_get(t, "rms_norm_eps")) {
        if ((st = tern_json_req_f64(t, "rms_norm_eps", src, &eps))) return tern_fail_prefix(st, "%s", p->dir);
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
        emit(key, eps, false, user);
    }
    const cJSON *rp = tern_json_get(t, "rope_parameters");
    double theta = 0;
    if ((st = tern_json_opt_f64(t, "rope_theta", src, &theta))) return tern_fail_prefix(st, "%s", p->dir);
    if (rp && cJSON_IsObject(rp) && (st = tern_json_opt_f64(rp, "rope_theta", src, &theta))) return tern_fail_prefix(st, "%s", p->dir);
    if (theta > 0) {
        snprintf(key, sizeof key, "%s.rope.freq_base", a);
        emit(key, theta, false, user);
    }
    if (!strcmp(a, "qwen35")) {
        int64_t nv = 0, vd = 0, hd = 0;
        if (!tern_json_opt_i64(t, "linear_num_value_heads", 0, 1 << 20, src, &nv) &&
            !tern_json_opt_i64(t, "linear_value_head_dim", 0, 1 << 20, src, &vd) && nv && vd) {
            snprintf(key, sizeof key, "%s.ssm.inner_size", a);
            emit(key, (double)(nv * vd), true, user);
        }
        const cJSON *lt = tern_json_get(t, "layer_types");
        int64_t fai = 0;
        if ((st = tern_json_opt_i64(t, "full_attention_interval", 1, 1 << 20, src, &fai))) return tern_fail_prefix(st, "%s", p->dir);
        if (!fai && cJSON_IsArray(lt)) {
            int idx = 0;
            for (const cJSON *e = lt->child; e; e = e->next, idx++)
                if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) { fai = idx + 1; break; }
        }
        if (fai) {
            snprintf(key, sizeof key, "%s.full_attention_interval", a);
            emit(key, (double)fai, true, user);
        }
        double prf = 0; /* absent: no rotary width key */
        if ((st = tern_hf_partial_rotary(t, rp, src, &prf))) return tern_fail_prefix(st, "%s", p->dir);
        if (!tern_json_opt_i64(t, "head_dim", 0, 1 << 20, src, &hd) && hd && prf > 0) {
            snprintf(key, sizeof key, "%s.rope.dimension_count", a);
            emit(key, (double)(int64_t)(hd * prf), true, user);
        }
        const cJSON *ms = rp && cJSON_IsObject(rp) ? tern_json_get(rp, "mrope_section") : NULL;
        if (ms && cJSON_IsArray(ms) && emit_arr) {
            int64_t v[4] = {0, 0, 0, 0};
            size_t n = 0;
            for (const cJSON *e = ms->child; e && n < 4; e = e->next, n++)
                if ((st = tern_json_as_i64(e, 0, 1 << 20, src, "rope_parameters.mrope_section", &v[n])))
                    return tern_fail_prefix(st, "%s", p->dir);
            snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
            emit_arr(key, v, 4, user);
        }
    }
    return TERN_OK;
}
