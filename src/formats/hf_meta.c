/*
 * hf_meta.c - Hugging Face config.json / tokenizer.json <-> GGUF metadata for
 * qwen35 and qwen3, in the fork converter's key order (see hf_meta.h).
 */
#include "formats/hf_meta.h"

#include "formats/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *tern_hf_arch_name(tern_hf_arch a) { return a == TERN_HF_QWEN35 ? "qwen35" : "qwen3"; }

static const cJSON *jget(const cJSON *o, const char *k) { return tern_json_get(o, k); }

tern_status tern_hf_partial_rotary(const cJSON *c, const cJSON *rp, const char *src, double *out) {
    const cJSON *objs[2] = {c, rp && cJSON_IsObject(rp) ? rp : NULL};
    for (int i = 0; i < 2; i++) { /* every value present is checked, the last one wins */
        if (!objs[i] || !tern_json_get(objs[i], "partial_rotary_factor")) continue;
        double v = 0;
        tern_status st = tern_json_opt_f64(objs[i], "partial_rotary_factor", src, &v);
        if (st) return st;
        if (!(v > 0 && v <= 1))
            return tern_fail(TERN_ERR_FORMAT, "%s: partial_rotary_factor %g is not in (0, 1]", src, v);
        *out = v;
    }
    return TERN_OK;
}

tern_status tern_hf_hparams_from_json(const cJSON *root, const char *src, tern_hf_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->bos_id = hp->eos_id = hp->pad_id = -1;
    const cJSON *c = root;
    const cJSON *tc = jget(root, "text_config");
    if (cJSON_IsObject(tc)) c = tc;
    const char *mt = NULL;
    tern_status st = tern_json_opt_str(c, "model_type", src, &mt);
    if (st) return st;
    if (!mt) tern_json_opt_str(root, "model_type", src, &mt);
    const cJSON *archs = jget(root, "architectures");
    const char *a0 = cJSON_IsArray(archs) && cJSON_IsString(cJSON_GetArrayItem(archs, 0))
                         ? cJSON_GetArrayItem(archs, 0)->valuestring : "";
    if ((mt && (!strcmp(mt, "qwen3_5_text") || !strcmp(mt, "qwen3_5"))) ||
        !strcmp(a0, "Qwen3_5ForCausalLM") || !strcmp(a0, "Qwen3_5ForConditionalGeneration"))
        hp->arch = TERN_HF_QWEN35;
    else if ((mt && !strcmp(mt, "qwen3")) || !strcmp(a0, "Qwen3ForCausalLM"))
        hp->arch = TERN_HF_QWEN3;
    else
        return tern_fail(TERN_ERR_UNSUPPORTED, "%s: model_type '%s' is not qwen3_5_text, qwen3_5 or qwen3",
                         src, mt ? mt : "(none)");
    const int64_t BIG = (int64_t)1 << 40;
    if ((st = tern_json_req_i64(c, "num_hidden_layers", 1, 1024, src, &hp->n_layer))) return st;
    if ((st = tern_json_req_i64(c, "hidden_size", 1, BIG, src, &hp->n_embd))) return st;
    if ((st = tern_json_req_i64(c, "intermediate_size", 1, BIG, src, &hp->n_ff))) return st;
    if ((st = tern_json_req_i64(c, "num_attention_heads", 1, 1 << 20, src, &hp->n_head))) return st;
    hp->n_head_kv = hp->n_head;
    if ((st = tern_json_opt_i64(c, "num_key_value_heads", 1, 1 << 20, src, &hp->n_head_kv))) return st;
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((st = tern_json_opt_i64(c, "head_dim", 1, 1 << 20, src, &hp->head_dim))) return st;
    if (hp->head_dim > (1 << 20)) /* derived: the limit of an explicit head_dim (written back, it must read) */
        return tern_fail(TERN_ERR_FORMAT, "%s: head_dim %lld (hidden_size / num_attention_heads) is out of range 1..%d",
                         src, (long long)hp->head_dim, 1 << 20);
    if (hp->head_dim < 1)
        return tern_fail(TERN_ERR_FORMAT, "%s: head_dim is 0 (hidden_size %lld / %lld heads)", src,
                         (long long)hp->n_embd, (long long)hp->n_head);
    if ((st = tern_json_req_i64(c, "vocab_size", 1, TERN_HF_MAX_VOCAB, src, &hp->n_vocab))) return st;
    hp->n_ctx = 0;
    if ((st = tern_json_opt_i64(c, "max_position_embeddings", 0, BIG, src, &hp->n_ctx))) return st;
    hp->rms_eps = 1e-6;
    if ((st = tern_json_opt_f64(c, "rms_norm_eps", src, &hp->rms_eps))) return st;
    hp->rope_theta = 10000.0;
    const cJSON *rp = jget(c, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = jget(c, "rope_scaling");
    if ((st = tern_json_opt_f64(c, "rope_theta", src, &hp->rope_theta))) return st;
    if (cJSON_IsObject(rp) && (st = tern_json_opt_f64(rp, "rope_theta", src, &hp->rope_theta))) return st;
    /* stored as float32 in GGUF: it must stay a positive normal float32 */
    /* checked after the float32 rounding too: 0.99999999 rounds to 1.0f */
    if (!(hp->rms_eps >= 1e-30 && hp->rms_eps < 1 && (float)hp->rms_eps < 1.0f))
        return tern_fail(TERN_ERR_FORMAT, "%s: rms_norm_eps %g is not in [1e-30, 1)", src, hp->rms_eps);
    if (!(hp->rope_theta > 0 && hp->rope_theta < 1e30))
        return tern_fail(TERN_ERR_FORMAT, "%s: rope_theta %g is not a positive finite number", src, hp->rope_theta);
    bool tie = false;
    if ((st = tern_json_opt_bool(c, "tie_word_embeddings", src, &tie))) return st;
    if (c != root && jget(root, "tie_word_embeddings") &&
        (st = tern_json_opt_bool(root, "tie_word_embeddings", src, &tie)))
        return st;
    hp->tie_embeddings = tie;
    tern_json_opt_i64(c, "bos_token_id", 0, BIG, src, &hp->bos_id);
    tern_json_opt_i64(c, "eos_token_id", 0, BIG, src, &hp->eos_id);
    tern_json_opt_i64(c, "pad_token_id", 0, BIG, src, &hp->pad_id);
    tern_clear_error();
    if (hp->arch == TERN_HF_QWEN35) {
        if ((st = tern_json_req_i64(c, "linear_conv_kernel_dim", 1, 64, src, &hp->ssm_conv))) return st;
        if ((st = tern_json_req_i64(c, "linear_key_head_dim", 1, 1 << 16, src, &hp->ssm_dk))) return st;
        if ((st = tern_json_req_i64(c, "linear_num_key_heads", 1, 1 << 16, src, &hp->ssm_n_k))) return st;
        if ((st = tern_json_req_i64(c, "linear_num_value_heads", 1, 1 << 16, src, &hp->ssm_n_v))) return st;
        if ((st = tern_json_req_i64(c, "linear_value_head_dim", 1, 1 << 16, src, &hp->ssm_dv))) return st;
        hp->partial_rotary = 0.25;
        if ((st = tern_hf_partial_rotary(c, rp, src, &hp->partial_rotary))) return st;
        hp->rope_dim = (int64_t)(hp->head_dim * hp->partial_rotary);
        const cJSON *ms = cJSON_IsObject(rp) ? jget(rp, "mrope_section") : NULL;
        for (int i = 0; i < 3 && cJSON_IsArray(ms) && i < cJSON_GetArraySize(ms); i++) {
            int64_t v;
            if ((st = tern_json_as_i64(cJSON_GetArrayItem(ms, i), 0, 1 << 16, src, "mrope_section[]", &v))) return st;
            hp->mrope[i] = (int32_t)v;
        }
        const cJSON *lt = jget(c, "layer_types");
        int64_t fai = 4;
        if ((st = tern_json_opt_i64(c, "full_attention_interval", 1, 1024, src, &fai))) return st;
        if (cJSON_IsArray(lt)) {
            if (cJSON_GetArraySize(lt) != hp->n_layer)
                return tern_fail(TERN_ERR_FORMAT, "%s: layer_types has %d entries, num_hidden_layers is %lld",
                                 src, cJSON_GetArraySize(lt), (long long)hp->n_layer);
            int first = -1;
            for (int i = 0; i < hp->n_layer; i++) {
                const cJSON *e = cJSON_GetArrayItem(lt, i);
                if (!cJSON_IsString(e))
                    return tern_fail(TERN_ERR_FORMAT, "%s: layer_types[%d] is not a string", src, i);
                hp->full_attn[i] = !strcmp(e->valuestring, "full_attention");
                if (hp->full_attn[i] && first < 0) first = i;
            }
            if (first >= 0 && !jget(c, "full_attention_interval")) fai = first + 1;
        } else {
            for (int i = 0; i < hp->n_layer; i++) hp->full_attn[i] = (i + 1) % fai == 0;
        }
        hp->full_attn_interval = fai;
    }
    return TERN_OK;
}

tern_status tern_hf_hparams_load(const char *path, tern_hf_hparams *hp) {
    cJSON *root = NULL;
    tern_status st = tern_json_parse_file(path, 16u << 20, &root);
    if (st) return st;
    st = tern_hf_hparams_from_json(root, path, hp);
    cJSON_Delete(root);
    return st;
}

tern_status tern_hf_hparams_from_gguf(const tern_gguf *g, tern_hf_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->bos_id = hp->eos_id = hp->pad_id = -1;
    char *arch = NULL;
    tern_status st = tern_gguf_get_str(g, "general.architecture", &arch);
    if (st) return st;
    if (!strcmp(arch, "qwen35")) hp->arch = TERN_HF_QWEN35;
    else if (!strcmp(arch, "qwen3")) hp->arch = TERN_HF_QWEN3;
    else {
        st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: architecture '%s' is not qwen35 or qwen3", g->map.path, arch);
        free(arch);
        return st;
    }
    char k[128];
#define U(key, dst)                                                   \
    do {                                                              \
        uint64_t v_ = 0;                                              \
        snprintf(k, sizeof k, "%s." key, arch);                       \
        if ((st = tern_gguf_get_u64(g, k, &v_))) goto done;           \
        (dst) = (int64_t)v_;                                          \
    } while (0)
    U("block_count", hp->n_layer);
    U("embedding_length", hp->n_embd);
    U("feed_forward_length", hp->n_ff);
    U("attention.head_count", hp->n_head);
    U("attention.head_count_kv", hp->n_head_kv);
    U("attention.key_length", hp->head_dim);
    {
        uint64_t v = 0;
        snprintf(k, sizeof k, "%s.context_length", arch);
        if ((st = tern_gguf_get_u64_opt(g, k, &v))) goto done;
        hp->n_ctx = (int64_t)v;
        snprintf(k, sizeof k, "%s.rope.freq_base", arch);
        hp->rope_theta = 10000.0;
        if ((st = tern_gguf_get_f64_opt(g, k, &hp->rope_theta))) goto done;
        snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
        if ((st = tern_gguf_get_f64(g, k, &hp->rms_eps))) goto done;
    }
    if (hp->n_layer > 1024) { st = tern_fail(TERN_ERR_FORMAT, "%s: block_count too large", g->map.path); goto done; }
    const tern_gguf_kv *toks = tern_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const tern_gguf_tensor *emb = tern_gguf_find_tensor(g, "token_embd.weight");
    hp->n_vocab = toks ? (int64_t)toks->arr_n : 0;
    if (emb) hp->n_vocab = (int64_t)emb->ne[1];
    hp->tie_embeddings = tern_gguf_find_tensor(g, "output.weight") == NULL;
    {
        uint64_t v;
        if (!tern_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &v)) hp->bos_id = (int64_t)v;
        if (!tern_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &v)) hp->eos_id = (int64_t)v;
        if (!tern_gguf_get_u64(g, "tokenizer.ggml.padding_token_id", &v)) hp->pad_id = (int64_t)v;
        tern_clear_error();
    }
    if (hp->arch == TERN_HF_QWEN35) {
        uint64_t inner = 0;
        U("ssm.conv_kernel", hp->ssm_conv);
        U("ssm.state_size", hp->ssm_dk);
        U("ssm.group_count", hp->ssm_n_k);
        U("ssm.time_step_rank", hp->ssm_n_v);
        snprintf(k, sizeof k, "%s.ssm.inner_size", arch);
        if ((st = tern_gguf_get_u64(g, k, &inner))) goto done;
        if (!hp->ssm_n_v || inner % hp->ssm_n_v) {
            st = tern_fail(TERN_ERR_FORMAT, "%s: ssm.inner_size not a multiple of time_step_rank", g->map.path);
            goto done;
        }
        hp->ssm_dv = (int64_t)inner / hp->ssm_n_v;
        U("full_attention_interval", hp->full_attn_interval);
        U("rope.dimension_count", hp->rope_dim);
        if (!hp->full_attn_interval) { st = tern_fail(TERN_ERR_FORMAT, "%s: full_attention_interval 0", g->map.path); goto done; }
        hp->partial_rotary = hp->head_dim ? (double)hp->rope_dim / (double)hp->head_dim : 0;
        for (int i = 0; i < hp->n_layer; i++) hp->full_attn[i] = (i + 1) % hp->full_attn_interval == 0;
        snprintf(k, sizeof k, "%s.rope.dimension_sections", arch);
        const tern_gguf_kv *ds = tern_gguf_find_kv(g, k);
        if (ds && ds->type == TERN_GGUF_ARRAY && ds->arr_type != TERN_GGUF_STRING)
            for (uint64_t i = 0; i < ds->arr_n && i < 4; i++) hp->mrope[i] = (int32_t)tern_gguf_arr_i64(ds, i);
    }
#undef U
done:
    free(arch);
    return st;
}

cJSON *tern_hf_hparams_to_json(const tern_hf_hparams *hp) {
    bool q35 = hp->arch == TERN_HF_QWEN35;
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    cJSON *ar = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(ar, cJSON_CreateString(q35 ? "Qwen3_5ForCausalLM" : "Qwen3ForCausalLM"));
    cJSON_AddBoolToObject(c, "attention_bias", false);
    cJSON_AddNumberToObject(c, "attention_dropout", 0.0);
    if (hp->bos_id >= 0) cJSON_AddNumberToObject(c, "bos_token_id", (double)hp->bos_id);
    if (hp->eos_id >= 0) cJSON_AddNumberToObject(c, "eos_token_id", (double)hp->eos_id);
    cJSON_AddNumberToObject(c, "head_dim", (double)hp->head_dim);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "hidden_size", (double)hp->n_embd);
    cJSON_AddNumberToObject(c, "intermediate_size", (double)hp->n_ff);
    if (q35) {
        cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
        for (int i = 0; i < hp->n_layer; i++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(hp->full_attn[i] ? "full_attention" : "linear_attention"));
        cJSON_AddNumberToObject(c, "linear_conv_kernel_dim", (double)hp->ssm_conv);
        cJSON_AddNumberToObject(c, "linear_key_head_dim", (double)hp->ssm_dk);
        cJSON_AddNumberToObject(c, "linear_num_key_heads", (double)hp->ssm_n_k);
        cJSON_AddNumberToObject(c, "linear_num_value_heads", (double)hp->ssm_n_v);
        cJSON_AddNumberToObject(c, "linear_value_head_dim", (double)hp->ssm_dv);
    }
    cJSON_AddNumberToObject(c, "max_position_embeddings", (double)hp->n_ctx);
    cJSON_AddStringToObject(c, "model_type", q35 ? "qwen3_5_text" : "qwen3");
    cJSON_AddNumberToObject(c, "num_attention_heads", (double)hp->n_head);
    cJSON_AddNumberToObject(c, "num_hidden_layers", (double)hp->n_layer);
    cJSON_AddNumberToObject(c, "num_key_value_heads", (double)hp->n_head_kv);
    if (hp->pad_id >= 0) cJSON_AddNumberToObject(c, "pad_token_id", (double)hp->pad_id);
    if (q35) cJSON_AddNumberToObject(c, "partial_rotary_factor", hp->partial_rotary);
    /* rms eps / theta: the GGUF stores float32; print the shortest decimal of that float */
    char buf[64];
    snprintf(buf, sizeof buf, "%.8g", (double)(float)hp->rms_eps); /* shortest decimal that maps back */
    double eps = strtod(buf, NULL);
    if ((float)eps != (float)hp->rms_eps) eps = (double)(float)hp->rms_eps;
    cJSON_AddNumberToObject(c, "rms_norm_eps", eps);
    cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
    if (q35) {
        cJSON_AddBoolToObject(rp, "mrope_interleaved", true);
        cJSON *ms = cJSON_AddArrayToObject(rp, "mrope_section");
        for (int i = 0; i < 3; i++) cJSON_AddItemToArray(ms, cJSON_CreateNumber(hp->mrope[i]));
        cJSON_AddNumberToObject(rp, "partial_rotary_factor", hp->partial_rotary);
    }
    cJSON_AddNumberToObject(rp, "rope_theta", hp->rope_theta);
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", hp->tie_embeddings);
    cJSON_AddBoolToObject(c, "use_cache", true);
    cJSON_AddNumberToObject(c, "vocab_size", (double)hp->n_vocab);
    return c;
}

/* ------------------------------------------------------------ tokenizer */

void tern_hf_tokenizer_free(tern_hf_tokenizer *t) {
    if (!t) return;
    for (uint64_t i = 0; i < t->n_tokens; i++) free(t->tokens[i]);
    for (uint64_t i = 0; i < t->n_merges; i++) free(t->merges[i]);
    free(t->tokens);
    free(t->types);
    free(t->merges);
    free(t->chat_template);
    free(t);
}

static tern_hf_tokenizer *tok_new(uint64_t n) {
    tern_hf_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->tokens = calloc(n ? n : 1, sizeof *t->tokens);
    t->types = calloc(n ? n : 1, sizeof *t->types);
    if (!t->tokens || !t->types) {
        tern_hf_tokenizer_free(t);
        return NULL;
    }
    t->n_tokens = n;
    t->eos_id = t->pad_id = t->bos_id = -1;
    t->add_bos = t->add_eos = -1;
    return t;
}

/* Token id of a token string (vocab or added), -1 when absent. */
static int64_t tok_id(const tern_hf_tokenizer *t, const char *s) {
    for (uint64_t i = t->n_tokens; i-- > 0;)
        if (t->tokens[i] && !strcmp(t->tokens[i], s)) return (int64_t)i;
    return -1;
}

/* tokenizer_config's "eos_token": a string or {"content": ...}. */
static const char *tok_str(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = tern_json_get(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

tern_status tern_hf_tokenizer_from_json(const cJSON *tj, const cJSON *cj, const tern_hf_hparams *hp,
                                        const char *path, tern_hf_tokenizer **out) {
    *out = NULL;
    tern_status st;
    tern_hf_tokenizer *t = NULL;
    const cJSON *model = NULL, *vocab = NULL, *merges = NULL, *added = NULL;
    if ((st = tern_json_req_obj(tj, "model", path, &model))) goto out;
    const char *type = NULL;
    if ((st = tern_json_req_str(model, "type", path, &type))) goto out;
    if (strcmp(type, "BPE")) { st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: model.type '%s' is not BPE", path, type); goto out; }
    if ((st = tern_json_req_obj(model, "vocab", path, &vocab))) goto out;
    if ((st = tern_json_req_arr(model, "merges", path, &merges))) goto out;
    added = tern_json_get(tj, "added_tokens");
    int64_t n = hp->n_vocab;
    if (n <= 0 || n > TERN_HF_MAX_VOCAB) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: vocab_size %lld out of range", path, (long long)n);
        goto out;
    }
    t = tok_new((uint64_t)n);
    if (!t) { st = tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int64_t id;
        if ((st = tern_json_as_i64(e, 0, INT32_MAX, path, e->string, &id))) goto out;
        if (id >= n) continue; /* beyond vocab_size: dropped like the converter */
        free(t->tokens[id]);
        t->tokens[id] = strdup(e->string);
        t->types[id] = 1;
    }
    if (cJSON_IsArray(added))
        cJSON_ArrayForEach(e, added) {
            int64_t id;
            const char *content = NULL;
            bool special = false;
            if ((st = tern_json_req_i64(e, "id", 0, INT32_MAX, path, &id))) goto out;
            if ((st = tern_json_req_str(e, "content", path, &content))) goto out;
            if ((st = tern_json_opt_bool(e, "special", path, &special))) goto out;
            if (id >= n) continue;
            free(t->tokens[id]);
            t->tokens[id] = strdup(content);
            size_t cl = strlen(content);
            bool looks = cl >= 4 && !strncmp(content, "<|", 2) && !strcmp(content + cl - 2, "|>");
            t->types[id] = (special || looks) ? 3 : 4;
        }
    for (int64_t i = 0; i < n; i++)
        if (!t->tokens[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%lld]", (long long)i);
            t->tokens[i] = strdup(b);
            t->types[i] = 5;
        }
    for (int64_t i = 0; i < n; i++)
        if (!t->tokens[i]) { st = tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
    t->n_merges = (uint64_t)cJSON_GetArraySize(merges);
    t->merges = calloc(t->n_merges ? t->n_merges : 1, sizeof *t->merges);
    if (!t->merges) { st = tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
    uint64_t mi = 0;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            t->merges[mi] = strdup(e->valuestring);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring, *b = cJSON_GetArrayItem(e, 1)->valuestring;
            size_t l = strlen(a) + strlen(b) + 2;
            t->merges[mi] = malloc(l);
            if (t->merges[mi]) snprintf(t->merges[mi], l, "%s %s", a, b);
        } else {
            st = tern_fail(TERN_ERR_FORMAT, "%s: model.merges[%llu] is neither \"a b\" nor [a, b]", path,
                           (unsigned long long)mi);
            goto out;
        }
        if (!t->merges[mi]) { st = tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
        mi++;
    }
    /* pre-tokenizer: \p{M} in the letter classes -> qwen35 */
    {
        char *pre = cJSON_PrintUnformatted(tern_json_get(tj, "pre_tokenizer"));
        snprintf(t->pre, sizeof t->pre, "%s", pre && strstr(pre, "p{M}") ? "qwen35" : "qwen2");
        free(pre);
    }
    /* special tokens: tokenizer_config first, config.json ids as fallback */
    if (cJSON_IsObject(cj)) {
        const char *s;
        if ((s = tok_str(tern_json_get(cj, "eos_token")))) t->eos_id = tok_id(t, s);
        if ((s = tok_str(tern_json_get(cj, "pad_token")))) t->pad_id = tok_id(t, s);
        if ((s = tok_str(tern_json_get(cj, "bos_token")))) t->bos_id = tok_id(t, s);
        const cJSON *b = tern_json_get(cj, "add_bos_token");
        if (cJSON_IsBool(b)) t->add_bos = cJSON_IsTrue(b);
        b = tern_json_get(cj, "add_eos_token");
        if (cJSON_IsBool(b)) t->add_eos = cJSON_IsTrue(b);
        const cJSON *ct = tern_json_get(cj, "chat_template");
        if (cJSON_IsString(ct)) t->chat_template = strdup(ct->valuestring);
    }
    if (t->eos_id < 0) t->eos_id = hp->eos_id < n ? hp->eos_id : -1;
    if (t->pad_id < 0) t->pad_id = hp->pad_id < n ? hp->pad_id : -1;
    if (t->bos_id < 0) t->bos_id = hp->bos_id < n ? hp->bos_id : -1;
    *out = t;
    t = NULL;
out:
    tern_hf_tokenizer_free(t);
    return st;
}

tern_status tern_hf_tokenizer_load(const char *dir, const tern_hf_hparams *hp, tern_hf_tokenizer **out) {
    *out = NULL;
    char path[4096], cpath[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    cJSON *tj = NULL, *cj = NULL;
    tern_status st = tern_json_parse_file(path, 256u << 20, &tj);
    if (st) return st;
    if (tern_json_parse_file(cpath, 64u << 20, &cj)) cj = NULL;
    tern_clear_error();
    tern_hf_tokenizer *t = NULL;
    st = tern_hf_tokenizer_from_json(tj, cj, hp, path, &t);
    if (!st && !t->chat_template) {
        char jp[4096];
        snprintf(jp, sizeof jp, "%s/chat_template.jinja", dir);
        char *txt = NULL;
        size_t len = 0;
        if (tern_read_file(jp, 16u << 20, &txt, &len) == TERN_OK) {
            t->chat_template = strdup(txt);
            tern_free(txt, len + 1);
        }
        tern_clear_error();
    }
    cJSON_Delete(tj);
    cJSON_Delete(cj);
    if (!st) *out = t;
    return st;
}

/* GPT-2 byte-level alphabet: byte b -> its printable code point. */
static void byte_token(int b, char *out) {
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

tern_status tern_hf_tokenizer_synthetic(int64_t n_vocab, tern_hf_tokenizer **out) {
    *out = NULL;
    if (n_vocab < 256 + 5) return tern_fail(TERN_ERR_INVALID_ARG, "synthetic tokenizer: vocab %lld < 261", (long long)n_vocab);
    tern_hf_tokenizer *t = tok_new((uint64_t)n_vocab);
    if (!t) return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory");
    static const char *added[5] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    for (int64_t i = 0; i < n_vocab; i++) {
        char b[32];
        if (i < 256) {
            byte_token((int)i, b);
            t->types[i] = 1;
        } else if (i >= n_vocab - 5) {
            snprintf(b, sizeof b, "%s", added[i - (n_vocab - 5)]);
            t->types[i] = i < n_vocab - 2 ? 3 : 4;
        } else {
            snprintf(b, sizeof b, "[PAD%lld]", (long long)i);
            t->types[i] = 5;
        }
        t->tokens[i] = strdup(b);
        if (!t->tokens[i]) { tern_hf_tokenizer_free(t); return tern_fail(TERN_ERR_NOMEM, "tokenizer: out of memory"); }
    }
    t->merges = calloc(1, sizeof *t->merges);
    snprintf(t->pre, sizeof t->pre, "qwen2");
    t->bos_id = t->pad_id = n_vocab - 5;
    t->eos_id = n_vocab - 3;
    t->add_bos = t->add_eos = 0;
    t->chat_template = strdup(
        "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}");
    *out = t;
    return TERN_OK;
}

/* ------------------------------------------------------------ GGUF keys */

uint32_t tern_hf_file_type(tern_dtype t) {
    switch (t) {
    case TERN_DT_PQ2_0: return 141;
    case TERN_DT_PTQ1_0: return 143;
    case TERN_DT_Q2_0:
    case TERN_DT_Q2_0_G64: return 41;
    default: return 0;
    }
}

void tern_hf_size_label(uint64_t n, char *buf, size_t len) {
    double v;
    const char *suf;
    if (n > 1000000000000ull) { v = n * 1e-12; suf = "T"; }
    else if (n > 1000000000ull) { v = n * 1e-9; suf = "B"; }
    else if (n > 1000000ull) { v = n * 1e-6; suf = "M"; }
    else { v = n * 1e-3; suf = "K"; }
    /* gguf-py: fix = max(2 - len(str(round(v)).lstrip('0')), 0) */
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%.0f", nearbyint(v));
    const char *p = tmp;
    while (*p == '0') p++;
    int digits = (int)strlen(p), fix = 2 - digits > 0 ? 2 - digits : 0;
    snprintf(buf, len, "%.*f%s", fix, v, suf);
}

tern_status tern_hf_write_meta(tern_gguf_writer *w, const tern_hf_hparams *hp, const char *name,
                               uint64_t n_params, tern_dtype weight_type, const tern_hf_tokenizer *tok) {
    const char *a = tern_hf_arch_name(hp->arch);
    bool q35 = hp->arch == TERN_HF_QWEN35;
    char k[128], label[32];
    tern_status st = TERN_OK;
#define KU(key, v) do { snprintf(k, sizeof k, "%s." key, a); if (!st) st = tern_gguf_w_set_u32(w, k, (uint32_t)(v)); } while (0)
#define KF(key, v) do { snprintf(k, sizeof k, "%s." key, a); if (!st) st = tern_gguf_w_set_f32(w, k, (float)(v)); } while (0)
    st = tern_gguf_w_set_str(w, "general.architecture", a);
    if (!st) st = tern_gguf_w_set_str(w, "general.type", "model");
    if (!st) st = tern_gguf_w_set_str(w, "general.name", name);
    tern_hf_size_label(n_params, label, sizeof label);
    if (!st) st = tern_gguf_w_set_str(w, "general.size_label", label);
    KU("block_count", hp->n_layer);
    KU("context_length", hp->n_ctx);
    KU("embedding_length", hp->n_embd);
    KU("feed_forward_length", hp->n_ff);
    KU("attention.head_count", hp->n_head);
    KU("attention.head_count_kv", hp->n_head_kv);
    if (q35) {
        snprintf(k, sizeof k, "%s.rope.dimension_sections", a);
        if (!st) st = tern_gguf_w_set_arr(w, k, TERN_GGUF_INT32, hp->mrope, 4);
    }
    KF("rope.freq_base", hp->rope_theta);
    KF("attention.layer_norm_rms_epsilon", hp->rms_eps);
    KU("attention.key_length", hp->head_dim);
    KU("attention.value_length", hp->head_dim);
    if (!st) st = tern_gguf_w_set_u32(w, "general.file_type", tern_hf_file_type(weight_type));
    if (q35) {
        KU("ssm.conv_kernel", hp->ssm_conv);
        KU("ssm.state_size", hp->ssm_dk);
        KU("ssm.group_count", hp->ssm_n_k);
        KU("ssm.time_step_rank", hp->ssm_n_v);
        KU("ssm.inner_size", hp->ssm_dv * hp->ssm_n_v);
        KU("full_attention_interval", hp->full_attn_interval);
        KU("rope.dimension_count", hp->rope_dim);
    }
#undef KU
#undef KF
    if (!st) st = tern_gguf_w_set_u32(w, "general.quantization_version", 2);
    if (!tok || st) return st;
    st = tern_gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (!st) st = tern_gguf_w_set_str(w, "tokenizer.ggml.pre", tok->pre);
    uint64_t *lens = malloc((tok->n_tokens + tok->n_merges + 1) * sizeof *lens);
    if (!lens) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < tok->n_tokens; i++) lens[i] = strlen(tok->tokens[i]);
    if (!st) st = tern_gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok->tokens, lens, tok->n_tokens);
    if (!st) st = tern_gguf_w_set_arr(w, "tokenizer.ggml.token_type", TERN_GGUF_INT32, tok->types, tok->n_tokens);
    for (uint64_t i = 0; i < tok->n_merges; i++) lens[i] = strlen(tok->merges[i]);
    if (!st) st = tern_gguf_w_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)tok->merges, lens, tok->n_merges);
    free(lens);
    if (!st && tok->eos_id >= 0) st = tern_gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)tok->eos_id);
    if (!st && tok->pad_id >= 0) st = tern_gguf_w_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)tok->pad_id);
    if (!st && tok->bos_id >= 0) st = tern_gguf_w_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)tok->bos_id);
    if (!st && tok->add_bos >= 0) st = tern_gguf_w_set_bool(w, "tokenizer.ggml.add_bos_token", tok->add_bos);
    if (!st && tok->add_eos >= 0) st = tern_gguf_w_set_bool(w, "tokenizer.ggml.add_eos_token", tok->add_eos);
    if (!st && tok->chat_template) st = tern_gguf_w_set_str(w, "tokenizer.chat_template", tok->chat_template);
    return st;
}
