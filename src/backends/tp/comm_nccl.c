/*
 * comm_nccl.c - the NCCL communicator (comm.h): N GPUs driven by one process.
 *
 * Compiled against nccl.h where CMake found it (TERN_HAVE_NCCL); the library itself,
 * libnccl.so.2, is opened at run time, so the binaries keep needing only the driver
 * and a machine without NCCL gets an error naming the library. All-reduce = one NCCL
 * group of ncclAllReduce calls (in place, float, sum), one per rank on its stream; it
 * is queued, not waited for (the ranks' back-ends sync their streams as usual).
 * NVLink SHARP (NVLS, multicast) is left off: NCCL_NVLS_ENABLE=0 is set before the
 * communicators are made unless the caller's environment says otherwise.
 */
#include "backends/tp/comm.h"

#include <stdlib.h>

#if defined(TERN_HAVE_NCCL)

#include <dlfcn.h>
#include <nccl.h>

typedef struct nccl_fns {
    void *lib;
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*allreduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                              ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    const char *(*errstr)(ncclResult_t);
} nccl_fns;

typedef struct nccl_comm {
    tern_comm base;
    nccl_fns f;
    ncclComm_t *comms;
    cudaStream_t *streams;
} nccl_comm;

static const char *nerr(const nccl_comm *c, ncclResult_t r) {
    return c->f.errstr ? c->f.errstr(r) : "?";
}

static tern_status nccl_allreduce_sum(tern_comm *cc, float *const *bufs, size_t n) {
    nccl_comm *c = (nccl_comm *)cc;
    if (!n) return TERN_OK;
    ncclResult_t r = c->f.group_start();
    for (int i = 0; r == ncclSuccess && i < cc->n_ranks; i++)
        r = c->f.allreduce(bufs[i], bufs[i], n, ncclFloat, ncclSum, c->comms[i], c->streams[i]);
    ncclResult_t e = c->f.group_end();
    if (r == ncclSuccess) r = e;
    if (r != ncclSuccess)
        return tern_fail(TERN_ERR_IO, "nccl: all-reduce of %zu floats over %d ranks: %s", n,
                         cc->n_ranks, nerr(c, r));
    return TERN_OK;
}

static void nccl_destroy(tern_comm *cc) {
    nccl_comm *c = (nccl_comm *)cc;
    for (int i = 0; c->comms && i < cc->n_ranks; i++)
        if (c->comms[i]) c->f.destroy(c->comms[i]);
    free(c->comms);
    free(c->streams);
    if (c->f.lib) dlclose(c->f.lib);
    free(c);
}

static const tern_comm_vt g_nccl_comm = {
    .name = "nccl",
    .allreduce_sum = nccl_allreduce_sum,
    .destroy = nccl_destroy,
};

bool tern_comm_nccl_compiled(void) { return true; }

tern_status tern_comm_nccl_new(int n_ranks, const int *devices, void *const *streams,
                               tern_comm **out) {
    *out = NULL;
    if (n_ranks < 1 || !devices)
        return tern_fail(TERN_ERR_INVALID_ARG, "nccl: %d ranks", n_ranks);
    nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return tern_fail(TERN_ERR_NOMEM, "out of memory");
    c->base.vt = &g_nccl_comm;
    c->base.n_ranks = n_ranks;
    c->f.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!c->f.lib) {
        free(c);
        return tern_fail(TERN_ERR_UNSUPPORTED, "nccl: cannot open libnccl.so.2 (%s)", dlerror());
    }
#define SYM(field, name)                                                                     \
    do {                                                                                     \
        *(void **)&c->f.field = dlsym(c->f.lib, name);                                       \
        if (!c->f.field) {                                                                   \
            nccl_destroy(&c->base);                                                          \
            return tern_fail(TERN_ERR_UNSUPPORTED, "nccl: libnccl.so.2 has no %s", name);    \
        }                                                                                    \
    } while (0)
    SYM(init_all, "ncclCommInitAll");
    SYM(destroy, "ncclCommDestroy");
    SYM(allreduce, "ncclAllReduce");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
    SYM(errstr, "ncclGetErrorString");
#undef SYM
    c->comms = calloc((size_t)n_ranks, sizeof *c->comms);
    c->streams = calloc((size_t)n_ranks, sizeof *c->streams);
    if (!c->comms || !c->streams) {
        nccl_destroy(&c->base);
        return tern_fail(TERN_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_ranks; i++) c->streams[i] = streams ? (cudaStream_t)streams[i] : NULL;
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* no NVLink multicast (device notes) */
    ncclResult_t r = c->f.init_all(c->comms, n_ranks, devices);
    if (r != ncclSuccess) {
        tern_status st = tern_fail(TERN_ERR_IO, "nccl: ncclCommInitAll over %d GPUs: %s", n_ranks,
                                   nerr(c, r));
        free(c->comms);
        c->comms = NULL;
        nccl_destroy(&c->base);
        return st;
    }
    *out = &c->base;
    return TERN_OK;
}

#else /* no NCCL in this build */

bool tern_comm_nccl_compiled(void) { return false; }

tern_status tern_comm_nccl_new(int n_ranks, const int *devices, void *const *streams,
                               tern_comm **out) {
    (void)n_ranks;
    (void)devices;
    (void)streams;
    *out = NULL;
    return tern_fail(TERN_ERR_UNSUPPORTED,
                     "this build has no NCCL communicator (configure with the CUDA toolkit's "
                     "nccl.h found)");
}

#endif
