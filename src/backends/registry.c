/*
 * registry.c - the back-ends this library knows, by name: which are compiled
 * in, which are present on this machine, and how to make an instance ("cpu",
 * "cuda", "cuda:N"; tensor parallel over N of them when asked). `tern --version` and
 * `--device` list them from here. Adding a back-end: its folder and one line here.
 */
#include "backends/backends.h"

#include <stdlib.h>

static bool cpu_present(const char **what) {
    tern_kernels_init();
    if (what) *what = tern_isa_name(tern_kernels_isa());
    return true;
}

static const tm_backend_entry g_entries[] = {
    {.name = "cpu", .compiled = true, .present = cpu_present, .create = tm_backend_cpu_create},
#if defined(TERN_HAVE_CUDA)
    {.name = "cuda", .compiled = true, .present = tm_backend_cuda_present,
     .create = tm_backend_cuda_create},
#else
    {.name = "cuda", .compiled = false, .present = tm_backend_cuda_present,
     .create = tm_backend_cuda_create},
#endif
};

const tm_backend_entry *tm_backends(int *n) {
    *n = (int)(sizeof g_entries / sizeof g_entries[0]);
    return g_entries;
}

tern_status tm_backend_create(const char *spec, const tm_backend_params *p, tm_backend **out) {
    *out = NULL;
    if (!spec || !*spec) spec = "cpu";
    tm_backend_params q = {0};
    if (p) q = *p;
    if (q.tp != 0 && q.tp != 1) { /* tensor parallel over q.tp instances of `spec` (tp/) */
        int n = q.tp;
        q.tp = 0;
        return tm_backend_tp_create(spec, n, &q, out);
    }
    size_t len = strcspn(spec, ":");
    if (spec[len] == ':') {
        char *end = NULL;
        long idx = strtol(spec + len + 1, &end, 10);
        if (!spec[len + 1] || *end || idx < 0 || idx > 1024)
            return tern_fail(TERN_ERR_INVALID_ARG, "device '%s': expected NAME or NAME:INDEX", spec);
        q.device_index = (int)idx;
    }
    int n;
    const tm_backend_entry *e = tm_backends(&n);
    for (int i = 0; i < n; i++) {
        if (strlen(e[i].name) != len || strncmp(e[i].name, spec, len)) continue;
        if (!e[i].compiled)
            return tern_fail(TERN_ERR_UNSUPPORTED,
                             "device '%s': this build has no %s back-end (configure with nvcc "
                             "available, or -DTERN_CUDA=ON)", spec, e[i].name);
        return e[i].create(&q, out);
    }
    char names[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, e[i].name, sizeof names - strlen(names) - 1);
    }
    return tern_fail(TERN_ERR_INVALID_ARG, "unknown device '%s' (%s)", spec, names);
}

int tern_backend_count(void) {
    int n;
    (void)tm_backends(&n);
    return n;
}

tern_status tern_backend_describe(int i, const char **name, bool *compiled, bool *present,
                                  const char **what) {
    int n;
    const tm_backend_entry *e = tm_backends(&n);
    if (i < 0 || i >= n) return tern_fail(TERN_ERR_RANGE, "back-end %d of %d", i, n);
    const char *w = "";
    bool pr = e[i].compiled && e[i].present(&w);
    if (!e[i].compiled) w = "not compiled in";
    if (name) *name = e[i].name;
    if (compiled) *compiled = e[i].compiled;
    if (present) *present = pr;
    if (what) *what = w;
    return TERN_OK;
}
