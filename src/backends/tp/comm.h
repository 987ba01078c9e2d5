/*
 * comm.h - the communicator of tensor parallel (backend_tp.c): the collective the
 * sharded forward pass needs, behind one interface with two implementations.
 *
 *   cpu   (comm.c)       N ranks in one process, host buffers: the sum is taken in
 *                        rank order (0, 1, .., N-1) and written back to every rank, so
 *                        every rank holds the same bits (the replicated residual stream
 *                        stays identical across shards, as NCCL's all-reduce keeps it).
 *   nccl  (comm_nccl.c)  N GPUs driven by one process (ncclCommInitAll), device buffers,
 *                        one stream per rank; libnccl.so.2 is opened at run time (dlopen),
 *                        so nothing links to it and a machine without it gets an error
 *                        naming the library, not a binary that will not start. Compiled
 *                        only where CMake found nccl.h (TERN_HAVE_NCCL); elsewhere
 *                        tern_comm_nccl_new says so.
 *
 * One process drives every rank (the single-process simulation and the one-process
 * multi-GPU case), so a collective takes all ranks' buffers at once: bufs[r] is rank r's
 * buffer of n floats, reduced in place.
 */
#ifndef TERN_MODEL_COMM_H
#define TERN_MODEL_COMM_H

#include "core/common.h"

typedef struct tern_comm tern_comm;

typedef struct tern_comm_vt {
    const char *name;
    /* bufs[r] (r < n_ranks) := sum over ranks of bufs[.] (n floats each), in place.
     * Queued on the ranks' streams (nccl) or complete on return (cpu). */
    tern_status (*allreduce_sum)(tern_comm *c, float *const *bufs, size_t n);
    void (*destroy)(tern_comm *c);
} tern_comm_vt;

struct tern_comm {
    const tern_comm_vt *vt;
    int n_ranks;
    uint64_t calls, floats; /* collectives issued and floats reduced per rank (statistics) */
};

/* In-memory all-reduce of n_ranks host buffers. */
tern_status tern_comm_cpu_new(int n_ranks, tern_comm **out);
/* NCCL over the GPUs devices[0..n_ranks); streams[r] is rank r's cudaStream_t (NULL:
 * the legacy default stream). TERN_ERR_UNSUPPORTED without NCCL (build or machine). */
tern_status tern_comm_nccl_new(int n_ranks, const int *devices, void *const *streams,
                               tern_comm **out);
/* Whether this build has the NCCL implementation compiled in. */
bool tern_comm_nccl_compiled(void);

static inline tern_status tern_comm_allreduce_sum(tern_comm *c, float *const *bufs, size_t n) {
    c->calls++;
    c->floats += n;
    return c->vt->allreduce_sum(c, bufs, n);
}
static inline void tern_comm_free(tern_comm *c) {
    if (c) c->vt->destroy(c);
}

#endif
