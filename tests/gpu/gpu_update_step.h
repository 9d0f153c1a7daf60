/*
 * gpu_update_step.h - the optimizer step of bench_update.c: the device AdamW
 * (optim.h's device path: moments next to the model's fp32 master weights and
 * gradients, grad-norm clipping, fused kernel that also rewrites the bf16
 * weights) over a one-rank local communicator.
 */
#ifndef SKPO_GPU_UPDATE_STEP_H
#define SKPO_GPU_UPDATE_STEP_H

#include "train/comm.h"
#include "model/model.h"
#include "train/optim.h"

typedef struct bench_opt {
    skpo_optim *o;
    skpo_comm *comm;
    skpo_param *params;
    int n;
} bench_opt;

static inline int bench_opt_new(skpo_model *m, bench_opt *b, const char **what, skpo_err *err) {
    memset(b, 0, sizeof *b);
    *what = "device AdamW";
    skpo_adamw_cfg cfg;
    skpo_adamw_cfg_default(&cfg);
    b->n = skpo_model_params(m, &b->params);
    skpo_dev_params d;
    if (skpo_model_dev_params(m, &d, err) != SKPO_OK) return 0;
    if (skpo_comm_init(SKPO_COMM_LOCAL, &b->comm, err) != SKPO_OK) return 0;
    b->o = skpo_optim_new(&cfg, b->params, b->n);
    return skpo_optim_to_device(b->o, b->params, b->n, &d, b->comm, 0, err) == SKPO_OK;
}
static inline int bench_opt_step(skpo_model *m, bench_opt *b, skpo_err *err) {
    double gn;
    return skpo_optim_step(b->o, b->params, b->n, 1e-6, &gn, err) == SKPO_OK;
}
static inline void bench_opt_free(bench_opt *b) {
    if (b->o) skpo_optim_free(b->o);
    if (b->comm) skpo_comm_free(b->comm);
}

#endif
