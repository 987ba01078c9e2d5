/*
 * cu_persist.h - the persistent decode step's host side (docs/persistent.md):
 * tp_build turns a model's step plan into the program of kernels/cuda/persist.h
 * (stages, per-CTA task lists; plain C, no GPU needed: tests/unit/test_persist_build.c),
 * and the CUDA back-end's glue (persist_step.c) runs it for single-token steps.
 */
#ifndef TERN_BACKENDS_CUDA_CU_PERSIST_H
#define TERN_BACKENDS_CUDA_CU_PERSIST_H

#include "model/model.h"
#include "model/backend.h"
#include "kernels/cuda/persist.h"

/* The program of model m's plan for n_cta CTAs, or TERN_ERR_UNSUPPORTED with the
 * reason (an op, shape or weight type the kernel does not run; only the matrices of
 * `layout` (tern_qmat.layout: the CUDA back-end's tiled one, or TERN_LAYOUT_ROWS in a
 * CPU test) of 128-group ternary types are taken). Weight and gain pointers are the
 * model's. Free with tp_prog_free. */
tern_status tp_build(const tern_model *m, const tm_plan *plan, int n_cta, int layout, tp_prog *out);
void tp_prog_free(tp_prog *p);
/* The floats of each scratch buffer (persist.h tp_buf) of model m's programs. */
void tp_buf_widths(const tern_model *m, size_t w[TP_BUF_COUNT]);

/* The plan op, layer and awaited stage of stage s, as text (errors). */
void tp_describe_stage(const tp_prog *p, int s, char *buf, size_t n);

/* The kernel's plain reference (persist_ref.c): the program run on the host, stage by
 * stage and task by task with the kernel's semantics (task ranges, partial slots, norm
 * sources, buffer offsets), on a program built with TERN_LAYOUT_ROWS from a model loaded
 * on the CPU (128-group ternary rows), float32 KV cache of n_ctx positions and, for the
 * GDN layers, its own fp32 recurrent and conv states (zero at tp_ref_new). */
typedef struct tp_ref tp_ref;
tern_status tp_ref_new(const tp_prog *p, const tern_model *m, int n_ctx, tp_ref **out);
/* One step: token at position pos; logits (n_vocab floats) into `logits`; returns the
 * argmax the program's ARGMAX stage finds (-1 on bad arguments). */
int tp_ref_step(tp_ref *r, int token, int pos, float *logits);
void tp_ref_free(tp_ref *r);

#if defined(TERN_HAVE_CUDA)
struct tc_ctx;
struct tc_persist;
/* A single-token step through the persistent kernel when the step and the model allow
 * it (*took set); else *took false and nothing was queued. *state is the back-end's
 * (NULL at first; tm_cuda_persist_free frees it). The model's layout of tiled matrices
 * is `layout`. */
tern_status tm_cuda_persist_step(struct tc_ctx *tc, void **state, int layout, const tm_step *st, bool *took);
void tm_cuda_persist_free(struct tc_ctx *tc, void *state);
/* The kernel-layer object of a back-end's state (tests: lab.h's tc_persist_debug), or NULL. */
struct tc_persist *tm_cuda_persist_obj(void *state);
/* The last persistent step's argmax token (computed on the device), or -1. */
int tm_cuda_persist_token(void *state);
#endif

#endif
