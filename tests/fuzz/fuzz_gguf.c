/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (gguf.c) and the
 * prism.hadamard contract parser on top of it (hadamard.c). Input: raw file
 * bytes. Every parsed value is touched so out-of-bounds reads show up in ASan.
 */
#include <math.h>
#include "formats/gguf.h"
#include "formats/hadamard.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tern_gguf *g = NULL;
    if (tern_gguf_open_mem(data, size, "fuzz.gguf", &g) != TERN_OK) return 0;
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const tern_gguf_kv *kv = &g->kv[i];
        sink += strlen(kv->key);
        if (kv->type == TERN_GGUF_STRING && kv->v.str.len) sink += (uint8_t)kv->v.str.ptr[kv->v.str.len - 1];
        if (kv->type == TERN_GGUF_ARRAY) {
            for (uint64_t j = 0; j < kv->arr_n && j < 64; j++) {
                if (kv->arr_type == TERN_GGUF_STRING) sink += kv->arr_str[j].len ? (uint8_t)kv->arr_str[j].ptr[0] : 0;
                else {
                    double f = tern_gguf_arr_f64(kv, j); /* a double outside uint64's range is UB to convert */
                    sink += (uint64_t)tern_gguf_arr_i64(kv, j) + (f == f && fabs(f) < 1e18 ? (uint64_t)(int64_t)f : 1u);
                }
            }
        }
        uint64_t u;
        double d;
        char *s = NULL;
        tern_gguf_get_u64_opt(g, kv->key, &u);
        tern_gguf_get_f64_opt(g, kv->key, &d);
        if (tern_gguf_get_str_opt(g, kv->key, &s) == TERN_OK) free(s);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        if (t->nbytes) sink += t->data[0] + t->data[t->nbytes - 1];
        sink += tern_gguf_find_tensor(g, t->name) == t;
    }
    tern_hadamard_meta *h = NULL;
    if (tern_hadamard_from_gguf(g, &h) == TERN_OK && h) {
        tern_hadamard_validate_gguf(h, g);
        for (uint32_t i = 0; i < h->n_widths; i++) sink += tern_hadamard_signs_for_width(h, h->widths[i]) != NULL;
        char *js = NULL;
        if (tern_hadamard_to_json(h, &js) == TERN_OK) free(js);
        tern_hadamard_free(h);
    }
    (void)sink;
    tern_gguf_close(g);
    return 0;
}
