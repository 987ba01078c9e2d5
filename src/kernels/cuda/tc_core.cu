/*
 * tc_core.cu - device set-up, memory, copies, the sticky error, the workspace
 * and the device read ceiling.
 */
#include "kernels/cuda/internal.cuh"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaStream_t tc_stream;
static int g_err;
static bool g_init;
static char g_name[256];
static size_t g_bytes;
extern int tc_prof_on;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static void *g_ws[4];
static size_t g_ws_n[4];
static unsigned g_ws_gen;      /* bumped when a workspace moves: graphs are then stale */
static int32_t *g_pin_ids;     /* pinned staging for embed's ids */
static size_t g_pin_ids_n;
static int *g_step_dev;        /* [0] position, [1] token: filled by a graph's first node */
static int *g_step_pin;        /* the pinned host copy the node reads */
const int *tc_dyn_pos;
const int32_t *tc_dyn_ids;

static int g_pdl = 1; /* the model parameter cuda_pdl (tc_set_pdl) */
int tc_pdl_on(void) { return g_pdl; }
extern "C" void tc_set_pdl(int on) { g_pdl = on != 0; }

static int g_sms; /* streaming multiprocessors of the device (tc_init) */
int tc_sm_count(void) { return g_sms > 0 ? g_sms : 132; }

/* The matmul chooser's device caps and the model parameters it reads. */
static tc_mm_caps g_mm_caps = {0, TC_GEMM_EXACT, TC_MM_NONE};
extern "C" void tc_mm_set_caps(int gemm_mode, int force) {
    g_mm_caps.gemm_mode = gemm_mode == TC_GEMM_INT8 ? TC_GEMM_INT8 : TC_GEMM_EXACT;
    g_mm_caps.force = force > TC_MM_NONE && force < TC_MM_N ? force : TC_MM_NONE;
}
tc_mm_caps tc_mm_caps_now(void) {
    tc_mm_caps c = g_mm_caps;
    c.sms = tc_sm_count();
    return c;
}

void tc_note(int err) {
    if (err && !g_err) g_err = err;
}

extern "C" int tc_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int tc_init(void) {
    pthread_mutex_lock(&g_mu);
    int err = 0;
    if (!g_init) {
        err = (int)cudaSetDevice(0);
        if (!err) err = (int)cudaStreamCreateWithFlags(&tc_stream, cudaStreamNonBlocking);
        cudaDeviceProp p;
        if (!err && (err = (int)cudaGetDeviceProperties(&p, 0)) == 0) {
            snprintf(g_name, sizeof g_name, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major,
                     p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0);
            if (p.major < 9) { /* the kernels use Hopper instructions (PDL, bulk copies, clusters) */
                cudaStreamDestroy(tc_stream);
                tc_stream = NULL;
                pthread_mutex_unlock(&g_mu);
                return TC_ERR_OLD_GPU;
            }
            g_init = true;
            g_sms = p.multiProcessorCount;
        }
        if (err) cudaGetLastError();
    }
    pthread_mutex_unlock(&g_mu);
    return err;
}

extern "C" const char *tc_device_name(void) { return g_name; }

extern "C" const char *tc_error_string(int err) {
    if (err == TC_ERR_UNSUPPORTED) return "a shape the CUDA kernels do not support";
    if (err == TC_ERR_OLD_GPU) {
        static char m[400];
        snprintf(m, sizeof m, "%s is older than sm_90: tern's CUDA kernels need a Hopper-class GPU "
                 "(sm_90 or newer); use --device cpu", g_name[0] ? g_name : "GPU 0");
        return m;
    }
    return cudaGetErrorString((cudaError_t)err);
}

extern "C" void *tc_malloc(size_t n) {
    void *p = NULL;
    size_t m = n + 64; /* kernels may read up to 16 bytes past the last row */
    if (cudaMalloc(&p, m) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (cudaMemsetAsync(p, 0, m, tc_stream) != cudaSuccess ||
        cudaStreamSynchronize(tc_stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return NULL;
    }
    __atomic_add_fetch(&g_bytes, m, __ATOMIC_RELAXED);
    return p;
}

extern "C" void tc_free(void *p, size_t n) {
    if (!p) return;
    cudaStreamSynchronize(tc_stream);
    cudaFree(p);
    __atomic_sub_fetch(&g_bytes, n + 64, __ATOMIC_RELAXED);
}

extern "C" size_t tc_mem_free(void) {
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fr;
}

extern "C" size_t tc_bytes_in_use(void) { return __atomic_load_n(&g_bytes, __ATOMIC_RELAXED); }

extern "C" int tc_upload(void *dst, const void *src_host, size_t n) {
    if (!n) return 0;
    int e = (int)cudaMemcpyAsync(dst, src_host, n, cudaMemcpyHostToDevice, tc_stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_stream);
    tc_note(e);
    return e;
}

extern "C" int tc_download(void *dst_host, const void *src, size_t n) {
    if (!n) return 0;
    int e = (int)cudaMemcpyAsync(dst_host, src, n, cudaMemcpyDeviceToHost, tc_stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_stream);
    tc_note(e);
    return e;
}

extern "C" int tc_zero(void *p, size_t n) {
    if (!n) return 0;
    int e = (int)cudaMemsetAsync(p, 0, n, tc_stream);
    tc_note(e);
    return e;
}

extern "C" int tc_sync(void) {
    int e = (int)cudaStreamSynchronize(tc_stream);
    tc_note(e);
    e = g_err;
    g_err = 0;
    return e;
}

void *tc_workspace(int slot, size_t n) {
    if (n <= g_ws_n[slot]) return g_ws[slot];
    size_t m = n + n / 4 + 4096;
    cudaStreamSynchronize(tc_stream);
    if (g_ws[slot]) cudaFree(g_ws[slot]);
    g_ws[slot] = NULL;
    g_ws_n[slot] = 0;
    void *p = NULL;
    int e = (int)cudaMalloc(&p, m);
    if (e) {
        cudaGetLastError();
        tc_note(e);
        return NULL;
    }
    g_ws[slot] = p;
    g_ws_n[slot] = m;
    g_ws_gen++;
    return p;
}

/* A buffer that recorded graphs read moved (e.g. a back-end's activation buffer grew):
 * every recorded graph is stale and is recorded again at its next replay. */
extern "C" void tc_graphs_invalidate(void) { g_ws_gen++; }

int32_t *tc_pinned_ids(size_t n) {
    if (n <= g_pin_ids_n) return g_pin_ids;
    cudaStreamSynchronize(tc_stream); /* the old buffer may still be read by a copy */
    if (g_pin_ids) cudaFreeHost(g_pin_ids);
    g_pin_ids = NULL;
    g_pin_ids_n = 0;
    size_t m = n < 4096 ? 4096 : n;
    int e = (int)cudaHostAlloc((void **)&g_pin_ids, m * sizeof(int32_t), cudaHostAllocDefault);
    if (e) {
        cudaGetLastError();
        tc_note(e);
        g_pin_ids = NULL;
        return NULL;
    }
    g_pin_ids_n = m;
    return g_pin_ids;
}

/* ------------------------------------------------------ decode-step graphs */

struct tc_graph {
    cudaGraphExec_t exec;
    unsigned ws_gen;
    float *logits_pin;  /* [n_vocab] pinned */
    size_t n_vocab;
};

extern "C" void tc_graph_free(tc_graph *g) {
    if (!g) return;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->logits_pin) cudaFreeHost(g->logits_pin);
    free(g);
}

extern "C" int tc_graph_begin(int pos0, int32_t token, size_t n_vocab, tc_graph **out) {
    *out = NULL;
    int e = 0;
    if (!g_step_dev) {
        if ((e = (int)cudaMalloc((void **)&g_step_dev, 2 * sizeof(int)))) return e;
        if ((e = (int)cudaHostAlloc((void **)&g_step_pin, 2 * sizeof(int), cudaHostAllocDefault))) {
            cudaFree(g_step_dev);
            g_step_dev = NULL;
            return e;
        }
    }
    if ((e = tc_sync())) return e; /* the pinned step words are free; no error pending */
    tc_graph *g = (tc_graph *)calloc(1, sizeof *g);
    if (!g) return (int)cudaErrorMemoryAllocation;
    g->n_vocab = n_vocab;
    if ((e = (int)cudaHostAlloc((void **)&g->logits_pin, n_vocab * sizeof(float),
                                cudaHostAllocDefault))) {
        free(g);
        return e;
    }
    g_step_pin[0] = pos0;
    g_step_pin[1] = token;
    g->ws_gen = g_ws_gen;
    if ((e = (int)cudaStreamBeginCapture(tc_stream, cudaStreamCaptureModeThreadLocal))) {
        tc_graph_free(g);
        return e;
    }
    cudaMemcpyAsync(g_step_dev, g_step_pin, 2 * sizeof(int), cudaMemcpyHostToDevice, tc_stream);
    tc_check_launch();
    tc_dyn_pos = g_step_dev;
    tc_dyn_ids = g_step_dev + 1;
    *out = g;
    return 0;
}

extern "C" int tc_graph_end(tc_graph *g, const float *dlogits) {
    cudaMemcpyAsync(g->logits_pin, dlogits, g->n_vocab * sizeof(float), cudaMemcpyDeviceToHost,
                    tc_stream);
    tc_check_launch();
    tc_dyn_pos = NULL;
    tc_dyn_ids = NULL;
    cudaGraph_t graph = NULL;
    int e = (int)cudaStreamEndCapture(tc_stream, &graph);
    int queued = g_err; /* an error while queueing (e.g. a shape not supported) */
    g_err = 0;
    if (!e && queued) e = queued;
    if (!e && g->ws_gen != g_ws_gen) e = TC_ERR_UNSUPPORTED; /* a workspace moved while capturing */
    if (!e) e = (int)cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e) {
        cudaGetLastError();
        tc_graph_free(g);
    }
    return e;
}

extern "C" int tc_graph_run(tc_graph *g, int pos0, int32_t token, float *logits_host, int *ran) {
    *ran = 0;
    if (g->ws_gen != g_ws_gen) return 0;
    int e = tc_sync(); /* nothing may still read the step words */
    if (e) return e;
    g_step_pin[0] = pos0;
    g_step_pin[1] = token;
    e = (int)cudaGraphLaunch(g->exec, tc_stream);
    if (!e) e = (int)cudaStreamSynchronize(tc_stream);
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

extern "C" double tc_read_ceiling_gbps(size_t bytes, int passes) {
    if (tc_init()) return 0;
    bytes &= ~(size_t)15;
    if (bytes < (1u << 20)) bytes = 1u << 20;
    void *buf = NULL;
    uint32_t *sink = NULL;
    if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc((void **)&sink, 4) != cudaSuccess) {
        cudaGetLastError();
        if (buf) cudaFree(buf);
        return 0;
    }
    int sms = 132;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    k_fill<<<sms * 8, 256, 0, tc_stream>>>((uint32_t *)buf, bytes / 4);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 0;
    for (int r = 0; r < passes + 1; r++) {
        cudaEventRecord(e0, tc_stream);
        k_read<<<sms * 4, 512, 0, tc_stream>>>((const uint4 *)buf, bytes / 16, sink);
        cudaEventRecord(e1, tc_stream);
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

uint64_t tc_launch_count;
int tc_prof_on;
static int g_prof_depth;
static const char *const g_fam_name[TC_FAM_N] = {"matmul", "actq",      "hadamard", "norm",
                                                  "swiglu", "attention", "gdn",      "rope",
                                                  "embed",  "movers",    "repack"};
#define PROF_SLOTS 4096
static cudaEvent_t g_pev[PROF_SLOTS][2];
static int g_pfam[PROF_SLOTS];
static int g_pn;        /* pairs recorded and not yet folded */
static int g_pmade;     /* pairs created */
static double g_pms[TC_FAM_N];
static uint64_t g_pcalls[TC_FAM_N];

extern "C" uint64_t tc_launches(void) { return tc_launch_count; }
extern "C" void tc_launches_reset(void) { tc_launch_count = 0; }

/* Fold the recorded pairs into the sums (syncs the stream). */
static int prof_fold(void) {
    if (!g_pn) return 0;
    int e = (int)cudaStreamSynchronize(tc_stream);
    for (int i = 0; i < g_pn && !e; i++) {
        float ms = 0;
        e = (int)cudaEventElapsedTime(&ms, g_pev[i][0], g_pev[i][1]);
        if (!e) g_pms[g_pfam[i]] += ms;
    }
    g_pn = 0;
    if (e) cudaGetLastError();
    return e;
}

int tc_prof_start(int fam) {
    g_prof_depth++;
    if (g_prof_depth > 1 || tc_dyn_pos) return -1;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(tc_stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
        return -1;
    if (g_pn == PROF_SLOTS && prof_fold()) return -1;
    int i = g_pn;
    if (i == g_pmade) {
        if (cudaEventCreate(&g_pev[i][0]) != cudaSuccess) return cudaGetLastError(), -1;
        if (cudaEventCreate(&g_pev[i][1]) != cudaSuccess) {
            cudaEventDestroy(g_pev[i][0]);
            return cudaGetLastError(), -1;
        }
        g_pmade++;
    }
    if (cudaEventRecord(g_pev[i][0], tc_stream) != cudaSuccess) return cudaGetLastError(), -1;
    g_pfam[i] = fam;
    g_pcalls[fam]++;
    g_pn++;
    return i;
}

void tc_prof_stop(int slot) {
    g_prof_depth--;
    if (slot < 0) return;
    if (cudaEventRecord(g_pev[slot][1], tc_stream) != cudaSuccess) {
        cudaGetLastError();
        g_pfam[slot] = TC_FAM_N - 1; /* keep the pair valid: record both on error */
        cudaEventRecord(g_pev[slot][1], tc_stream);
    }
}

extern "C" void tc_profile_reset(void) {
    if (g_pn) cudaStreamSynchronize(tc_stream);
    g_pn = 0;
    memset(g_pms, 0, sizeof g_pms);
    memset(g_pcalls, 0, sizeof g_pcalls);
}

extern "C" void tc_profile_enable(int on) {
    tc_profile_reset();
    tc_prof_on = on ? 1 : 0;
}

extern "C" int tc_profile_enabled(void) { return tc_prof_on; }

extern "C" int tc_profile_report(tc_profile_entry *out, int max) {
    if (prof_fold()) return -1;
    int n = max < TC_FAM_N ? max : TC_FAM_N;
    for (int i = 0; i < n; i++) {
        out[i].family = g_fam_name[i];
        out[i].ms = g_pms[i];
        out[i].calls = g_pcalls[i];
    }
    return n;
}

extern "C" int tc_profile_text(char *buf, size_t n) {
    tc_profile_entry e[TC_FAM_N];
    if (tc_profile_report(e, TC_FAM_N) < 0) return snprintf(buf, n, "profile: CUDA error\n");
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
