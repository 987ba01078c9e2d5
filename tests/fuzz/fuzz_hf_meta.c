/*
 * fuzz_hf_meta.c - libFuzzer target for the Hugging Face JSON readers of
 * `tern quantize` / MLX -> GGUF (src/formats/hf_meta.c): config.json
 * hyperparameters (flat or text_config), tokenizer.json (BPE vocab, added
 * tokens, merges) and tokenizer_config.json (special tokens, template).
 * Input: one JSON document used as all three files; what parses is written as
 * GGUF metadata into a writer (never to disk) and back to a text_config.
 */
#include "formats/gguf.h"
#include "formats/hf_meta.h"
#include "formats/json_util.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *c = NULL;
    if (tern_json_parse((const char *)data, size, "fuzz.json", &c) != TERN_OK) return 0;
    tern_hf_hparams hp;
    bool have_hp = tern_hf_hparams_from_json(c, "config.json", &hp) == TERN_OK;
    if (!have_hp) {
        memset(&hp, 0, sizeof hp);
        hp.arch = TERN_HF_QWEN3;
        hp.bos_id = hp.eos_id = hp.pad_id = -1;
    }
    if (hp.n_vocab <= 0 || hp.n_vocab > 4096) hp.n_vocab = 300; /* bound the work per input */
    tern_hf_tokenizer *t = NULL;
    if (tern_hf_tokenizer_from_json(c, c, &hp, "tokenizer.json", &t) == TERN_OK) {
        if (t->n_tokens != (uint64_t)hp.n_vocab) __builtin_trap();
        for (uint64_t i = 0; i < t->n_tokens; i++)
            if (!t->tokens[i] || t->types[i] < 1 || t->types[i] > 5) __builtin_trap();
    }
    if (have_hp) {
        tern_gguf_writer *w = NULL;
        if (tern_gguf_writer_new(&w) == TERN_OK) {
            tern_hf_write_meta(w, &hp, "fuzz", 12345, TERN_DT_Q2_0, t);
            tern_gguf_writer_free(w);
        }
        cJSON *j = tern_hf_hparams_to_json(&hp);
        if (j) {
            tern_hf_hparams hp2;
            /* what we write must parse back to the same shape */
            if (tern_hf_hparams_from_json(j, "rt.json", &hp2) != TERN_OK || hp2.n_layer != hp.n_layer ||
                hp2.n_embd != hp.n_embd || hp2.arch != hp.arch)
                __builtin_trap();
            cJSON_Delete(j);
        }
    }
    tern_hf_tokenizer_free(t);
    cJSON_Delete(c);
    return 0;
}
