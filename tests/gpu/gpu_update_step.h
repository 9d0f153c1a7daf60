/*
 * gpu_update_step.h - the optimizer step of bench_update.c: the device AdamW
 * when the build has it, else none (the line then says "optimizer: none").
 */
#ifndef SKPO_GPU_UPDATE_STEP_H
#define SKPO_GPU_UPDATE_STEP_H

#include "model.h"
#include "optim.h"

typedef struct bench_opt { skpo_optim *o; } bench_opt;

static inline int bench_opt_new(skpo_model *m, bench_opt *b, const char **what, skpo_err *err) {
    b->o = NULL;
    *what = "none (no device optimizer in this build)";
    return 1;
}
static inline int bench_opt_step(skpo_model *m, bench_opt *b, skpo_err *err) { return 1; }
static inline void bench_opt_free(bench_opt *b) {
    if (b->o) skpo_optim_free(b->o);
}

#endif
