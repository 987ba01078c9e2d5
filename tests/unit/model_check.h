/*
 * model_check.h - fixture parity helpers shared by the CPU and CUDA model tests:
 * reference id arrays from the fixtures' JSON, and the greedy-continuation walk.
 * Include after check.h.
 */
#ifndef TERN_TEST_MODEL_CHECK_H
#define TERN_TEST_MODEL_CHECK_H

#include "tern.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>

/* A JSON array of integers as a malloc'd int32 array of *n ids. */
static inline int32_t *json_ids(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    int32_t *ids = malloc(*n * sizeof *ids + 4);
    size_t i = 0;
    for (const cJSON *e = arr->child; e; e = e->next) ids[i++] = (int32_t)e->valueint;
    return ids;
}

/* From the session's current logits, follow the greedy path while it equals
 * want[0..nc): returns how many steps agree (nc when the whole continuation does). */
static inline int check_greedy_steps(tern_session *s, const int32_t *want, size_t nc, int V) {
    int32_t tok = (int32_t)check_argmax(tern_session_logits(s), V);
    int same = 0;
    for (size_t i = 0; i < nc && tok == want[i]; i++) {
        same++;
        if (i + 1 < nc) {
            if (tern_session_eval(s, &tok, 1, NULL) != TERN_OK) break;
            tok = (int32_t)check_argmax(tern_session_logits(s), V);
        }
    }
    return same;
}

#endif
