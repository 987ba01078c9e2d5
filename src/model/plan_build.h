/*
 * plan_build.h - building a step plan (plan.c), for the architectures' plan rules
 * (plan_rules.c): ops are appended in execution order and every buffer an op names
 * is noted with the width it needs there (the plan's buffer table is the maximum).
 */
#ifndef TERN_MODEL_PLAN_BUILD_H
#define TERN_MODEL_PLAN_BUILD_H

#include "model/model.h"

typedef struct tm_plan_b {
    const tern_model *m;
    tm_plan_op *ops;
    int n, cap;
    bool oom;
    int32_t width[TM_BUF_COUNT];
    int layer_ops[2];      /* ops of the last attention / GDN layer */
    int act_override;      /* >= 0: every FFN's activation (tests); -1: the rules' */
} tm_plan_b;

/* A new op of kind k for layer il (-1: none), zeroed, every buffer TM_BUF_NONE, no
 * matrix; NULL when out of memory (b->oom set; the build then fails). */
tm_plan_op *tm_plan_emit(tm_plan_b *b, tm_op_kind k, int il);
/* buffer `buf` holds rows of at least `width` floats */
void tm_plan_use(tm_plan_b *b, int buf, int width);
/* the per-layer ops of m's architecture (plan_rules.c) */
tern_status tm_plan_rules_layers(tm_plan_b *b);

#endif
