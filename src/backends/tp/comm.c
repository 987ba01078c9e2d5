/*
 * comm.c - the in-memory communicator (comm.h): N ranks in one process, host
 * buffers, the sum taken in rank order and written back to every rank.
 */
#include "backends/tp/comm.h"

#include <stdlib.h>

static tern_status cpu_allreduce_sum(tern_comm *c, float *const *bufs, size_t n) {
    if (c->n_ranks < 2 || !n) return TERN_OK;
    float *acc = bufs[0];
    for (int r = 1; r < c->n_ranks; r++) {
        const float *b = bufs[r];
        for (size_t i = 0; i < n; i++) acc[i] += b[i];
    }
    for (int r = 1; r < c->n_ranks; r++)
        if (bufs[r] != acc) memcpy(bufs[r], acc, n * sizeof(float));
    return TERN_OK;
}

static void cpu_destroy(tern_comm *c) { free(c); }

static const tern_comm_vt g_cpu_comm = {
    .name = "cpu",
    .allreduce_sum = cpu_allreduce_sum,
    .destroy = cpu_destroy,
};

tern_status tern_comm_cpu_new(int n_ranks, tern_comm **out) {
    *out = NULL;
    if (n_ranks < 1) return tern_fail(TERN_ERR_INVALID_ARG, "communicator: %d ranks", n_ranks);
    tern_comm *c = calloc(1, sizeof *c);
    if (!c) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    c->vt = &g_cpu_comm;
    c->n_ranks = n_ranks;
    *out = c;
    return TERN_OK;
}
