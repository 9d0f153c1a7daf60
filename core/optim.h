/*
 * optim.h - AdamW with float32 moments, the learning-rate schedule, global
 * gradient-norm clipping, and the optimizer state file.
 *
 * The update is torch.optim.AdamW (non-fused) step for step, in float32:
 *   p -= lr * wd * p                       (decoupled decay, before the moments)
 *   m  = m + (1 - b1) (g - m);  v = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Weight decay goes to every parameter by default, as verl does (its FSDP
 * workers build AdamW over model.parameters() with one weight_decay);
 * decay_matrices_only = 1 exempts 1-D tensors (norm weights, biases).
 * Clipping is torch.nn.utils.clip_grad_norm_: coef = min(1, max / (norm + 1e-6)).
 * A non-finite norm leaves parameters, moments and t untouched and returns
 * SKPO_ENUMERIC (verl skips such an update; the trainer stops instead).
 *
 * Schedule (SKPO.md 2, Q12): the lr of training step s (1-based) is
 * lr * min(1, s / warmup_steps), the same for every optimizer update of the
 * step. verl's LambdaLR starts its counter at 0 and so runs the first step at
 * lr 0; we start at 1 so no step is wasted.
 *
 * State file (safetensors, F32, little-endian): tensors "exp_avg.<name>",
 * "exp_avg_sq.<name>" for every parameter and, when the checkpoint's weights
 * are stored in a narrower dtype, "master.<name>" (the float32 weights, so a
 * resumed run continues bit for bit). __metadata__ holds "format" =
 * "skpo-adamw-1" and "t" (optimizer updates done, for bias correction).
 */
#ifndef SKPO_OPTIM_H
#define SKPO_OPTIM_H

#include "common.h"
#include "model.h"

#include <stdint.h>

#define SKPO_OPTIM_FORMAT "skpo-adamw-1"

typedef struct skpo_adamw_cfg {
    double lr;             // peak learning rate (1e-6)
    double beta1, beta2;   // 0.9, 0.999
    double eps;            // 1e-8
    double weight_decay;   // 0.1
    int decay_matrices_only;
    int warmup_steps;      // 10 training steps
    double max_grad_norm;  // 1.0; 0 = no clipping
} skpo_adamw_cfg;

typedef struct skpo_optim {
    skpo_adamw_cfg cfg;
    int n;                 // parameters
    char **names;          // (n) copies of the HF names
    size_t *numel;         // (n)
    float **m, **v;        // (n) of (numel[i]) first/second moments
    int64_t t;             // optimizer updates done
} skpo_optim;

// --- configuration / schedule ------------------------------------------------------

void skpo_adamw_cfg_default(skpo_adamw_cfg *c);
skpo_status skpo_adamw_cfg_check(const skpo_adamw_cfg *c, skpo_err *err);
// Learning rate of training step `step` (1-based).
double skpo_optim_lr(const skpo_adamw_cfg *c, int64_t step);

// --- lifetime ------------------------------------------------------------------------

// Zero moments shaped like params (whose names are copied).
skpo_optim *skpo_optim_new(const skpo_adamw_cfg *c, const skpo_param *params, int n);
void skpo_optim_free(skpo_optim *o);

// --- update ----------------------------------------------------------------------------

// sqrt(sum of grad^2) over all parameters, accumulated in double in a fixed
// order (so every rank of a data-parallel run gets the same bits).
double skpo_optim_grad_norm(const skpo_param *params, int n);
// Clip (when cfg.max_grad_norm > 0) and apply one AdamW update at learning
// rate lr. *grad_norm receives the norm before clipping. Parameters must be the
// ones given to skpo_optim_new, in the same order.
skpo_status skpo_optim_step(skpo_optim *o, skpo_param *params, int n, double lr, double *grad_norm, skpo_err *err);

// --- state file --------------------------------------------------------------------------

// Write the state to `path` atomically. save_master: also store the params'
// float32 data as "master.<name>".
skpo_status skpo_optim_save(const skpo_optim *o, const skpo_param *params, int save_master,
                            const char *path, skpo_err *err);
// Load moments and t into o (created by skpo_optim_new for the same params).
// Every parameter must be present with its size. When the file holds master
// weights and each one rounds (to `dtype`) to the value now in params, the
// masters replace params' data and *used_master = 1; if any differs (the
// weights were edited since), params are left alone and *used_master = 0.
skpo_status skpo_optim_load(skpo_optim *o, skpo_param *params, skpo_dtype dtype, const char *path,
                            int *used_master, skpo_err *err);

#endif
