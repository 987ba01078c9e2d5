/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors reader. Input: raw
 * file bytes (u64 header length, JSON header, data). Every tensor's first and
 * last byte is read so out-of-range offsets show up in ASan.
 */
#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tern_st *st = NULL;
    if (tern_st_open_mem(data, size, "fuzz.safetensors", &st) != TERN_OK) return 0;
    volatile uint64_t sink = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        const tern_st_tensor *t = &st->tensors[i];
        if (t->nbytes) sink += t->data[0] + t->data[t->nbytes - 1];
        sink += tern_st_find(st, t->name) == t;
        sink += tern_st_expect(st, t, t->dtype, t->n_dims, t->shape) == TERN_OK;
    }
    for (size_t i = 0; i < st->n_meta; i++) sink += tern_st_meta(st, st->meta_keys[i]) != NULL;
    (void)sink;
    tern_st_close(st);
    return 0;
}
