/*
 * tc_core.cu - the device context (tc_ctx_new / tc_ctx_free), memory, copies, the
 * sticky error, the workspaces, decode-step graphs, the device read ceiling, the
 * launch count and the profile.
 */
#include "kernels/cuda/internal.cuh"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

thread_local tc_ctx *tc_cur;

extern "C" void tc_set_pdl(tc_ctx *cx, int on) { cx->pdl = on != 0; }

/* The matmul chooser's model parameters. */
extern "C" void tc_mm_set_caps(tc_ctx *cx, int gemm_mode, int force) {
    cx->mm.gemm_mode = gemm_mode == TC_GEMM_INT8 ? TC_GEMM_INT8 : TC_GEMM_EXACT;
    cx->mm.force = force > TC_MM_NONE && force < TC_MM_N ? force : TC_MM_NONE;
}

extern "C" void tc_mm_set_invariant(tc_ctx *cx, int on) { cx->mm.invariant = on != 0; }

void tc_note(int err) {
    if (err && !tc_cur->err) tc_cur->err = err;
}

extern "C" int tc_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int tc_device_describe(int device, char *buf, size_t n) {
    cudaDeviceProp p;
    int e = (int)cudaGetDeviceProperties(&p, device);
    if (e) {
        cudaGetLastError();
        if (n) snprintf(buf, n, "CUDA device %d (not usable)", device);
        return e;
    }
    if (n)
        snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                 p.totalGlobalMem / 1073741824.0);
    return p.major < 9 ? TC_ERR_OLD_GPU : 0;
}

extern "C" int tc_ctx_new(int device, tc_ctx **out) {
    *out = NULL;
    int n = tc_device_count();
    if (device < 0 || device >= n) return (int)cudaErrorInvalidDevice;
    tc_ctx *c = (tc_ctx *)calloc(1, sizeof *c);
    if (!c) return (int)cudaErrorMemoryAllocation;
    c->device = device;
    c->pdl = 1;
    c->mm.gemm_mode = TC_GEMM_EXACT;
    c->gdn_path = 1;
    int e = tc_device_describe(device, c->name, sizeof c->name);
    if (!e) e = (int)cudaSetDevice(device);
    if (!e) e = (int)cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, device);
    if (!e) e = (int)cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e) {
        if (e != TC_ERR_OLD_GPU) cudaGetLastError();
        free(c);
        return e;
    }
    *out = c;
    return 0;
}

extern "C" void tc_ctx_free(tc_ctx *cx) {
    if (!cx) return;
    TC_CTX(cx);
    cudaStreamSynchronize(cx->stream);
    for (int i = 0; i < 4; i++)
        if (cx->ws[i]) cudaFree(cx->ws[i]);
    if (cx->pin_ids) cudaFreeHost(cx->pin_ids);
    if (cx->step_dev) cudaFree(cx->step_dev);
    if (cx->step_pin) cudaFreeHost(cx->step_pin);
    if (cx->rows_dev) cudaFree(cx->rows_dev);
    if (cx->rows_pin) cudaFreeHost(cx->rows_pin);
    if (cx->gdn_cnt) cudaFree(cx->gdn_cnt);
    if (cx->gemm_part) cudaFree(cx->gemm_part);
    if (cx->gemm_cnt) cudaFree(cx->gemm_cnt);
    for (int i = 0; i < cx->pmade; i++) {
        cudaEventDestroy(cx->pev[i][0]);
        cudaEventDestroy(cx->pev[i][1]);
    }
    cudaStreamDestroy(cx->stream);
    cudaGetLastError();
    free(cx);
}

extern "C" const char *tc_device_name(tc_ctx *cx) { return cx->name; }

extern "C" int tc_ctx_reserve(tc_ctx *cx, int slot, size_t bytes) {
    if (slot < 0 || slot > 3) return TC_ERR_UNSUPPORTED;
    TC_CTX(cx);
    if (tc_workspace(slot, bytes)) return 0;
    const int e = cx->err ? cx->err : (int)cudaErrorMemoryAllocation;
    cx->err = 0;
    return e;
}
extern "C" int tc_ctx_reserve_ids(tc_ctx *cx, size_t n) {
    TC_CTX(cx);
    if (tc_pinned_ids(n)) return 0;
    const int e = cx->err ? cx->err : (int)cudaErrorMemoryAllocation;
    cx->err = 0;
    return e;
}
extern "C" int tc_device(tc_ctx *cx) { return cx->device; }

extern "C" const char *tc_error_string(int err) {
    if (err == TC_ERR_UNSUPPORTED) return "a shape the CUDA kernels do not support";
    if (err == TC_ERR_OLD_GPU)
        return "the GPU is older than sm_90: tern's CUDA kernels need a Hopper-class GPU (sm_90 or "
               "newer); use --device cpu";
    return cudaGetErrorString((cudaError_t)err);
}

extern "C" void *tc_malloc(tc_ctx *cx, size_t n) {
    TC_CTX(cx);
    void *p = NULL;
    size_t m = n + 64; /* kernels may read up to 16 bytes past the last row */
    if (cudaMalloc(&p, m) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (cudaMemsetAsync(p, 0, m, tc_cur->stream) != cudaSuccess ||
        cudaStreamSynchronize(tc_cur->stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    __atomic_add_fetch(&cx->bytes, m, __ATOMIC_RELAXED);
    return p;
}

extern "C" void tc_free(tc_ctx *cx, void *p, size_t n) {
    if (!p) return;
    TC_CTX(cx);
    cudaStreamSynchronize(tc_cur->stream);
    cudaFree(p);
    __atomic_sub_fetch(&cx->bytes, n + 64, __ATOMIC_RELAXED);
}

extern "C" size_t tc_mem_free(tc_ctx *cx) {
    TC_CTX(cx);
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fr;
}

extern "C" size_t tc_bytes_in_use(tc_ctx *cx) { return __atomic_load_n(&cx->bytes, __ATOMIC_RELAXED); }

extern "C" int tc_upload(tc_ctx *cx, void *dst, const void *src_host, size_t n) {
    if (!n) return 0;
    TC_CTX(cx);
    int e = (int)cudaMemcpyAsync(dst, src_host, n, cudaMemcpyHostToDevice, tc_cur->stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_cur->stream);
    tc_note(e);
    return e;
}

extern "C" int tc_download(tc_ctx *cx, void *dst_host, const void *src, size_t n) {
    if (!n) return 0;
    TC_CTX(cx);
    int e = (int)cudaMemcpyAsync(dst_host, src, n, cudaMemcpyDeviceToHost, tc_cur->stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_cur->stream);
    tc_note(e);
    return e;
}

extern "C" int tc_download_rows(tc_ctx *cx, float *const *dst_host, const float *src, size_t row_floats, int n) {
    if (n <= 0 || !row_floats) return 0;
    TC_CTX(cx);
    int e = 0;
    for (int i = 0; i < n && !e; i++)
        e = (int)cudaMemcpyAsync(dst_host[i], src + (size_t)i * row_floats, row_floats * sizeof(float),
                                 cudaMemcpyDeviceToHost, tc_cur->stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_cur->stream);
    tc_note(e);
    return e;
}

extern "C" int tc_host_pin(tc_ctx *cx, void *p, size_t n) {
    TC_CTX(cx);
    int e = (int)cudaHostRegister(p, n, cudaHostRegisterDefault);
    if (e) (void)cudaGetLastError(); /* not fatal: the memory stays pageable */
    return e;
}

extern "C" void tc_host_unpin(tc_ctx *cx, void *p) {
    TC_CTX(cx);
    if (cudaHostUnregister(p)) (void)cudaGetLastError();
}

extern "C" int tc_zero(tc_ctx *cx, void *p, size_t n) {
    if (!n) return 0;
    TC_CTX(cx);
    int e = (int)cudaMemsetAsync(p, 0, n, tc_cur->stream);
    tc_note(e);
    return e;
}

extern "C" int tc_copy(tc_ctx *cx, void *dst, const void *src, size_t n) {
    if (!n) return 0;
    TC_CTX(cx);
    int e = (int)cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, tc_cur->stream);
    tc_note(e);
    return e;
}

extern "C" int tc_sync(tc_ctx *cx) {
    TC_CTX(cx);
    int e = (int)cudaStreamSynchronize(cx->stream);
    tc_note(e);
    e = cx->err;
    cx->err = 0;
    return e;
}

void *tc_workspace(int slot, size_t n) {
    tc_ctx *c = tc_cur;
    if (n <= c->ws_n[slot]) return c->ws[slot];
    size_t m = n + n / 4 + 4096;
    cudaStreamSynchronize(tc_cur->stream);
    if (c->ws[slot]) cudaFree(c->ws[slot]);
    c->ws[slot] = NULL;
    c->ws_n[slot] = 0;
    void *p = NULL;
    int e = (int)cudaMalloc(&p, m);
    if (e) {
        cudaGetLastError();
        tc_note(e);
        return NULL;
    }
    c->ws[slot] = p;
    c->ws_n[slot] = m;
    c->ws_gen++;
    return p;
}

/* A buffer that recorded graphs read moved (e.g. a back-end's activation buffer grew):
 * every recorded graph is stale and is recorded again at its next replay. */
extern "C" void tc_graphs_invalidate(tc_ctx *cx) { cx->ws_gen++; }

int32_t *tc_pinned_ids(size_t n) {
    tc_ctx *c = tc_cur;
    if (n <= c->pin_ids_n) return c->pin_ids;
    cudaStreamSynchronize(tc_cur->stream); /* the old buffer may still be read by a copy */
    if (c->pin_ids) cudaFreeHost(c->pin_ids);
    c->pin_ids = NULL;
    c->pin_ids_n = 0;
    size_t m = n < 4096 ? 4096 : n;
    int e = (int)cudaHostAlloc((void **)&c->pin_ids, m * sizeof(int32_t), cudaHostAllocDefault);
    if (e) {
        cudaGetLastError();
        tc_note(e);
        c->pin_ids = NULL;
        return NULL;
    }
    c->pin_ids_n = m;
    return c->pin_ids;
}

/* ------------------------------------------------------ decode-step graphs */

struct tc_graph {
    tc_ctx *cx;
    cudaGraphExec_t exec;
    unsigned ws_gen;
    float *logits_pin;  /* [n_vocab] pinned (a verify graph: rows x its vocabulary) */
    size_t n_vocab;
    int rows;           /* 0: a decode-step graph; R: a verify graph (tc_graph_begin_rows) */
};

extern "C" void tc_graph_free(tc_graph *g) {
    if (!g) return;
    TC_CTX(g->cx);
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->logits_pin) cudaFreeHost(g->logits_pin);
    free(g);
}

extern "C" int tc_graph_begin(tc_ctx *cx, int pos0, int32_t token, size_t n_vocab, tc_graph **out) {
    *out = NULL;
    TC_CTX(cx);
    int e = 0;
    if (!cx->step_dev) {
        if ((e = (int)cudaMalloc((void **)&cx->step_dev, 2 * sizeof(int)))) return e;
        if ((e = (int)cudaHostAlloc((void **)&cx->step_pin, 2 * sizeof(int), cudaHostAllocDefault))) {
            cudaFree(cx->step_dev);
            cx->step_dev = NULL;
            return e;
        }
    }
    if ((e = tc_sync(cx))) return e; /* the pinned step words are free; no error pending */
    tc_graph *g = (tc_graph *)calloc(1, sizeof *g);
    if (!g) return (int)cudaErrorMemoryAllocation;
    g->n_vocab = n_vocab;
    g->cx = cx;
    if ((e = (int)cudaHostAlloc((void **)&g->logits_pin, n_vocab * sizeof(float),
                                cudaHostAllocDefault))) {
        free(g);
        return e;
    }
    cx->step_pin[0] = pos0;
    cx->step_pin[1] = token;
    g->ws_gen = cx->ws_gen;
    if ((e = (int)cudaStreamBeginCapture(tc_cur->stream, cudaStreamCaptureModeThreadLocal))) {
        tc_graph_free(g);
        return e;
    }
    cudaMemcpyAsync(cx->step_dev, cx->step_pin, 2 * sizeof(int), cudaMemcpyHostToDevice, cx->stream);
    tc_check_launch();
    cx->dyn_pos = cx->step_dev;
    cx->dyn_ids = cx->step_dev + 1;
    cx->dyn_n = 1;
    *out = g;
    return 0;
}

/* A verify graph: R rows of one sequence at positions pos0.., the step words [0, R) the
 * positions and [R, 2R) the tokens, copied from pinned memory by the graph's first node;
 * the per-row kernels read the position word of their row (tc_graph_row), embed the R
 * token words; the last node copies R logits rows home. */
extern "C" int tc_graph_begin_rows(tc_ctx *cx, int pos0, const int32_t *tokens, int rows, size_t n_vocab,
                                   tc_graph **out) {
    *out = NULL;
    TC_CTX(cx);
    if (rows < 1 || rows > TC_GRAPH_ROWS) return TC_ERR_UNSUPPORTED;
    int e = 0;
    if (!cx->rows_dev) {
        if ((e = (int)cudaMalloc((void **)&cx->rows_dev, 2 * TC_GRAPH_ROWS * sizeof(int)))) return e;
        if ((e = (int)cudaHostAlloc((void **)&cx->rows_pin, 2 * TC_GRAPH_ROWS * sizeof(int), cudaHostAllocDefault))) {
            cudaFree(cx->rows_dev);
            cx->rows_dev = NULL;
            return e;
        }
    }
    if ((e = tc_sync(cx))) return e;
    tc_graph *g = (tc_graph *)calloc(1, sizeof *g);
    if (!g) return (int)cudaErrorMemoryAllocation;
    g->n_vocab = (size_t)rows * n_vocab;
    g->rows = rows;
    g->cx = cx;
    if ((e = (int)cudaHostAlloc((void **)&g->logits_pin, g->n_vocab * sizeof(float), cudaHostAllocDefault))) {
        free(g);
        return e;
    }
    for (int r = 0; r < rows; r++) {
        cx->rows_pin[r] = pos0 + r;
        cx->rows_pin[rows + r] = tokens[r];
    }
    g->ws_gen = cx->ws_gen;
    if ((e = (int)cudaStreamBeginCapture(tc_cur->stream, cudaStreamCaptureModeThreadLocal))) {
        tc_graph_free(g);
        return e;
    }
    cudaMemcpyAsync(cx->rows_dev, cx->rows_pin, 2 * (size_t)rows * sizeof(int), cudaMemcpyHostToDevice, cx->stream);
    tc_check_launch();
    cx->dyn_pos = cx->rows_dev;
    cx->dyn_ids = cx->rows_dev + rows;
    cx->dyn_n = rows;
    *out = g;
    return 0;
}

extern "C" void tc_graph_row(tc_ctx *cx, int r) {
    if (cx->dyn_pos && cx->dyn_n > 1 && r >= 0 && r < cx->dyn_n) cx->dyn_pos = cx->rows_dev + r;
}

extern "C" int tc_graph_run_rows(tc_ctx *cx, tc_graph *g, int pos0, const int32_t *tokens, float *logits_host,
                                 int *ran) {
    *ran = 0;
    TC_CTX(cx);
    if (g->ws_gen != cx->ws_gen || !g->rows) return 0;
    int e = tc_sync(cx);
    if (e) return e;
    for (int r = 0; r < g->rows; r++) {
        cx->rows_pin[r] = pos0 + r;
        cx->rows_pin[g->rows + r] = tokens[r];
    }
    e = (int)cudaGraphLaunch(g->exec, tc_cur->stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_cur->stream);
    if (e) {
        cudaGetLastError();
        return e;
    }
    if (logits_host) memcpy(logits_host, g->logits_pin, g->n_vocab * sizeof(float));
    *ran = 1;
    return 0;
}

extern "C" const float *tc_graph_logits(const tc_graph *g) { return g ? g->logits_pin : NULL; }

extern "C" int tc_graph_end(tc_ctx *cx, tc_graph *g, const float *dlogits) {
    TC_CTX(cx);
    cudaMemcpyAsync(g->logits_pin, dlogits, g->n_vocab * sizeof(float), cudaMemcpyDeviceToHost,
                    tc_cur->stream);
    tc_check_launch();
    cx->dyn_pos = NULL;
    cx->dyn_ids = NULL;
    cx->dyn_n = 0;
    cudaGraph_t graph = NULL;
    int e = (int)cudaStreamEndCapture(tc_cur->stream, &graph);
    int queued = cx->err; /* an error while queueing (e.g. a shape not supported) */
    cx->err = 0;
    if (!e && queued) e = queued;
    if (!e && g->ws_gen != cx->ws_gen) e = TC_ERR_UNSUPPORTED; /* a workspace moved while capturing */
    if (!e) e = (int)cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e) {
        cudaGetLastError();
        tc_graph_free(g);
    }
    return e;
}

extern "C" int tc_graph_run(tc_ctx *cx, tc_graph *g, int pos0, int32_t token, float *logits_host, int *ran) {
    *ran = 0;
    TC_CTX(cx);
    if (g->ws_gen != cx->ws_gen) return 0;
    int e = tc_sync(cx); /* nothing may still read the step words */
    if (e) return e;
    cx->step_pin[0] = pos0;
    cx->step_pin[1] = token;
    e = (int)cudaGraphLaunch(g->exec, tc_cur->stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_cur->stream);
    if (e) {
        cudaGetLastError();
        return e;
    }
    memcpy(logits_host, g->logits_pin, g->n_vocab * sizeof(float));
    *ran = 1;
    return 0;
}

/* ------------------------------------------------------------ read ceiling */

__global__ void k_read(const uint4 *p, size_t n16, uint32_t *sink) {
    uint32_t acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
              d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
        uint4 a = __ldcs(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc; /* practically never: keeps the loads */
}

__global__ void k_fill(uint32_t *p, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = (uint32_t)(i * 2654435761u);
}

extern "C" double tc_read_ceiling_gbps(tc_ctx *cx, size_t bytes, int passes) {
    TC_CTX(cx);
    bytes &= ~(size_t)15;
    if (bytes < (1u << 20)) bytes = 1u << 20;
    void *buf = NULL;
    uint32_t *sink = NULL;
    if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc((void **)&sink, 4) != cudaSuccess) {
        cudaGetLastError();
        if (buf) cudaFree(buf);
        return 0;
    }
    const int sms = tc_sm_count();
    k_fill<<<sms * 8, 256, 0, tc_cur->stream>>>((uint32_t *)buf, bytes / 4);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 0;
    for (int r = 0; r < passes + 1; r++) {
        cudaEventRecord(e0, tc_cur->stream);
        k_read<<<sms * 4, 512, 0, tc_cur->stream>>>((const uint4 *)buf, bytes / 16, sink);
        cudaEventRecord(e1, tc_cur->stream);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        double gbps = ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
        if (r > 0 && gbps > best) best = gbps; /* the first pass is a warm-up */
    }
    if (cudaGetLastError() != cudaSuccess) best = 0;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(buf);
    cudaFree(sink);
    return best;
}

/* ------------------------------------------------- profiling, launch count */

static const char *const g_fam_name[TC_FAM_N] = {"matmul", "actq",      "hadamard", "norm",
                                                  "swiglu", "attention", "gdn",      "rope",
                                                  "embed",  "movers",    "repack"};

extern "C" uint64_t tc_launches(tc_ctx *cx) { return cx->launches; }
extern "C" void tc_launches_reset(tc_ctx *cx) { cx->launches = 0; }

/* Fold the recorded pairs into the sums (syncs the stream). */
static int prof_fold(void) {
    tc_ctx *c = tc_cur;
    if (!c->pn) return 0;
    int e = (int)cudaStreamSynchronize(tc_cur->stream);
    for (int i = 0; i < c->pn && !e; i++) {
        float ms = 0;
        e = (int)cudaEventElapsedTime(&ms, c->pev[i][0], c->pev[i][1]);
        if (!e) c->pms[c->pfam[i]] += ms;
    }
    c->pn = 0;
    if (e) cudaGetLastError();
    return e;
}

int tc_prof_start(int fam) {
    tc_ctx *c = tc_cur;
    c->prof_depth++;
    if (c->prof_depth > 1 || c->dyn_pos) return -1;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(tc_cur->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
        return -1;
    if (c->pn == TC_PROF_SLOTS && prof_fold()) return -1;
    int i = c->pn;
    if (i == c->pmade) {
        if (cudaEventCreate(&c->pev[i][0]) != cudaSuccess) return cudaGetLastError(), -1;
        if (cudaEventCreate(&c->pev[i][1]) != cudaSuccess) {
            cudaEventDestroy(c->pev[i][0]);
            return cudaGetLastError(), -1;
        }
        c->pmade++;
    }
    if (cudaEventRecord(c->pev[i][0], tc_cur->stream) != cudaSuccess) return cudaGetLastError(), -1;
    c->pfam[i] = fam;
    c->pcalls[fam]++;
    c->pn++;
    return i;
}

void tc_prof_stop(int slot) {
    tc_ctx *c = tc_cur;
    c->prof_depth--;
    if (slot < 0) return;
    if (cudaEventRecord(c->pev[slot][1], tc_cur->stream) != cudaSuccess) {
        cudaGetLastError();
        c->pfam[slot] = TC_FAM_N - 1; /* keep the pair valid: record both on error */
        cudaEventRecord(c->pev[slot][1], tc_cur->stream);
    }
}

extern "C" void tc_profile_reset(tc_ctx *cx) {
    TC_CTX(cx);
    tc_ctx *c = cx;
    if (c->pn) cudaStreamSynchronize(tc_cur->stream);
    c->pn = 0;
    memset(c->pms, 0, sizeof c->pms);
    memset(c->pcalls, 0, sizeof c->pcalls);
}

extern "C" void tc_profile_enable(tc_ctx *cx, int on) {
    tc_profile_reset(cx);
    cx->prof_on = on ? 1 : 0;
}

extern "C" int tc_profile_enabled(tc_ctx *cx) { return cx->prof_on; }

extern "C" int tc_profile_report(tc_ctx *cx, tc_profile_entry *out, int max) {
    TC_CTX(cx);
    tc_ctx *c = cx;
    if (prof_fold()) return -1;
    int n = max < TC_FAM_N ? max : TC_FAM_N;
    for (int i = 0; i < n; i++) {
        out[i].family = g_fam_name[i];
        out[i].ms = c->pms[i];
        out[i].calls = c->pcalls[i];
    }
    return n;
}

extern "C" int tc_profile_text(tc_ctx *cx, char *buf, size_t n) {
    tc_profile_entry e[TC_FAM_N];
    if (tc_profile_report(cx, e, TC_FAM_N) < 0) return snprintf(buf, n, "profile: CUDA error\n");
    double tot = 0;
    uint64_t calls = 0;
    for (int i = 0; i < TC_FAM_N; i++) tot += e[i].ms, calls += e[i].calls;
    size_t len = 0;
    char line[160];
#define PUT(...)                                                                 \
    do {                                                                         \
        int l_ = snprintf(line, sizeof line, __VA_ARGS__);                       \
        if (buf && len + 1 < n) snprintf(buf + len, n - len, "%s", line);        \
        len += (size_t)(l_ > 0 ? l_ : 0);                                        \
    } while (0)
    PUT("%-10s %10s %12s %10s %6s\n", "family", "calls", "ms", "us/call", "share");
    for (int i = 0; i < TC_FAM_N; i++)
        if (e[i].calls)
            PUT("%-10s %10llu %12.3f %10.2f %5.1f%%\n", e[i].family, (unsigned long long)e[i].calls,
                e[i].ms, 1e3 * e[i].ms / (double)e[i].calls, tot > 0 ? 100 * e[i].ms / tot : 0.0);
    PUT("%-10s %10llu %12.3f\n", "total", (unsigned long long)calls, tot);
#undef PUT
    if (buf && n && len >= n) buf[n - 1] = 0;
    return (int)len;
}
