/*
 * fuzz_json.c - libFuzzer target for the JSON parsers of the MLX pack:
 * hadamard.json (hadamard.c) and config.json's text_config mapping to GGUF
 * hyperparameters (mlxpack.c), through the checked cJSON helpers.
 * Input: a JSON document; both parsers see it.
 */
#include "formats/hadamard.h"
#include "formats/json_util.h"
#include "formats/mlxpack.h"

#include <stdlib.h>

static void emit(const char *k, double v, bool is_int, void *u) { (void)k; (void)v; (void)is_int; (void)u; }
static void emit_arr(const char *k, const int64_t *v, size_t n, void *u) { (void)k; (void)v; (void)n; (void)u; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tern_hadamard_meta *h = NULL;
    if (tern_hadamard_from_json((const char *)data, size, "fuzz.json", &h) == TERN_OK) {
        char *js = NULL;
        if (tern_hadamard_to_json(h, &js) == TERN_OK) {
            tern_hadamard_meta *h2 = NULL;
            /* what we write must parse back */
            if (tern_hadamard_from_json(js, strlen(js), "rt.json", &h2) != TERN_OK) __builtin_trap();
            tern_hadamard_free(h2);
            free(js);
        }
        tern_hadamard_free(h);
    }
    cJSON *c = NULL;
    if (tern_json_parse((const char *)data, size, "config.json", &c) == TERN_OK) {
        if (cJSON_IsObject(c)) {
            tern_mlxpack p;
            memset(&p, 0, sizeof p);
            p.dir = "fuzz";
            p.config = c;
            const cJSON *tc = tern_json_get(c, "text_config");
            p.text_config = cJSON_IsObject(tc) ? tc : c;
            p.model_type = "";
            tern_json_opt_str(c, "model_type", "config.json", &p.model_type);
            p.text_model_type = "";
            tern_json_opt_str(p.text_config, "model_type", "config.json", &p.text_model_type);
            const char *arch = NULL;
            tern_mlxpack_gguf_hparams(&p, &arch, emit, emit_arr, NULL);
            int64_t v;
            double d;
            bool b;
            tern_mlxpack_cfg_i64_opt(&p, "hidden_size", &v);
            tern_mlxpack_cfg_f64_opt(&p, "rms_norm_eps", &d);
            tern_mlxpack_cfg_bool_opt(&p, "tie_word_embeddings", &b);
        }
        cJSON_Delete(c);
    }
    return 0;
}
