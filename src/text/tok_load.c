/*
 * tok_load.c - build a tern_tokenizer from
 *   - GGUF metadata: tokenizer.ggml.model ("gpt2"), .pre ("qwen2" and its aliases,
 *     or "qwen35"), .tokens (string array), .token_type (int array), .merges
 *     ("a b" strings, rank = index), .bos_token_id / .eos_token_id /
 *     .padding_token_id, tokenizer.chat_template;
 *   - a Hugging Face tokenizer.json (model.type "BPE": model.vocab, model.merges as
 *     "a b" strings or [a, b] pairs, added_tokens, the Split regex of the
 *     pre_tokenizer) plus tokenizer_config.json next to it when present
 *     (eos_token, bos_token, chat_template).
 */
#include "text/tok_internal.h"
#include "formats/gguf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static tern_status set_pre(tern_tokenizer *t, const char *pre, const char *name) {
    static const char *const qwen2_like[] = {"qwen2", "qwen3", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"};
    for (size_t i = 0; i < sizeof qwen2_like / sizeof qwen2_like[0]; i++)
        if (!strcmp(pre, qwen2_like[i])) { strcpy(t->pre, "qwen2"); return TERN_OK; }
    if (!strcmp(pre, "qwen35")) { strcpy(t->pre, "qwen35"); return TERN_OK; }
    return tern_fail(TERN_ERR_UNSUPPORTED,
                     "%s: tokenizer.ggml.pre '%s' is not supported (expected qwen2 or qwen35)", name, pre);
}

/* ----------------------------------------------------------------- GGUF */

static tern_status load_gguf(const char *path, tern_tokenizer *t) {
    tern_gguf *g = NULL;
    tern_status st = tern_gguf_open(path, &g);
    if (st) return st;
    char *model = NULL, *pre = NULL, *tmpl = NULL;
    if ((st = tern_gguf_get_str(g, "tokenizer.ggml.model", &model))) goto done;
    if (strcmp(model, "gpt2")) {
        st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model is '%s'; only byte-level BPE ('gpt2') is supported",
                       path, model);
        goto done;
    }
    if ((st = tern_gguf_get_str_opt(g, "tokenizer.ggml.pre", &pre))) goto done;
    const tern_gguf_kv *toks = tern_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != TERN_GGUF_ARRAY || toks->arr_type != TERN_GGUF_STRING) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: key tokenizer.ggml.tokens is missing or not a string array", path);
        goto done;
    }
    if (toks->arr_n == 0 || toks->arr_n > (1u << 24)) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path,
                       (unsigned long long)toks->arr_n);
        goto done;
    }
    if ((st = tern_tok_init(t, (int32_t)toks->arr_n))) goto done;
    if ((st = set_pre(t, pre ? pre : "qwen2", path))) goto done;
    const tern_gguf_kv *types = tern_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (types && (types->type != TERN_GGUF_ARRAY || types->arr_n != toks->arr_n ||
                  types->arr_type == TERN_GGUF_STRING || types->arr_type == TERN_GGUF_FLOAT32 ||
                  types->arr_type == TERN_GGUF_FLOAT64)) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: tokenizer.ggml.token_type must be an integer array of %llu entries",
                       path, (unsigned long long)toks->arr_n);
        goto done;
    }
    for (uint64_t i = 0; i < toks->arr_n; i++) {
        int ty = types ? (int)tern_gguf_arr_i64(types, i) : TERN_TOKEN_NORMAL;
        if (ty < 0 || ty > 6) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%llu] = %d is not a token type", path,
                           (unsigned long long)i, ty);
            goto done;
        }
        if ((st = tern_tok_set(t, (int32_t)i, toks->arr_str[i].ptr, toks->arr_str[i].len, ty))) goto done;
    }
    const tern_gguf_kv *merges = tern_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (merges) {
        if (merges->type != TERN_GGUF_ARRAY || merges->arr_type != TERN_GGUF_STRING) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: tokenizer.ggml.merges is not a string array", path);
            goto done;
        }
        for (uint64_t i = 0; i < merges->arr_n; i++) {
            const char *s = merges->arr_str[i].ptr;
            size_t n = merges->arr_str[i].len, sp = 1;
            while (sp < n && s[sp] != ' ') sp++;
            if (sp >= n) {
                st = tern_fail(TERN_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu] has no space separator", path,
                               (unsigned long long)i);
                goto done;
            }
            if ((st = tern_tok_add_merge(t, s, sp, s + sp + 1, n - sp - 1, (int32_t)i))) goto done;
        }
    }
    const char *idkeys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                             "tokenizer.ggml.padding_token_id"};
    int32_t *dst[3] = {&t->bos, &t->eos, &t->pad};
    for (int k = 0; k < 3; k++) {
        uint64_t v = UINT64_MAX;
        if ((st = tern_gguf_get_u64_opt(g, idkeys[k], &v))) goto done;
        if (v != UINT64_MAX) {
            if (v >= toks->arr_n) {
                st = tern_fail(TERN_ERR_FORMAT, "%s: %s = %llu is outside the vocabulary (%llu)", path, idkeys[k],
                               (unsigned long long)v, (unsigned long long)toks->arr_n);
                goto done;
            }
            *dst[k] = (int32_t)v;
        }
    }
    if ((st = tern_gguf_get_str_opt(g, "tokenizer.chat_template", &tmpl))) goto done;
    if (tmpl) {
        t->chat_template = tern_strdup(tmpl);
        if (!t->chat_template) { st = tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); goto done; }
    }
    st = tern_tok_finish(t, path);
done:
    free(model);
    free(pre);
    free(tmpl);
    tern_gguf_close(g);
    return st;
}

/* -------------------------------------------------------- tokenizer.json */

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) { /* {"content": "..."} (AddedToken form) */
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

/* Find the Split regex in the pre_tokenizer (plain or inside a Sequence). */
static const char *find_split_regex(const cJSON *pt) {
    if (!cJSON_IsObject(pt)) return NULL;
    const char *type = json_str(pt, "type");
    if (type && !strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        return json_str(pat, "Regex");
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        const char *r = find_split_regex(it);
        if (r) return r;
    }
    return NULL;
}

static tern_status load_json_obj(const cJSON *root, const char *name, const cJSON *config, tern_tokenizer *t) {
    tern_status st;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *mtype = json_str(model, "type");
    if (!model || (mtype && strcmp(mtype, "BPE")))
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: model.type is '%s'; only BPE is supported", name,
                         mtype ? mtype : "(missing)");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return tern_fail(TERN_ERR_FORMAT, "%s: model.vocab is missing or not an object", name);
    long max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 24))
            return tern_fail(TERN_ERR_FORMAT, "%s: model.vocab['%s'] is not a valid id", name, it->string);
        if (it->valueint > max_id) max_id = it->valueint;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) || !json_str(it, "content"))
            return tern_fail(TERN_ERR_FORMAT, "%s: an added_tokens entry has no valid id/content", name);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return tern_fail(TERN_ERR_FORMAT, "%s: empty vocabulary", name);
    if ((st = tern_tok_init(t, (int32_t)max_id + 1))) return st;
    /* unfilled ids stay UNUSED with empty text */
    for (int32_t i = 0; i <= max_id; i++) t->tok[i].type = TERN_TOKEN_UNUSED;
    cJSON_ArrayForEach(it, vocab)
        if ((st = tern_tok_set(t, it->valueint, it->string, strlen(it->string), TERN_TOKEN_NORMAL))) return st;
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const char *c = json_str(it, "content");
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        if ((st = tern_tok_set(t, id->valueint, c, strlen(c), special ? TERN_TOKEN_CONTROL : TERN_TOKEN_USER_DEFINED)))
            return st;
    }
    int32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring;
            size_t n = strlen(s), sp = 1;
            while (sp < n && s[sp] != ' ') sp++;
            if (sp >= n) return tern_fail(TERN_ERR_FORMAT, "%s: model.merges[%d] has no space separator", name, rank);
            st = tern_tok_add_merge(t, s, sp, s + sp + 1, n - sp - 1, rank);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
            st = tern_tok_add_merge(t, a, strlen(a), b, strlen(b), rank);
        } else {
            return tern_fail(TERN_ERR_FORMAT, "%s: model.merges[%d] is neither \"a b\" nor [a, b]", name, rank);
        }
        if (st) return st;
        rank++;
    }
    const char *re = find_split_regex(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (re) {
        strcpy(t->pre, strstr(re, "\\p{M}") ? "qwen35" : "qwen2");
        if (!(t->regex = tern_strdup(re))) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    } else {
        strcpy(t->pre, "qwen2");
    }
    if (config) {
        const char *eos = json_str(config, "eos_token"), *bos = json_str(config, "bos_token");
        const char *pad = json_str(config, "pad_token"), *tmpl = json_str(config, "chat_template");
        if ((st = tern_tok_index(t))) return st;
        if (eos) t->eos = tern_token_lookup(t, eos, strlen(eos));
        if (bos) t->bos = tern_token_lookup(t, bos, strlen(bos));
        if (pad) t->pad = tern_token_lookup(t, pad, strlen(pad));
        if (tmpl && !(t->chat_template = tern_strdup(tmpl))) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    }
    return tern_tok_finish(t, name);
}

static tern_status parse_json(const char *text, size_t len, const char *name, cJSON **out) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        return tern_fail(TERN_ERR_FORMAT, "%s: invalid JSON near byte %zu", name, off);
    }
    *out = j;
    return TERN_OK;
}

tern_status tern_tokenizer_load_json(const char *json, size_t len, const char *name, tern_tokenizer **out) {
    if (!json || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_tokenizer_load_json: NULL argument");
    *out = NULL;
    cJSON *root = NULL;
    tern_status st = parse_json(json, len, name ? name : "tokenizer.json", &root);
    if (st) return st;
    tern_tokenizer *t = tern_calloc(1, sizeof *t);
    if (!t) { cJSON_Delete(root); return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); }
    st = load_json_obj(root, name ? name : "tokenizer.json", NULL, t);
    cJSON_Delete(root);
    if (st) { tern_tokenizer_free(t); return st; }
    *out = t;
    return TERN_OK;
}

static tern_status load_json_file(const char *path, tern_tokenizer *t) {
    char *text = NULL, *ctext = NULL;
    size_t len = 0, clen = 0;
    cJSON *root = NULL, *config = NULL;
    tern_status st = tern_read_file(path, (size_t)1 << 30, &text, &len);
    if (st) return st;
    if ((st = parse_json(text, len, path, &root))) goto done;
    /* tokenizer_config.json in the same folder (optional) */
    char cpath[4096];
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path + 1) : 0;
    snprintf(cpath, sizeof cpath, "%.*stokenizer_config.json", dl, path);
    struct stat sb;
    if (stat(cpath, &sb) == 0 && tern_read_file(cpath, (size_t)64 << 20, &ctext, &clen) == TERN_OK)
        config = cJSON_ParseWithLength(ctext, clen);
    st = load_json_obj(root, path, config, t);
done:
    cJSON_Delete(root);
    cJSON_Delete(config);
    free(text);  /* tern_read_file buffers are plain malloc */
    free(ctext);
    return st;
}

tern_status tern_tokenizer_load(const char *path, tern_tokenizer **out) {
    if (!path || !out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_tokenizer_load: NULL argument");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return tern_fail(TERN_ERR_IO, "%s: no such file or directory", path);
    tern_tokenizer *t = tern_calloc(1, sizeof *t);
    if (!t) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    tern_status st;
    if (S_ISDIR(sb.st_mode)) {
        char jp[4096];
        snprintf(jp, sizeof jp, "%s/tokenizer.json", path);
        if (stat(jp, &sb) != 0) {
            tern_free(t, sizeof *t);
            return tern_fail(TERN_ERR_IO, "%s: directory has no tokenizer.json", path);
        }
        st = load_json_file(jp, t);
    } else {
        unsigned char magic[64] = {0};
        FILE *f = fopen(path, "rb");
        if (!f) { tern_free(t, sizeof *t); return tern_fail(TERN_ERR_IO, "%s: cannot open", path); }
        size_t got = fread(magic, 1, sizeof magic, f);
        fclose(f);
        size_t k = 0;               /* a tokenizer.json starts with '{' after optional whitespace / BOM */
        if (got >= 3 && magic[0] == 0xEF && magic[1] == 0xBB && magic[2] == 0xBF) k = 3;
        while (k < got && (magic[k] == ' ' || magic[k] == '\t' || magic[k] == '\n' || magic[k] == '\r')) k++;
        if (got >= 4 && !memcmp(magic, "GGUF", 4)) st = load_gguf(path, t);
        else if (k < got && magic[k] == '{') st = load_json_file(path, t);
        else {
            tern_free(t, sizeof *t);
            return tern_fail(TERN_ERR_FORMAT, "%s: not a GGUF file (no 'GGUF' magic) nor a tokenizer.json", path);
        }
    }
    if (st) { tern_tokenizer_free(t); return st; }
    *out = t;
    return TERN_OK;
}
