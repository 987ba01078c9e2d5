/*
 * fit.c - the start-up fit check of `tern serve` (srv_sched_new): every slot's session, the
 * prefix cache's snapshot budget against the back-end's free memory, refused with a message naming the sizes and what would fit.
 */
#include "server/server.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char g_new_err[512];

const char *srv_sched_error(void) { return g_new_err[0] ? g_new_err : tern_last_error(); }

tern_status srv_sched_fit(const tern_model *m, const tern_session *s0, int n_parallel, uint64_t snap,
                          uint64_t free0) {
    g_new_err[0] = 0;
    if (!m || !s0) return TERN_OK;
    const bool dev = strcmp(tern_model_get_info(m)->device, "cpu") != 0;
    const uint64_t per = tern_session_memory(s0);
    const uint64_t N = (uint64_t)n_parallel, need = N * per + snap;
    if (!free0 || need <= free0) return TERN_OK;
    const double MiB = 1048576.0;
    uint64_t fit = free0 > snap && per ? (free0 - snap) / per : 0;
    char fix[240];
    const bool slots_fit = N * per < free0; /* only the snapshot budget is too large */
    if (slots_fit)
        snprintf(fix, sizeof fix, "use --prefix-cache-mib %llu or less",
                 (unsigned long long)((free0 - N * per) / 1048576));
    else if (fit)
        snprintf(fix, sizeof fix, "use --parallel %llu, or a smaller --ctx or --cache-type q8_0%s", (unsigned long long)fit,
                 snap ? ", or a smaller --prefix-cache-mib" : "");
    else
        snprintf(fix, sizeof fix, "use a smaller --ctx or --cache-type q8_0%s", snap ? " and a smaller --prefix-cache-mib" : "");
    snprintf(g_new_err, sizeof g_new_err,
             "--parallel %d slots do not fit: %d sessions of %.1f MiB (context %d: KV cache, GDN states, scratch) "
             "+ %.0f MiB of prefix-cache snapshots (--prefix-cache-mib) = %.0f MiB, but %.0f MiB of %s memory are "
             "free; %s",
             n_parallel, n_parallel, per / MiB, tern_session_n_ctx(s0), snap / MiB, need / MiB, free0 / MiB,
             dev ? "device" : "host", fix);
    return TERN_ERR_NOMEM;
}
