/*
 * loader.h - the pieces of tern_model_load (internal to src/model):
 *   loader.c          public API: load (device, threads, repack), free, info
 *   loader_hparams.c  <arch>.* keys -> tm_hparams (GGUF keys, or an MLX pack's
 *                     text_config mapped to the same names)
 *   loader_bind.c     the architecture table's roles -> tm_layer fields, shapes
 *                     from the hyperparameters, one walk for every format
 *   loader_gguf.c     a GGUF as a tensor source (in place, PTQ1_0 transcoded,
 *                     the prism.hadamard contract through formats/hadamard.h)
 *   loader_mlx.c      an MLX pack as a tensor source (repacked blocks)
 *   loader_upload.c   every tensor the pass reads -> back-end memory
 */
#ifndef TERN_MODEL_LOADER_H
#define TERN_MODEL_LOADER_H

#include "model/model.h"

#define TRY(x) do { tern_status st_ = (x); if (st_) return st_; } while (0)

/* A tensor source: the format's reader of one role's tensor. */
typedef struct tm_src {
    void *u;
    const char *path;
    /* Matrix [n rows, k] (n < 0: any row count); an absent optional role leaves
     * out->data NULL and returns TERN_OK. */
    tern_status (*mat)(void *u, const tm_role *r, int il, int64_t k, int64_t n, tern_qmat *out);
    /* Float vector of n elements (float32, aligned). */
    tern_status (*vec)(void *u, const tm_role *r, int il, int64_t n, const float **out);
} tm_src;

/* Bind every role of the model's architecture (m->hp filled; m->hadamard and the
 * sign vectors set): sets n_vocab, the layers, kv/gdn indices; tied head. */
tern_status tm_bind_tensors(tern_model *m, const tm_src *s);
/* The model's hyperparameters as the tables' dims. */
tm_dims tm_model_dims(const tern_model *m);

tern_status tm_load_gguf(tern_model *m, const char *path);
tern_status tm_upload_model(tern_model *m);
/* Every ternary matrix the forward pass multiplies by, with its fast_* slot. */
int tm_model_mats(tern_model *m, tern_qmat **file, tern_qmat **fast, int cap);
/* Give the whole pages of [p, p+n) that lie in the model file's mapping back to the
 * kernel (read-only and file-backed: a later read faults them in again). */
void tm_drop_host_pages(tern_model *m, const void *p, size_t n);

#endif
