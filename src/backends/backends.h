/*
 * backends.h - the back-ends' constructors and what only src/backends/ (and the tests
 * of one back-end) call by name. The model (src/model/) reaches a back-end through the
 * registry (tm_backend_create) and its table (backend.h) only.
 */
#ifndef TERN_BACKENDS_BACKENDS_H
#define TERN_BACKENDS_BACKENDS_H

#include "model/backend.h"

/* backend_cpu.c, backend_cuda.c */
tern_pool *tm_backend_cpu_pool(const tm_backend *be); /* NULL for another back-end */
tern_status tm_backend_cpu_create(const tm_backend_params *p, tm_backend **out);
tern_status tm_backend_cuda_create(const tm_backend_params *p, tm_backend **out);
bool tm_backend_cuda_present(const char **what);
const char *tm_backend_cuda_device(void); /* the GPU's name ("" when none) */
/* The CUDA back-end's device context (kernels/cuda/cuda.h), for benchmarks that call the
 * kernel layer beside a model (launch counts, profiles); NULL for another back-end. */
struct tc_ctx *tm_backend_cuda_ctx(tm_backend *be);
/* Step this session of a CUDA model op by op, never through a step graph (benchmarks
 * that count launches or profile ops); nothing for another back-end's session. */
void tm_backend_cuda_session_no_graph(tern_session *s);
/* Tests: the persistent step's kernel-layer object once a step made it (NULL: none;
 * lab.h tc_persist_debug), and its last argmax token (-1: none). */
struct tc_persist *tm_backend_cuda_persist(tm_backend *be);
int tm_backend_cuda_persist_token(tm_backend *be);
/* Tensor parallel (backend_tp.c): n shards of back-end `spec`; its model_loaded hook
 * splits the loaded model (errors name the dimension that does not split). */
tern_status tm_backend_tp_create(const char *spec, int n, const tm_backend_params *p,
                                 tm_backend **out);

#endif
