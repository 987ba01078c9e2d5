/*
 * cmd_inspect.c - `tern inspect FILE|DIR [--json]`: describe a GGUF file or an
 * MLX pack directory: architecture and hyperparameters (by GGUF key names),
 * the tensor table, the Hadamard contract, the tokenizer and the total bytes.
 *
 * JSON output (one object):
 *   path, format ("gguf" | "mlx-pack"), architecture, name,
 *   metadata     {GGUF key: value} - every scalar key and every array of at most
 *                16 elements (for a pack: text_config mapped to GGUF names)
 *   shape_order  "ne" (GGUF: innermost first) | "row-major" (safetensors)
 *   tensors      [{name, type, shape, bytes, offset}]
 *   n_tensors, total_bytes, file_bytes
 *   hadamard     null | {version, block_size, transform, axis, sign_mode,
 *                sign_widths, negative_signs, weight_names, inverse_weight_names,
 *                gdn_v_grouped}
 *   tokenizer    null | {model, pre, vocab_size, n_merges, bos_token_id,
 *                eos_token_id, padding_token_id, add_bos_token, add_eos_token,
 *                has_chat_template}
 */
#include "cli/cli.h"
#include "formats/gguf.h"
#include "formats/hadamard.h"
#include "formats/json_util.h"
#include "formats/mlxpack.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern inspect FILE|DIR [--json]\n\n"
            "Describe a GGUF file (v3; F32/F16/BF16/Q8_0/PQ2_0/PTQ1_0/Q1_0/Q2_0 g128 or g64)\n"
            "or an MLX 2-bit pack directory (config.json + hadamard.json + model.safetensors).\n"
            "The file is fully validated first; a malformed file is an error (exit 1).\n\n"
            "Prints: architecture and hyperparameters (GGUF key names; for a pack, its\n"
            "text_config mapped to those names), the tensor table (name, type, shape,\n"
            "bytes), the prism.hadamard contract, the tokenizer summary, total bytes.\n\n"
            "options:\n"
            "  --json      one JSON object on stdout: architecture, metadata, shape_order,\n"
            "              tensors [{name, type, shape, bytes, offset}], n_tensors,\n"
            "              total_bytes, file_bytes, hadamard (null when absent), tokenizer\n"
            "  -h, --help  this help\n\n"
            "GGUF shapes are in ne order (row length K first); pack shapes are row-major.\n"
            "exit status: 0 ok, 1 invalid or unreadable input, 2 usage error\n");
}

/* ------------------------------------------------------------ shared pieces */

static cJSON *hadamard_json(const tern_hadamard_meta *h) {
    if (!h) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "version", h->version);
    cJSON_AddNumberToObject(o, "block_size", h->block_size);
    cJSON_AddStringToObject(o, "transform", TERN_HADAMARD_TRANSFORM);
    cJSON_AddStringToObject(o, "axis", TERN_HADAMARD_AXIS);
    cJSON_AddStringToObject(o, "sign_mode", "explicit");
    cJSON *w = cJSON_AddArrayToObject(o, "sign_widths"), *neg = cJSON_AddArrayToObject(o, "negative_signs");
    for (uint32_t i = 0; i < h->n_widths; i++) {
        int n = 0;
        for (uint32_t k = 0; k < h->widths[i]; k++) n += h->signs[i][k] < 0;
        cJSON_AddItemToArray(w, cJSON_CreateNumber(h->widths[i]));
        cJSON_AddItemToArray(neg, cJSON_CreateNumber(n));
    }
    cJSON *wn = cJSON_AddArrayToObject(o, "weight_names");
    for (uint32_t i = 0; i < h->n_weights; i++) cJSON_AddItemToArray(wn, cJSON_CreateString(h->weight_names[i]));
    cJSON *in = cJSON_AddArrayToObject(o, "inverse_weight_names");
    for (uint32_t i = 0; i < h->n_inverse; i++) cJSON_AddItemToArray(in, cJSON_CreateString(h->inverse_names[i]));
    cJSON_AddBoolToObject(o, "gdn_v_grouped", h->gdn_v_grouped);
    return o;
}

static void print_hadamard(const tern_hadamard_meta *h) {
    if (!h) { printf("hadamard: none\n"); return; }
    printf("hadamard: version %u, block %u, %s, %s, signs explicit\n", h->version, h->block_size,
           TERN_HADAMARD_TRANSFORM, TERN_HADAMARD_AXIS);
    printf("  sign widths:");
    for (uint32_t i = 0; i < h->n_widths; i++) {
        int n = 0;
        for (uint32_t k = 0; k < h->widths[i]; k++) n += h->signs[i][k] < 0;
        printf(" %u (%d negative)", h->widths[i], n);
    }
    printf("\n  folded matrices: %u; inverse (embedding):", h->n_weights);
    for (uint32_t i = 0; i < h->n_inverse; i++) printf(" %s", h->inverse_names[i]);
    printf("\n  gdn_v_grouped: %s\n", h->gdn_v_grouped ? "true" : "false");
}

static void print_tokenizer(const cJSON *t) {
    if (!t || cJSON_IsNull(t)) { printf("tokenizer: none\n"); return; }
    printf("tokenizer:");
    for (const cJSON *e = t->child; e; e = e->next) {
        if (cJSON_IsString(e)) printf(" %s=%s", e->string, e->valuestring);
        else if (cJSON_IsBool(e)) printf(" %s=%s", e->string, cJSON_IsTrue(e) ? "true" : "false");
        else if (cJSON_IsNumber(e)) printf(" %s=%.0f", e->string, e->valuedouble);
    }
    printf("\n");
}

static void print_meta(const cJSON *m) {
    printf("metadata:\n");
    for (const cJSON *e = m->child; e; e = e->next) {
        if (!strncmp(e->string, "tokenizer.", 10)) continue;
        char *v = cJSON_PrintUnformatted(e);
        if (v && strlen(v) > 100) strcpy(v + 96, "...");
        printf("  %-44s %s\n", e->string, v ? v : "?");
        free(v);
    }
}

/* What both forms end with: tensor count and bytes, the Hadamard contract, the tokenizer. */
static void add_summary(cJSON *o, uint64_t n_tensors, uint64_t total, size_t file_bytes,
                        const tern_hadamard_meta *h, cJSON *tokenizer) {
    cJSON_AddNumberToObject(o, "n_tensors", (double)n_tensors);
    cJSON_AddNumberToObject(o, "total_bytes", (double)total);
    cJSON_AddNumberToObject(o, "file_bytes", (double)file_bytes);
    cJSON_AddItemToObject(o, "hadamard", hadamard_json(h));
    cJSON_AddItemToObject(o, "tokenizer", tokenizer);
}
static void print_json(const cJSON *o) {
    char *s = cJSON_Print(o);
    if (s) printf("%s\n", s);
    free(s);
}
static void print_tail(const cJSON *o, uint64_t total, const tern_hadamard_meta *h) {
    printf("  total tensor bytes: %llu (%.2f MB)\n", (unsigned long long)total, total / 1e6);
    print_hadamard(h);
    print_tokenizer(cJSON_GetObjectItemCaseSensitive(o, "tokenizer"));
}

static void print_shape(const uint64_t *s, uint32_t n, char *buf, size_t cap) {
    size_t a = 0;
    buf[0] = 0;
    for (uint32_t d = 0; d < n && a + 24 < cap; d++) a += snprintf(buf + a, cap - a, "%s%llu", d ? " x " : "", (unsigned long long)s[d]);
    if (n == 0) snprintf(buf, cap, "scalar");
}

/* ------------------------------------------------------------ GGUF */

static cJSON *kv_value(const tern_gguf_kv *kv) {
    switch (kv->type) {
    case TERN_GGUF_UINT8: case TERN_GGUF_UINT16: case TERN_GGUF_UINT32: case TERN_GGUF_UINT64:
        return cJSON_CreateNumber((double)kv->v.u64);
    case TERN_GGUF_INT8: case TERN_GGUF_INT16: case TERN_GGUF_INT32: case TERN_GGUF_INT64:
        return cJSON_CreateNumber((double)kv->v.i64);
    case TERN_GGUF_FLOAT32: case TERN_GGUF_FLOAT64: return cJSON_CreateNumber(kv->v.f64);
    case TERN_GGUF_BOOL: return cJSON_CreateBool(kv->v.u64 != 0);
    case TERN_GGUF_STRING: {
        char *s = strndup(kv->v.str.ptr, kv->v.str.len);
        cJSON *r = cJSON_CreateString(s ? s : "");
        free(s);
        return r;
    }
    case TERN_GGUF_ARRAY: {
        if (kv->arr_n > 16) return NULL;
        cJSON *a = cJSON_CreateArray();
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            if (kv->arr_type == TERN_GGUF_STRING) {
                char *s = strndup(kv->arr_str[i].ptr, kv->arr_str[i].len);
                cJSON_AddItemToArray(a, cJSON_CreateString(s ? s : ""));
                free(s);
            } else if (kv->arr_type == TERN_GGUF_FLOAT32 || kv->arr_type == TERN_GGUF_FLOAT64) {
                cJSON_AddItemToArray(a, cJSON_CreateNumber(tern_gguf_arr_f64(kv, i)));
            } else if (kv->arr_type == TERN_GGUF_BOOL) {
                cJSON_AddItemToArray(a, cJSON_CreateBool(tern_gguf_arr_i64(kv, i) != 0));
            } else {
                cJSON_AddItemToArray(a, cJSON_CreateNumber((double)tern_gguf_arr_i64(kv, i)));
            }
        }
        return a;
    }
    }
    return NULL;
}

static cJSON *gguf_tokenizer(const tern_gguf *g) {
    const tern_gguf_kv *model = tern_gguf_find_kv(g, "tokenizer.ggml.model");
    if (!model) return cJSON_CreateNull();
    cJSON *t = cJSON_CreateObject();
    static const char *strs[] = {"model", "pre"};
    for (int i = 0; i < 2; i++) {
        char key[64], *s = NULL;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", strs[i]);
        if (tern_gguf_get_str_opt(g, key, &s) == TERN_OK && s) cJSON_AddStringToObject(t, strs[i], s);
        free(s);
    }
    const tern_gguf_kv *tok = tern_gguf_find_kv(g, "tokenizer.ggml.tokens");
    cJSON_AddNumberToObject(t, "vocab_size", tok && tok->type == TERN_GGUF_ARRAY ? (double)tok->arr_n : 0);
    const tern_gguf_kv *mg = tern_gguf_find_kv(g, "tokenizer.ggml.merges");
    cJSON_AddNumberToObject(t, "n_merges", mg && mg->type == TERN_GGUF_ARRAY ? (double)mg->arr_n : 0);
    static const char *ids[] = {"bos_token_id", "eos_token_id", "padding_token_id", "unknown_token_id"};
    for (int i = 0; i < 4; i++) {
        char key[64];
        uint64_t v;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", ids[i]);
        if (tern_gguf_find_kv(g, key) && tern_gguf_get_u64(g, key, &v) == TERN_OK) cJSON_AddNumberToObject(t, ids[i], (double)v);
    }
    static const char *bools[] = {"add_bos_token", "add_eos_token"};
    for (int i = 0; i < 2; i++) {
        char key[64];
        bool b;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", bools[i]);
        if (tern_gguf_find_kv(g, key) && tern_gguf_get_bool(g, key, &b) == TERN_OK) cJSON_AddBoolToObject(t, bools[i], b);
    }
    cJSON_AddBoolToObject(t, "has_chat_template", tern_gguf_find_kv(g, "tokenizer.chat_template") != NULL);
    return t;
}

static int inspect_gguf(const char *path, bool json) {
    tern_gguf *g = NULL;
    tern_status st = tern_gguf_open(path, &g);
    if (st) return cli_lib_error("inspect", st);
    tern_hadamard_meta *h = NULL;
    if ((st = tern_hadamard_from_gguf(g, &h)) || (h && (st = tern_hadamard_validate_gguf(h, g)))) {
        tern_hadamard_free(h);
        tern_gguf_close(g);
        return cli_lib_error("inspect", st);
    }
    char *arch = NULL, *name = NULL;
    tern_gguf_get_str_opt(g, "general.architecture", &arch);
    tern_gguf_get_str_opt(g, "general.name", &name);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "format", "gguf");
    cJSON_AddNumberToObject(o, "gguf_version", g->version);
    cJSON_AddNumberToObject(o, "alignment", g->alignment);
    if (arch) cJSON_AddStringToObject(o, "architecture", arch); else cJSON_AddNullToObject(o, "architecture");
    if (name) cJSON_AddStringToObject(o, "name", name); else cJSON_AddNullToObject(o, "name");
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        cJSON *v = kv_value(&g->kv[i]);
        if (v) cJSON_AddItemToObject(meta, g->kv[i].key, v);
    }
    cJSON_AddStringToObject(o, "shape_order", "ne");
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "type", tern_dtype_name(t->type));
        cJSON_AddNumberToObject(e, "ggml_type", t->ggml_type);
        cJSON *s = cJSON_AddArrayToObject(e, "shape");
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->ne[d]));
        cJSON_AddNumberToObject(e, "bytes", (double)t->nbytes);
        cJSON_AddNumberToObject(e, "offset", (double)(g->data_offset + t->offset));
        cJSON_AddItemToArray(ts, e);
        total += t->nbytes;
    }
    add_summary(o, g->n_tensors, total, g->map.size, h, gguf_tokenizer(g));
    if (json) {
        print_json(o);
    } else {
        printf("file: %s (GGUF v%u, alignment %u, %zu bytes)\n", path, g->version, g->alignment, g->map.size);
        printf("architecture: %s\nname: %s\n", arch ? arch : "?", name ? name : "");
        print_meta(meta);
        printf("tensors (%llu):\n  %-40s %-9s %-20s %12s\n", (unsigned long long)g->n_tensors, "name", "type", "shape (ne)", "bytes");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const tern_gguf_tensor *t = &g->tensors[i];
            char sh[96];
            print_shape(t->ne, t->n_dims, sh, sizeof sh);
            printf("  %-40s %-9s %-20s %12llu\n", t->name, tern_dtype_name(t->type), sh, (unsigned long long)t->nbytes);
        }
        print_tail(o, total, h);
    }
    cJSON_Delete(o);
    free(arch);
    free(name);
    tern_hadamard_free(h);
    tern_gguf_close(g);
    return 0;
}

/* ------------------------------------------------------------ MLX pack */

typedef struct { cJSON *meta; } emit_ctx;
static void emit(const char *k, double v, bool is_int, void *u) {
    (void)is_int;
    cJSON_AddNumberToObject(((emit_ctx *)u)->meta, k, v);
}
static void emit_arr(const char *k, const int64_t *v, size_t n, void *u) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    cJSON_AddItemToObject(((emit_ctx *)u)->meta, k, a);
}

/* Tokenizer summary from the pack's tokenizer.json / config (null when absent). */
static cJSON *pack_tokenizer(const tern_mlxpack *p) {
    size_t n = strlen(p->dir) + 32;
    char *path = malloc(n);
    snprintf(path, n, "%s/tokenizer.json", p->dir);
    cJSON *tj = NULL;
    tern_status st = tern_json_parse_file(path, 512u << 20, &tj);
    free(path);
    if (st) return cJSON_CreateNull();
    cJSON *t = cJSON_CreateObject();
    const cJSON *model = tern_json_get(tj, "model");
    const cJSON *type = tern_json_get(model, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "BPE")) cJSON_AddStringToObject(t, "model", "gpt2");
    else if (cJSON_IsString(type)) cJSON_AddStringToObject(t, "model", type->valuestring);
    const cJSON *vocab = tern_json_get(model, "vocab"), *merges = tern_json_get(model, "merges");
    int nv = cJSON_GetArraySize(vocab), na = 0;
    /* added tokens beyond the BPE vocab count toward the vocabulary */
    const cJSON *added = tern_json_get(tj, "added_tokens");
    int64_t max_id = nv - 1;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next) {
        const cJSON *id = tern_json_get(e, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
        na++;
    }
    cJSON_AddNumberToObject(t, "vocab_size", (double)(max_id + 1));
    cJSON_AddNumberToObject(t, "n_merges", cJSON_GetArraySize(merges));
    cJSON_AddNumberToObject(t, "n_added_tokens", na);
    static const char *ids[][2] = {{"bos_token_id", "bos_token_id"}, {"eos_token_id", "eos_token_id"},
                                   {"pad_token_id", "padding_token_id"}};
    for (int i = 0; i < 3; i++) {
        int64_t v;
        const cJSON *src = tern_json_get(p->text_config, ids[i][0]) ? p->text_config : p->config;
        if (tern_json_get(src, ids[i][0]) && tern_json_opt_i64(src, ids[i][0], 0, INT32_MAX, "config.json", &v) == TERN_OK)
            cJSON_AddNumberToObject(t, ids[i][1], (double)v);
    }
    cJSON_Delete(tj);
    return t;
}

static int inspect_pack(const char *dir, bool json) {
    tern_mlxpack *p = NULL;
    tern_status st = tern_mlxpack_open(dir, &p);
    if (st) return cli_lib_error("inspect", st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", dir);
    cJSON_AddStringToObject(o, "format", "mlx-pack");
    cJSON *meta = cJSON_CreateObject();
    emit_ctx ec = {meta};
    const char *arch = NULL;
    st = tern_mlxpack_gguf_hparams(p, &arch, emit, emit_arr, &ec);
    if (st) {
        cJSON_Delete(meta);
        cJSON_Delete(o);
        tern_mlxpack_close(p);
        return cli_lib_error("inspect", st);
    }
    cJSON_AddStringToObject(o, "architecture", arch);
    cJSON_AddStringToObject(o, "model_type", p->model_type);
    cJSON_AddStringToObject(o, "text_model_type", p->text_model_type);
    cJSON_AddNullToObject(o, "name");
    cJSON_AddItemToObject(o, "metadata", meta);
    cJSON_AddStringToObject(meta, "general.architecture", arch);
    cJSON *q = cJSON_AddObjectToObject(o, "quantization");
    cJSON_AddNumberToObject(q, "bits", p->bits);
    cJSON_AddNumberToObject(q, "group_size", p->group_size);
    cJSON_AddStringToObject(q, "mode", "affine");
    cJSON_AddNumberToObject(q, "n_modules", (double)p->n_modules);
    cJSON_AddStringToObject(o, "shape_order", "row-major");
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    uint64_t total = 0;
    for (size_t i = 0; i < p->st->n_tensors; i++) {
        const tern_st_tensor *t = &p->st->tensors[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "type", t->dtype);
        cJSON *s = cJSON_AddArrayToObject(e, "shape");
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddNumberToObject(e, "bytes", (double)t->nbytes);
        cJSON_AddNumberToObject(e, "offset", (double)(p->st->data_offset + t->begin));
        cJSON_AddItemToArray(ts, e);
        total += t->nbytes;
    }
    add_summary(o, p->st->n_tensors, total, p->st->map.size, p->hadamard, pack_tokenizer(p));
    if (json) {
        print_json(o);
    } else {
        printf("pack: %s (MLX %u-bit, group %u, %zu ternary modules)\n", dir, p->bits, p->group_size, p->n_modules);
        printf("architecture: %s (model_type %s, text %s)\n", arch, p->model_type, p->text_model_type);
        print_meta(meta);
        printf("tensors (%zu, model.safetensors):\n  %-60s %-5s %-16s %12s\n", p->st->n_tensors, "name", "type", "shape", "bytes");
        for (size_t i = 0; i < p->st->n_tensors; i++) {
            const tern_st_tensor *t = &p->st->tensors[i];
            char sh[96];
            print_shape(t->shape, t->n_dims, sh, sizeof sh);
            printf("  %-60s %-5s %-16s %12llu\n", t->name, t->dtype, sh, (unsigned long long)t->nbytes);
        }
        print_tail(o, total, p->hadamard);
    }
    cJSON_Delete(o);
    tern_mlxpack_close(p);
    return 0;
}

int tern_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (path) return cli_usage_error("inspect", "more than one path given ('%s' and '%s')", path, argv[i]);
        else path = argv[i];
    }
    if (!path) return cli_usage_error("inspect", "missing FILE or DIR");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "tern inspect: %s: no such file or directory\n", path);
        return 1;
    }
    if (S_ISDIR(sb.st_mode)) {
        if (!tern_mlxpack_is_dir(path)) {
            fprintf(stderr, "tern inspect: %s: a directory but not an MLX pack (needs config.json and model.safetensors)\n", path);
            return 1;
        }
        return inspect_pack(path, json);
    }
    return inspect_gguf(path, json);
}
