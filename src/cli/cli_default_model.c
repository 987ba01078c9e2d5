/*
 * cli_default_model.c - where the model comes from when -m is absent.
 * Order: $TERN_MODEL; the embedded default model (models/tern-default.gguf next
 * to the source tree the binary was built from, or installed share path); the
 * qwen35 fixture (../shared/fixtures/qwen35-tiny/model-pq2_0.gguf) until the
 * embedded model exists.
 */
#include "cli/cli.h"

#include <stdlib.h>
#include <sys/stat.h>

#ifndef TERN_SOURCE_DIR_STR
#define TERN_SOURCE_DIR_STR "."
#endif

static bool exists(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *cli_default_model(void) {
    static char buf[4096];
    const char *env = getenv("TERN_MODEL");
    if (env && *env) return env;
    snprintf(buf, sizeof buf, "%s/models/tern-default.gguf", TERN_SOURCE_DIR_STR);
    if (exists(buf)) return buf;
    snprintf(buf, sizeof buf, "%s/../shared/fixtures/qwen35-tiny/model-pq2_0.gguf", TERN_SOURCE_DIR_STR);
    if (exists(buf)) return buf;
    return NULL;
}
