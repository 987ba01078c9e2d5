/*
 * convert_mlx.c - GGUF <-> MLX pack directions of `tern convert`.
 *
 * MLX pack (mlxpack.h): config.json (text_config, quantization {bits 2,
 * group_size 128, mode affine}, modules), hadamard.json (contract, pack names),
 * model.safetensors with "language_model." + HF names: ternary module P has
 * P.weight U32 [N, K/16], P.scales / P.biases F16 [N, K/128] (biases = -scales),
 * P.signs F16 [K] (folded and inverse modules); norms F32 as stored in the GGUF
 * (w+1), A_log F32, dt_bias F32, conv1d F32 [C, k, 1], in_proj_a/b as in the GGUF
 * (BF16, or a ternary module); V heads grouped everywhere.
 *
 * GGUF -> MLX undoes the GGUF conventions: V heads tiled -> grouped (vorder.h),
 * ssm_out columns tiled -> grouped unless gdn_v_grouped, ssm_a -> A_log (the
 * float32 nearest log(-ssm_a) whose -exp maps back to ssm_a exactly, preferring
 * the shortest mantissa, so dyadic A_log values come back bit-exact; an ssm_a that
 * is not f32(-exp(A)) for any float32 A, which no converter writes, gets the
 * nearest log and does not round-trip bit-exactly), conv1d
 * reshaped. It also writes tokenizer.json / tokenizer_config.json rebuilt from the
 * GGUF tokenizer keys and records general.name in config.json ("tern_gguf_name").
 * MLX -> GGUF applies the inverse and writes the metadata with hf_meta.c in the
 * converter's order, so GGUF -> MLX -> GGUF is byte-identical.
 */
#include "formats/convert.h"

#include "formats/codecs.h"
#include "formats/convert_internal.h"
#include "formats/gguf.h"
#include "formats/hadamard.h"
#include "formats/hf_meta.h"
#include "formats/json_util.h"
#include "formats/mlxpack.h"
#include "formats/safetensors.h"
#include "formats/vorder.h"
#include "formats/arch/arch.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>


/* ------------------------------------------------------------ names */

/* Names through the architecture tables: the file's own architecture first,
 * then the others (a name any table knows converts, as before). */
static const tm_role *find_role(tern_hf_arch arch, const char *name, bool hf, int *il,
                                const tm_arch_desc **found) {
    for (int k = -1; k < TM_ARCH_COUNT; k++) {
        const tm_arch_desc *a = tm_arch_get(k < 0 ? (int)arch : k);
        if (!a || (k >= 0 && k == (int)arch)) continue;
        const tm_role *r = hf ? tm_arch_find_hf(a, name, il) : tm_arch_find_gguf(a, name, il);
        if (r) {
            if (found) *found = a;
            return r;
        }
    }
    return NULL;
}

static const tm_role *gguf_to_hf(tern_hf_arch arch, const char *gg, char *out, size_t n) {
    int il;
    const tm_role *r = find_role(arch, gg, false, &il, NULL);
    return r && tm_role_hf_name(r, il, out, n) ? r : NULL;
}

/* HF name -> GGUF name, with the canonical output order (group, layer) and
 * the module rank (model order in the table). */
static const tm_role *hf_to_gguf(const char *hf, tern_hf_arch arch, char *out, size_t n, int *group, int *layer,
                                 int *rank) {
    int il;
    const tm_arch_desc *a = NULL;
    const tm_role *r = find_role(arch, hf, true, &il, &a);
    if (!r || !tm_role_gguf_name(r, il, out, n)) return NULL;
    *group = r->group;
    *layer = il;
    if (rank) *rank = tm_arch_role_index(a, r);
    return r;
}

/* ------------------------------------------------------------ A_log */

/* Floats as ordered integers (monotonic in value; -0 and +0 both map to 0). */
static int64_t f2o(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}
static float o2f(int64_t o) {
    uint32_t u = o < 0 ? (uint32_t)(-o) | 0x80000000u : (uint32_t)o;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static bool alog_hits(int64_t o, float a) {
    if (o > 0x7f7fffff || o < -0x7f7fffff) return false;
    return (float)-exp((double)o2f(o)) == a;
}

/* The float32 A with f32(-exp(A)) == a (ssm_a -> A_log): every float in the
 * interval of such A maps back to a, so pick the one with the shortest
 * mantissa (most trailing zero bits), which recovers dyadic draws exactly. */
static float a_log_of(float a) {
    double t = log(-(double)a);
    int64_t c = f2o((float)t), hit = INT64_MIN;
    for (int64_t d = 0; d <= 64 && hit == INT64_MIN; d++) {
        if (alog_hits(c + d, a)) hit = c + d;
        else if (alog_hits(c - d, a)) hit = c - d;
    }
    if (hit == INT64_MIN) return (float)t;
    int64_t lo = hit, hi = hit;
    for (int64_t step = 1; step < ((int64_t)1 << 32) && alog_hits(lo - step, a); step *= 2) lo -= step;
    for (int64_t step = (int64_t)1 << 31; step; step /= 2)
        if (alog_hits(lo - step, a)) lo -= step;
    for (int64_t step = 1; step < ((int64_t)1 << 32) && alog_hits(hi + step, a); step *= 2) hi += step;
    for (int64_t step = (int64_t)1 << 31; step; step /= 2)
        if (alog_hits(hi + step, a)) hi += step;
    if (lo <= 0 && hi >= 0) return 0.0f;
    bool neg = hi < 0;
    int64_t L = neg ? -hi : lo, H = neg ? -lo : hi; /* magnitudes, L <= H */
    for (int k = 31; k >= 0; k--) {
        int64_t m = (H >> k) << k;
        if (m >= L) return o2f(neg ? -m : m);
    }
    return (float)t;
}

/* ------------------------------------------------------------ GGUF -> MLX */

typedef enum mpart { MP_WORDS, MP_SCALES, MP_BIASES, MP_SIGNS, MP_PLAIN, MP_ALOG } mpart;

typedef struct mjob {
    char name[192];           /* safetensors name */
    char dtype[8];
    uint32_t n_dims;
    uint64_t shape[3];
    mpart part;
    const tern_gguf_tensor *t;
    tern_vorder_kind vo;      /* tiled -> grouped rows */
    bool cols;                /* ssm_out columns tiled -> grouped */
    const float *signs;
    uint64_t K;
    const tern_gdn_dims *gdn;
} mjob;

static tern_status mfill(void *dst, uint64_t nbytes, void *user) {
    mjob *j = user;
    const tern_gguf_tensor *t = j->t;
    uint8_t *o = dst;
    if (j->part == MP_SIGNS) {
        for (uint64_t k = 0; k < j->K; k++) {
            uint16_t h = tern_f32_to_f16(j->signs[k]);
            memcpy(o + 2 * k, &h, 2);
        }
        return TERN_OK;
    }
    uint64_t K = t->ne[0], N = t->n_elems / K;
    if (j->part == MP_PLAIN || j->part == MP_ALOG) {
        uint64_t rb = K * tern_dtype_block_bytes(t->type);
        if (j->vo == TERN_VO_ELEMS) { /* one-element rows */
            rb = tern_dtype_block_bytes(t->type);
            N = K;
        }
        if (rb * N != nbytes) return tern_fail(TERN_ERR_INTERNAL, "tensor '%s': size mismatch", j->name);
        for (uint64_t r = 0; r < N; r++) {
            uint64_t sr = j->gdn ? tern_vorder_src_row(j->vo, j->gdn, N, r, TERN_VORDER_TO_GROUPED) : r;
            memcpy(o + r * rb, t->data + sr * rb, rb);
        }
        if (j->part == MP_ALOG)
            for (uint64_t i = 0; i < nbytes / 4; i++) {
                float a;
                memcpy(&a, o + 4 * i, 4);
                if (!(a < 0.0f) || !isfinite(a))
                    return tern_fail(TERN_ERR_FORMAT, "tensor '%s' element %llu: ssm_a = %g is not negative",
                                     t->name, (unsigned long long)i, (double)a);
                a = a_log_of(a);
                memcpy(o + 4 * i, &a, 4);
            }
        return TERN_OK;
    }
    /* ternary parts */
    size_t sb = tern_codec_row_bytes(t->type, K);
    uint64_t G = K / 128;
    uint8_t *codes = tern_malloc(K), *c2 = tern_malloc(K);
    uint16_t *d = tern_malloc(G * 2), *d2 = tern_malloc(G * 2);
    tern_status st = TERN_OK;
    if (!codes || !c2 || !d || !d2) st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory");
    for (uint64_t r = 0; r < N && !st; r++) {
        uint64_t sr = j->gdn ? tern_vorder_src_row(j->vo, j->gdn, N, r, TERN_VORDER_TO_GROUPED) : r;
        st = tern_decode_row(t->type, t->data + sr * sb, K, codes, d, t->name, sr);
        if (st) break;
        if (j->cols) {
            tern_vorder_units(c2, codes, j->gdn, j->gdn->head_v_dim, TERN_VORDER_TO_GROUPED);
            tern_vorder_units(d2, d, j->gdn, j->gdn->head_v_dim / 128 * 2, TERN_VORDER_TO_GROUPED);
            memcpy(codes, c2, K);
            memcpy(d, d2, G * 2);
        }
        if (j->part == MP_WORDS) {
            st = tern_encode_mlx_row(codes, K, (uint32_t *)(o + r * (K / 4)), t->name, r);
        } else {
            for (uint64_t gi = 0; gi < G; gi++) {
                uint16_t v = j->part == MP_SCALES ? d[gi] : (uint16_t)(d[gi] ^ 0x8000u);
                memcpy(o + (r * G + gi) * 2, &v, 2);
            }
        }
    }
    tern_free(codes, K);
    tern_free(c2, K);
    tern_free(d, G * 2);
    tern_free(d2, G * 2);
    return st;
}

static int mjob_cmp(const void *a, const void *b) { return strcmp(((const mjob *)a)->name, ((const mjob *)b)->name); }

static tern_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return tern_fail(TERN_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok &= fputc('\n', f) != EOF;
    ok &= fclose(f) == 0;
    return ok ? TERN_OK : tern_fail(TERN_ERR_IO, "%s: write failed", path);
}

static tern_status write_json(const char *dir, const char *file, cJSON *j) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *s = cJSON_Print(j);
    if (!s) return tern_fail(TERN_ERR_NOMEM, "convert: out of memory");
    tern_status st = write_text(path, s);
    free(s);
    return st;
}

static const char *k_qwen35_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *k_qwen2_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* tokenizer.json + tokenizer_config.json + special_tokens_map.json from the GGUF keys. */

/* An added token's fields: tokenizer.json lists them in the tokenizers order,
 * tokenizer_config.json's added_tokens_decoder sorted by name. */
static void added_token(cJSON *o, const char *content, bool special, bool sorted) {
    static const char *const hf[4] = {"single_word", "lstrip", "rstrip", "normalized"};
    static const char *const cfg[4] = {"lstrip", "normalized", "rstrip", "single_word"};
    cJSON_AddStringToObject(o, "content", content);
    for (int k = 0; k < 4; k++) cJSON_AddBoolToObject(o, (sorted ? cfg : hf)[k], false);
    cJSON_AddBoolToObject(o, "special", special);
}

static tern_status write_tokenizer(const tern_gguf *g, const char *dir) {
    const tern_gguf_kv *toks = tern_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const tern_gguf_kv *types = tern_gguf_find_kv(g, "tokenizer.ggml.token_type");
    const tern_gguf_kv *merges = tern_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (!toks || toks->type != TERN_GGUF_ARRAY || toks->arr_type != TERN_GGUF_STRING)
        return TERN_OK; /* no tokenizer in the GGUF: the pack gets none */
    char *pre = NULL;
    tern_gguf_get_str_opt(g, "tokenizer.ggml.pre", &pre);
    tern_clear_error();
    cJSON *tj = cJSON_CreateObject(), *cfg = cJSON_CreateObject(), *stm = cJSON_CreateObject();
    cJSON_AddStringToObject(tj, "version", "1.0");
    cJSON_AddNullToObject(tj, "truncation");
    cJSON_AddNullToObject(tj, "padding");
    cJSON *added = cJSON_AddArrayToObject(tj, "added_tokens");
    cJSON *norm = cJSON_AddObjectToObject(tj, "normalizer");
    cJSON_AddStringToObject(norm, "type", "NFC");
    cJSON *pt = cJSON_AddObjectToObject(tj, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "Sequence");
    cJSON *pts = cJSON_AddArrayToObject(pt, "pretokenizers");
    cJSON *sp = cJSON_CreateObject();
    cJSON_AddStringToObject(sp, "type", "Split");
    cJSON *pat = cJSON_AddObjectToObject(sp, "pattern");
    cJSON_AddStringToObject(pat, "Regex", pre && !strcmp(pre, "qwen35") ? k_qwen35_regex : k_qwen2_regex);
    cJSON_AddStringToObject(sp, "behavior", "Isolated");
    cJSON_AddBoolToObject(sp, "invert", false);
    cJSON_AddItemToArray(pts, sp);
    cJSON *bl = cJSON_CreateObject();
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", false);
    cJSON_AddBoolToObject(bl, "trim_offsets", true);
    cJSON_AddBoolToObject(bl, "use_regex", false);
    cJSON_AddItemToArray(pts, bl);
    cJSON_AddNullToObject(tj, "post_processor");
    cJSON *dec = cJSON_AddObjectToObject(tj, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON_AddBoolToObject(dec, "add_prefix_space", true);
    cJSON_AddBoolToObject(dec, "trim_offsets", true);
    cJSON_AddBoolToObject(dec, "use_regex", true);
    cJSON *model = cJSON_AddObjectToObject(tj, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(model, "end_of_word_suffix", "");
    cJSON_AddBoolToObject(model, "fuse_unk", false);
    cJSON_AddBoolToObject(model, "byte_fallback", false);
    cJSON_AddBoolToObject(model, "ignore_merges", false);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *mg = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddStringToObject(cfg, "tokenizer_class", "PreTrainedTokenizerFast");
    cJSON *atd = cJSON_AddObjectToObject(cfg, "added_tokens_decoder");
    for (uint64_t i = 0; i < toks->arr_n; i++) {
        int64_t ty = types && i < types->arr_n ? tern_gguf_arr_i64(types, i) : 1;
        char *s = tern_strndup(toks->arr_str[i].ptr, (size_t)toks->arr_str[i].len);
        if (!s) continue;
        if (ty == 3 || ty == 4) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", (double)i);
            added_token(a, s, ty == 3, false);
            cJSON_AddItemToArray(added, a);
            char idb[32];
            snprintf(idb, sizeof idb, "%llu", (unsigned long long)i);
            added_token(cJSON_AddObjectToObject(atd, idb), s, ty == 3, true);
        } else if (ty != 5) {
            cJSON_AddNumberToObject(vocab, s, (double)i);
        }
        tern_free(s, (size_t)toks->arr_str[i].len + 1);
    }
    if (merges && merges->type == TERN_GGUF_ARRAY && merges->arr_type == TERN_GGUF_STRING)
        for (uint64_t i = 0; i < merges->arr_n; i++) {
            char *s = tern_strndup(merges->arr_str[i].ptr, (size_t)merges->arr_str[i].len);
            if (!s) continue;
            cJSON_AddItemToArray(mg, cJSON_CreateString(s));
            tern_free(s, (size_t)merges->arr_str[i].len + 1);
        }
    const char *keys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
    const char *names[3] = {"bos_token", "eos_token", "pad_token"};
    for (int k = 0; k < 3; k++) {
        uint64_t id;
        if (tern_gguf_get_u64(g, keys[k], &id) == TERN_OK && id < toks->arr_n) {
            char *s = tern_strndup(toks->arr_str[id].ptr, (size_t)toks->arr_str[id].len);
            if (s) {
                cJSON_AddStringToObject(cfg, names[k], s);
                if (k) cJSON_AddStringToObject(stm, names[k], s);
                tern_free(s, (size_t)toks->arr_str[id].len + 1);
            }
        } else {
            cJSON_AddNullToObject(cfg, names[k]);
        }
    }
    tern_clear_error();
    bool b;
    if (tern_gguf_find_kv(g, "tokenizer.ggml.add_bos_token") && !tern_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b))
        cJSON_AddBoolToObject(cfg, "add_bos_token", b);
    if (tern_gguf_find_kv(g, "tokenizer.ggml.add_eos_token") && !tern_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b))
        cJSON_AddBoolToObject(cfg, "add_eos_token", b);
    char *tmpl = NULL;
    if (tern_gguf_get_str_opt(g, "tokenizer.chat_template", &tmpl) == TERN_OK && tmpl)
        cJSON_AddStringToObject(cfg, "chat_template", tmpl);
    tern_clear_error();
    free(tmpl);
    free(pre);
    tern_status st = write_json(dir, "tokenizer.json", tj);
    if (!st) st = write_json(dir, "tokenizer_config.json", cfg);
    if (!st) st = write_json(dir, "special_tokens_map.json", stm);
    cJSON_Delete(tj);
    cJSON_Delete(cfg);
    cJSON_Delete(stm);
    return st;
}

typedef struct modref { char path[160]; int group, layer, rank; bool emb; bool folded; } modref;
static int modref_cmp(const void *a, const void *b) {
    const modref *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->layer != y->layer) return x->layer - y->layer;
    return x->rank - y->rank;
}

tern_status tern_convert_gguf_to_mlx(const tern_gguf *g, const char *dir, const tern_convert_opts *o) {
    tern_hf_hparams hp;
    tern_status st = tern_hf_hparams_from_gguf(g, &hp);
    if (st) return st;
    bool q35 = hp.arch == TERN_HF_QWEN35;
    tern_hadamard_meta *h = NULL;
    if (tern_gguf_find_kv(g, "prism.hadamard.version") && (st = tern_hadamard_from_gguf(g, &h))) return st;
    tern_gdn_dims gdn = {(uint64_t)hp.ssm_n_k, (uint64_t)hp.ssm_n_v, (uint64_t)hp.ssm_dk, (uint64_t)hp.ssm_dv};
    bool grouped_cols = h && h->gdn_v_grouped;
    mjob *jobs = tern_calloc(g->n_tensors * 4 + 1, sizeof *jobs);
    modref *mods = tern_calloc(g->n_tensors + 1, sizeof *mods);
    size_t nj = 0, nm = 0;
    tern_st_writer *sw = NULL;
    cJSON *cfg = NULL, *hj = NULL;
    if (!jobs || !mods) { st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory"); goto out; }
    if (mkdir(dir, 0777) && errno != EEXIST) { st = tern_fail(TERN_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno)); goto out; }
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        char hf[160];
        const tm_role *role = gguf_to_hf(hp.arch, t->name, hf, sizeof hf);
        if (!role) {
            st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' has no MLX pack name", g->map.path, t->name);
            break;
        }
        tern_vorder_kind vo = q35 ? tern_vorder_kind_of(t->name) : TERN_VO_NONE;
        bool cols = vo == TERN_VO_COLS && !grouped_cols;
        if (vo == TERN_VO_COLS) vo = TERN_VO_NONE;
        const tern_gdn_dims *gd = q35 ? &gdn : NULL;
        if (q35) {
            uint64_t nr = vo == TERN_VO_ELEMS ? t->ne[0] : t->n_elems / t->ne[0];
            if ((st = tern_vorder_check(cols ? TERN_VO_COLS : vo, &gdn, nr, t->ne[0], t->name))) break;
        }
        if (tern_codec_is_ternary(t->type)) {
            uint64_t K = t->ne[0], N = t->n_elems / K;
            if (K % 128 || (cols && gdn.head_v_dim % 128)) {
                st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s': K %llu / head width not a multiple of 128",
                               g->map.path, t->name, (unsigned long long)K);
                break;
            }
            size_t hl = strlen(hf);
            if (hl < 8 || strcmp(hf + hl - 7, ".weight")) {
                st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' is ternary but not a weight matrix", g->map.path, t->name);
                break;
            }
            char path[160];
            snprintf(path, sizeof path, "%s", hf);
            path[hl - 7] = 0; /* drop ".weight" */
            bool inv = h && tern_hadamard_is_inverse(h, t->name), fold = h && tern_hadamard_is_folded(h, t->name);
            const float *sg = (inv || fold) ? tern_hadamard_signs_for_width(h, K) : NULL;
            if ((inv || fold) && !sg) { st = tern_fail(TERN_ERR_FORMAT, "%s: no signs for K %llu", g->map.path, (unsigned long long)K); break; }
            static const char *suf[4] = {"weight", "scales", "biases", "signs"};
            for (int part = 0; part < (sg ? 4 : 3); part++) {
                mjob *j = &jobs[nj++];
                snprintf(j->name, sizeof j->name, "language_model.%s.%s", path, suf[part]);
                j->part = (mpart)part;
                j->t = t;
                j->vo = vo;
                j->cols = cols;
                j->gdn = gd;
                j->signs = sg;
                j->K = K;
                if (part == MP_WORDS) { snprintf(j->dtype, 8, "U32"); j->n_dims = 2; j->shape[0] = N; j->shape[1] = K / 16; }
                else if (part == MP_SIGNS) { snprintf(j->dtype, 8, "F16"); j->n_dims = 1; j->shape[0] = K; }
                else { snprintf(j->dtype, 8, "F16"); j->n_dims = 2; j->shape[0] = N; j->shape[1] = K / 128; }
            }
            modref *m = &mods[nm++];
            snprintf(m->path, sizeof m->path, "%s", path);
            char tmp[128];
            hf_to_gguf(hf, hp.arch, tmp, sizeof tmp, &m->group, &m->layer, &m->rank);
            m->group = m->group == 1 ? -1 : m->group == 0 ? 100 : m->group; /* embed first, lm_head last */
            m->emb = inv;
            m->folded = fold;
        } else {
            mjob *j = &jobs[nj++];
            snprintf(j->name, sizeof j->name, "language_model.%s", hf);
            j->part = role->val == TM_VAL_SSM_A ? MP_ALOG : MP_PLAIN;
            j->t = t;
            j->vo = vo;
            j->gdn = gd;
            const char *dt = t->type == TERN_DT_F32 ? "F32" : t->type == TERN_DT_BF16 ? "BF16" : t->type == TERN_DT_F16 ? "F16" : NULL;
            if (!dt) { st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' type %s", g->map.path, t->name, tern_dtype_name(t->type)); break; }
            snprintf(j->dtype, 8, "%s", dt);
            if (vo == TERN_VO_CONV) { j->n_dims = 3; j->shape[0] = t->ne[1]; j->shape[1] = t->ne[0]; j->shape[2] = 1; }
            else { j->n_dims = t->n_dims; for (uint32_t d = 0; d < t->n_dims; d++) j->shape[d] = t->ne[t->n_dims - 1 - d]; }
        }
    }
    if (st) goto out;
    qsort(jobs, nj, sizeof *jobs, mjob_cmp);
    qsort(mods, nm, sizeof *mods, modref_cmp);
    if ((st = tern_st_writer_new(&sw))) goto out;
    if ((st = tern_st_w_set_meta(sw, "format", "mlx"))) goto out;
    for (size_t i = 0; i < nj && !st; i++)
        st = tern_st_w_add(sw, jobs[i].name, jobs[i].dtype, jobs[i].n_dims, jobs[i].shape, NULL, mfill, &jobs[i]);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!st) st = tern_st_w_write(sw, path, o->progress, o->progress_user);
    if (st) goto out;
    /* config.json */
    cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "model_type", h ? "prism_hadamard_qwen35" : q35 ? "qwen3_5" : "qwen3");
    if (!q35 && h) cJSON_ReplaceItemInObject(cfg, "model_type", cJSON_CreateString("prism_hadamard_qwen3"));
    cJSON_AddStringToObject(cfg, "base_model_type", q35 ? "qwen3_5" : "qwen3");
    cJSON_AddNumberToObject(cfg, "schema_version", 2);
    if (h) cJSON_AddStringToObject(cfg, "hadamard_config", "hadamard.json");
    cJSON_AddStringToObject(cfg, "tensor_namespace", q35 ? "mlx-vlm-qwen3_5" : "mlx-vlm-qwen3");
    cJSON_AddStringToObject(cfg, "gdn_activation_layout", "grouped");
    cJSON_AddBoolToObject(cfg, "tie_word_embeddings", hp.tie_embeddings);
    cJSON *qz = cJSON_AddObjectToObject(cfg, "quantization");
    cJSON_AddNumberToObject(qz, "bits", 2);
    cJSON_AddNumberToObject(qz, "group_size", 128);
    cJSON_AddStringToObject(qz, "mode", "affine");
    cJSON *ms = cJSON_AddArrayToObject(cfg, "modules");
    for (size_t i = 0; i < nm; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "path", mods[i].path);
        if (h && (mods[i].folded || mods[i].emb)) cJSON_AddNumberToObject(m, "block", h->block_size);
        cJSON_AddBoolToObject(m, "embedding", mods[i].emb || !strcmp(mods[i].path, "model.embed_tokens"));
        cJSON_AddStringToObject(m, "dtype", "float16");
        cJSON_AddItemToArray(ms, m);
    }
    cJSON_AddItemToObject(cfg, "text_config", tern_hf_hparams_to_json(&hp));
    char *gname = NULL;
    if (tern_gguf_get_str_opt(g, "general.name", &gname) == TERN_OK && gname)
        cJSON_AddStringToObject(cfg, "tern_gguf_name", o->name ? o->name : gname);
    tern_clear_error();
    free(gname);
    if ((st = write_json(dir, "config.json", cfg))) goto out;
    if (h) {
        hj = cJSON_CreateObject();
        cJSON_AddNumberToObject(hj, "prism.hadamard.version", h->version);
        cJSON_AddNumberToObject(hj, "prism.hadamard.block_size", h->block_size);
        cJSON_AddStringToObject(hj, "prism.hadamard.transform", TERN_HADAMARD_TRANSFORM);
        cJSON_AddStringToObject(hj, "prism.hadamard.axis", TERN_HADAMARD_AXIS);
        cJSON_AddStringToObject(hj, "prism.hadamard.sign_mode", "explicit");
        cJSON *sw2 = cJSON_AddArrayToObject(hj, "prism.hadamard.sign_widths");
        cJSON *sv = cJSON_AddArrayToObject(hj, "prism.hadamard.sign_values");
        for (uint32_t i = 0; i < h->n_widths; i++) {
            cJSON_AddItemToArray(sw2, cJSON_CreateNumber(h->widths[i]));
            for (uint32_t k = 0; k < h->widths[i]; k++) cJSON_AddItemToArray(sv, cJSON_CreateNumber(h->signs[i][k]));
        }
        cJSON *wn = cJSON_AddArrayToObject(hj, "prism.hadamard.weight_names");
        cJSON *in = cJSON_AddArrayToObject(hj, "prism.hadamard.inverse_weight_names");
        for (size_t i = 0; i < nm; i++) {
            char nmb[200];
            snprintf(nmb, sizeof nmb, "language_model.%s.weight", mods[i].path);
            if (mods[i].folded) cJSON_AddItemToArray(wn, cJSON_CreateString(nmb));
            if (mods[i].emb) cJSON_AddItemToArray(in, cJSON_CreateString(nmb));
        }
        cJSON_AddBoolToObject(hj, "prism.hadamard.gdn_v_grouped", h->gdn_v_grouped);
        if ((st = write_json(dir, "hadamard.json", hj))) goto out;
    }
    st = write_tokenizer(g, dir);
out:
    cJSON_Delete(cfg);
    cJSON_Delete(hj);
    tern_st_writer_free(sw);
    tern_free(jobs, (g->n_tensors * 4 + 1) * sizeof *jobs);
    tern_free(mods, (g->n_tensors + 1) * sizeof *mods);
    tern_hadamard_free(h);
    return st;
}

/* ------------------------------------------------------------ MLX -> GGUF */

typedef struct gjob {
    char name[128];
    char hf[192];
    int group, layer;
    const tern_st_tensor *src;        /* plain tensor */
    tern_mlx_ternary tm;              /* ternary module */
    bool ternary, alog, cols;
    tern_vorder_kind vo;
    uint32_t n_dims;
    uint64_t ne[4];
    tern_dtype type;
    const tern_gdn_dims *gdn;
} gjob;

static int gjob_cmp(const void *a, const void *b) {
    const gjob *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->layer != y->layer) return x->layer - y->layer;
    return strcmp(x->hf, y->hf);
}

static tern_status gfill(void *dst, uint64_t nbytes, void *user) {
    gjob *j = user;
    uint8_t *o = dst;
    if (!j->ternary) {
        const tern_st_tensor *t = j->src;
        uint64_t K = j->ne[0], N = j->ne[1];
        if (j->vo == TERN_VO_ELEMS) { N = K; K = 1; }
        uint64_t rb = K * t->elem_size;
        if (rb * N != nbytes) return tern_fail(TERN_ERR_INTERNAL, "tensor '%s': size mismatch", j->name);
        for (uint64_t r = 0; r < N; r++) {
            uint64_t sr = j->gdn ? tern_vorder_src_row(j->vo, j->gdn, N, r, TERN_VORDER_TO_TILED) : r;
            memcpy(o + r * rb, t->data + sr * rb, rb);
        }
        if (j->alog)
            for (uint64_t i = 0; i < nbytes / 4; i++) {
                float a;
                memcpy(&a, o + 4 * i, 4);
                a = (float)-exp((double)a);
                memcpy(o + 4 * i, &a, 4);
            }
        return TERN_OK;
    }
    uint64_t K = j->tm.K, N = j->tm.N, G = K / 128;
    size_t rb = tern_codec_row_bytes(j->type, K);
    uint8_t *codes = tern_malloc(K), *c2 = tern_malloc(K);
    uint16_t *d = tern_malloc(G * 2), *d2 = tern_malloc(G * 2), *bi = tern_malloc(G * 2);
    tern_status st = TERN_OK;
    if (!codes || !c2 || !d || !d2 || !bi) st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory");
    for (uint64_t r = 0; r < N && !st; r++) {
        uint64_t sr = j->gdn ? tern_vorder_src_row(j->vo, j->gdn, N, r, TERN_VORDER_TO_TILED) : r;
        uint32_t *words = tern_malloc(K / 16 * 4);
        if (!words) { st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory"); break; }
        memcpy(words, j->tm.words + sr * (K / 16) * 4, K / 16 * 4);
        st = tern_decode_mlx_row(words, K, codes, j->name, sr);
        tern_free(words, K / 16 * 4);
        if (st) break;
        memcpy(d, j->tm.scales + sr * G * 2, G * 2);
        memcpy(bi, j->tm.biases + sr * G * 2, G * 2);
        if ((st = tern_mlx_check_biases(d, bi, G, j->name, sr))) break;
        if (j->cols) {
            tern_vorder_units(c2, codes, j->gdn, j->gdn->head_v_dim, TERN_VORDER_TO_TILED);
            tern_vorder_units(d2, d, j->gdn, j->gdn->head_v_dim / 128 * 2, TERN_VORDER_TO_TILED);
            memcpy(codes, c2, K);
            memcpy(d, d2, G * 2);
        }
        st = tern_encode_row(j->type, codes, d, K, o + r * rb, j->name, r);
    }
    tern_free(codes, K);
    tern_free(c2, K);
    tern_free(d, G * 2);
    tern_free(d2, G * 2);
    tern_free(bi, G * 2);
    return st;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static tern_dtype target_of(tern_convert_target t) {
    switch (t) {
    case TERN_CONV_PTQ1_0: return TERN_DT_PTQ1_0;
    case TERN_CONV_Q2_0: return TERN_DT_Q2_0;
    case TERN_CONV_Q2_0_G64: return TERN_DT_Q2_0_G64;
    default: return TERN_DT_PQ2_0;
    }
}

tern_status tern_convert_mlx_to_gguf(const char *dir, const char *out, const tern_convert_opts *o) {
    tern_mlxpack *p = NULL;
    tern_status st = tern_mlxpack_open(dir, &p);
    if (st) return st;
    tern_hf_hparams hp;
    tern_hf_tokenizer *tok = NULL;
    tern_gguf_writer *w = NULL;
    gjob *jobs = NULL;
    size_t nj = 0;
    char cpath[4096];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    if ((st = tern_hf_hparams_from_json(p->config, cpath, &hp))) goto out;
    bool q35 = hp.arch == TERN_HF_QWEN35;
    if (p->group_size != 128) {
        st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: quantization.group_size %u (tern convert writes g128 layouts)", cpath, p->group_size);
        goto out;
    }
    tern_gdn_dims gdn = {(uint64_t)hp.ssm_n_k, (uint64_t)hp.ssm_n_v, (uint64_t)hp.ssm_dk, (uint64_t)hp.ssm_dv};
    tern_hadamard_meta *h = p->hadamard;
    bool grouped_cols = h && h->gdn_v_grouped;
    tern_dtype tt = target_of(o->to);
    jobs = tern_calloc(p->st->n_tensors + 1, sizeof *jobs);
    if (!jobs) { st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory"); goto out; }
    size_t pl = strlen(p->tensor_prefix);
    for (size_t i = 0; i < p->st->n_tensors && !st; i++) {
        const tern_st_tensor *t = &p->st->tensors[i];
        const char *hf = !strncmp(t->name, p->tensor_prefix, pl) ? t->name + pl : t->name;
        char mpath[192];
        snprintf(mpath, sizeof mpath, "%s", hf);
        char *dot = strrchr(mpath, '.');
        const tern_mlx_module *m = NULL;
        if (dot) {
            *dot = 0;
            m = tern_mlxpack_module(p, mpath);
        }
        gjob *j = &jobs[nj];
        memset(j, 0, sizeof *j);
        if (m) {
            if (!ends_with(hf, ".weight")) continue; /* scales / biases / signs belong to the module */
            j->ternary = true;
            if ((st = tern_mlxpack_ternary(p, m, &j->tm))) break;
        } else if (ends_with(hf, ".scales") || ends_with(hf, ".biases") || ends_with(hf, ".signs")) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tensor '%s' belongs to no module in config.json", cpath, t->name);
            break;
        }
        snprintf(j->hf, sizeof j->hf, "%s", hf);
        const tm_role *role = hf_to_gguf(hf, hp.arch, j->name, sizeof j->name, &j->group, &j->layer, NULL);
        if (!role) {
            if (tm_arch_hf_ignored(tm_arch_get(hp.arch), hf)) continue;
            st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' has no GGUF name", dir, t->name);
            break;
        }
        if (j->group == 0 && hp.tie_embeddings) continue;
        j->vo = q35 ? tern_vorder_kind_of(j->name) : TERN_VO_NONE;
        if (j->vo == TERN_VO_COLS) {
            j->vo = TERN_VO_NONE;
            j->cols = !grouped_cols;
        }
        j->gdn = q35 ? &gdn : NULL;
        if (q35) {
            uint64_t nr, k;
            if (j->ternary) { nr = j->tm.N; k = j->tm.K; }
            else if (j->vo == TERN_VO_ELEMS) { nr = t->n_elems; k = 1; }
            else { k = t->n_dims ? (t->n_dims == 3 ? t->shape[1] : t->shape[t->n_dims - 1]) : 1; nr = k ? t->n_elems / k : 0; }
            if ((st = tern_vorder_check(j->cols ? TERN_VO_COLS : j->vo, &gdn, nr, k, t->name))) break;
        }
        if (j->ternary) {
            if (j->cols && gdn.head_v_dim % 128) { st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: head_v_dim not a multiple of 128", j->name); break; }
            j->n_dims = 2;
            j->ne[0] = j->tm.K;
            j->ne[1] = j->tm.N;
            j->type = tt;
        } else {
            j->src = t;
            j->type = t->type;
            if (t->type != TERN_DT_F32 && t->type != TERN_DT_BF16 && t->type != TERN_DT_F16) {
                st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' dtype %s", dir, t->name, t->dtype);
                break;
            }
            if (t->n_dims > 3 || (t->n_dims == 3 && t->shape[2] != 1)) {
                st = tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s' has an unsupported rank-%u shape", dir, t->name, t->n_dims);
                break;
            }
            if (t->n_dims == 3) { /* conv1d [C, k, 1] -> ne [k, C] */
                j->n_dims = 2;
                j->ne[0] = t->shape[1];
                j->ne[1] = t->shape[0];
            } else {
                j->n_dims = t->n_dims ? t->n_dims : 1;
                for (uint32_t d = 0; d < j->n_dims; d++) j->ne[d] = t->shape[j->n_dims - 1 - d];
                if (j->n_dims == 1) j->ne[1] = 1;
            }
            j->alog = role->val == TM_VAL_SSM_A;
        }
        j->ne[2] = j->ne[3] = 1;
        nj++;
    }
    if (st) goto out;
    qsort(jobs, nj, sizeof *jobs, gjob_cmp);
    if ((st = tern_hf_tokenizer_load(dir, &hp, &tok))) goto out;
    uint64_t n_params = 0;
    for (size_t i = 0; i < nj; i++) n_params += jobs[i].ne[0] * jobs[i].ne[1];
    const char *name = o->name;
    const cJSON *gn = tern_json_get(p->config, "tern_gguf_name");
    if (!name && cJSON_IsString(gn)) name = gn->valuestring;
    char base[256];
    if (!name) {
        const char *b = strrchr(dir, '/');
        snprintf(base, sizeof base, "%s", b && b[1] ? b + 1 : dir);
        name = base;
    }
    if ((st = tern_gguf_writer_new(&w))) goto out;
    if ((st = tern_hf_write_meta(w, &hp, name, n_params, tt, tok))) goto out;
    if (h) {
        st = tern_gguf_w_set_u32(w, "prism.hadamard.version", h->version);
        if (!st) st = tern_gguf_w_set_u32(w, "prism.hadamard.block_size", h->block_size);
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.transform", TERN_HADAMARD_TRANSFORM);
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.axis", TERN_HADAMARD_AXIS);
        if (!st) st = tern_gguf_w_set_str(w, "prism.hadamard.sign_mode", "explicit");
        int32_t wd[64];
        uint64_t total = 0;
        for (uint32_t i = 0; i < h->n_widths && i < 64; i++) { wd[i] = (int32_t)h->widths[i]; total += h->widths[i]; }
        if (!st) st = tern_gguf_w_set_arr(w, "prism.hadamard.sign_widths", TERN_GGUF_INT32, wd, h->n_widths < 64 ? h->n_widths : 64);
        int32_t *sv = tern_malloc(total * 4 + 4);
        if (!sv && !st) st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory");
        uint64_t off = 0;
        for (uint32_t i = 0; !st && i < h->n_widths; i++)
            for (uint32_t k = 0; k < h->widths[i]; k++) sv[off++] = h->signs[i][k] < 0 ? -1 : 1;
        if (!st) st = tern_gguf_w_set_arr(w, "prism.hadamard.sign_values", TERN_GGUF_INT32, sv, total);
        tern_free(sv, total * 4 + 4);
        const char **wn = tern_calloc(nj + 1, sizeof *wn), **inv = tern_calloc(nj + 1, sizeof *inv);
        uint64_t *wl = tern_calloc(nj + 1, sizeof *wl), *il = tern_calloc(nj + 1, sizeof *il);
        size_t nw = 0, ni = 0;
        if ((!wn || !inv || !wl || !il) && !st) st = tern_fail(TERN_ERR_NOMEM, "convert: out of memory");
        for (size_t i = 0; !st && i < nj; i++) {
            if (!jobs[i].ternary) continue;
            char pn[256];
            snprintf(pn, sizeof pn, "%s%s", p->tensor_prefix, jobs[i].hf);
            if (tern_hadamard_is_folded(h, pn) || tern_hadamard_is_folded(h, jobs[i].hf)) {
                wn[nw] = jobs[i].name;
                wl[nw++] = strlen(jobs[i].name);
            }
            if (tern_hadamard_is_inverse(h, pn) || tern_hadamard_is_inverse(h, jobs[i].hf)) {
                inv[ni] = jobs[i].name;
                il[ni++] = strlen(jobs[i].name);
            }
        }
        if (!st) st = tern_gguf_w_set_arr_str(w, "prism.hadamard.weight_names", wn, wl, nw);
        if (!st) st = tern_gguf_w_set_arr_str(w, "prism.hadamard.inverse_weight_names", inv, il, ni);
        if (!st) st = tern_gguf_w_set_bool(w, "prism.hadamard.gdn_v_grouped", h->gdn_v_grouped);
        tern_free(wn, (nj + 1) * sizeof *wn);
        tern_free(inv, (nj + 1) * sizeof *inv);
        tern_free(wl, (nj + 1) * sizeof *wl);
        tern_free(il, (nj + 1) * sizeof *il);
        if (st) goto out;
    }
    for (size_t i = 0; i < nj && !st; i++)
        st = tern_gguf_w_add_tensor(w, jobs[i].name, jobs[i].n_dims, jobs[i].ne, jobs[i].type, NULL, gfill, &jobs[i]);
    if (!st) st = tern_gguf_w_write(w, out, o->progress, o->progress_user);
out:
    tern_gguf_writer_free(w);
    tern_hf_tokenizer_free(tok);
    tern_free(jobs, (p && p->st ? p->st->n_tensors + 1 : 1) * sizeof *jobs);
    tern_mlxpack_close(p);
    return st;
}
