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
 * Schedule (docs/algorithm.md 2, Q12): the lr of training step s (1-based) is
 * lr * min(1, s / warmup_steps), the same for every optimizer update of the
 * step. verl's LambdaLR starts its counter at 0 and so runs the first step at
 * lr 0; we start at 1 so no step is wasted.
 *
 * State file (safetensors, F32, little-endian): tensors "exp_avg.<name>",
 * "exp_avg_sq.<name>" for every parameter and, when the checkpoint's weights
 * are stored in a narrower dtype, "master.<name>" (the float32 weights, so a
 * resumed run continues bit for bit). __metadata__ holds "format" =
 * "skpo-adamw-1" and "t" (optimizer updates done, for bias correction).
 *
 * Device path (optim_dev.c, over the backend's device primitives, model.h
 * skpo_dev_ops: the CUDA backend's): skpo_optim_to_device() moves the
 * moments next to the model's float32 master weights and gradients on the GPU;
 * skpo_optim_step() then reduces the gradients across ranks itself, computes
 * the norm (a deterministic double sum of squares), clips, and runs the fused
 * AdamW kernel, which also rewrites the bf16 weights the forward reads. Same
 * schedule, same clipping rule, same refusal of a non-finite norm; the
 * arithmetic is the same formula in a different float32 order, so results
 * match the host path to rounding, not bit for bit.
 * ZeRO-1 (zero = 1, N ranks): the flat parameter buffer is cut into N equal
 * slices (plus a tail of < N elements every rank keeps); each rank holds the
 * moments of its slice only, gradients are reduce-scattered, each rank steps
 * its slice of the (replicated) master weights, and the updated slices are
 * all-gathered (float32, so every rank keeps bit-identical masters).
 * zero = 0: one all-reduce of the whole gradient, every rank steps everything.
 * The state file is the same: skpo_optim_from_device() gathers the moments
 * into the host arrays (on rank 0) before skpo_optim_save, and a state loaded
 * on the host is uploaded by skpo_optim_to_device, so a run resumes on either
 * device.
 */
#ifndef SKPO_OPTIM_H
#define SKPO_OPTIM_H

#include "base/common.h"
#include "model/model.h"

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

struct skpo_optim_dev;
struct skpo_comm;
struct skpo_cuda;

typedef struct skpo_optim {
    skpo_adamw_cfg cfg;
    int n;                 // parameters
    char **names;          // (n) copies of the HF names
    size_t *numel;         // (n)
    float **m, **v;        // (n) of (numel[i]) first/second moments: views of mflat / vflat
    float *mflat, *vflat;  // all moments, parameter after parameter (NULL on a device rank > 0)
    int64_t t;             // optimizer updates done
    struct skpo_optim_dev *dev;   // non-NULL after skpo_optim_to_device
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
// --- device path -------------------------------------------------------------------

// skpo_dev_params (the model's flat device buffers) is in model/model.h.

// Move the optimizer to the device: moments (those in o->m / o->v now, zero
// or loaded) are uploaded, this rank's slice only when zero = 1. comm must be
// the NCCL communicator when it has more than one rank. From now on
// skpo_optim_step works on d (its params argument is only counted), and only
// rank 0 keeps host moments (o->m / o->v are NULL on the others).
// SKPO_EUNSUPPORTED when d has no device primitives (d->ops: a backend without
// a device optimizer). params: those of skpo_optim_new (their ndim decides weight decay).
skpo_status skpo_optim_to_device(skpo_optim *o, const skpo_param *params, int n, const skpo_dev_params *d,
                                 struct skpo_comm *comm, int zero, skpo_err *err);
// Collective (every rank calls it): copy the device moments into o->m / o->v
// on rank 0 (the rank that saves). A no-op on a host optimizer.
skpo_status skpo_optim_from_device(skpo_optim *o, skpo_err *err);

// The flat parameter space is the parameters in order (param i covers
// [sum of numel before it, + numel), as skpo_dev_params lays them out).
// Copy this rank's moments of flat [a, b) into new host buffers *m and *v
// (b - a floats each, owned by the caller): a host optimizer from its arrays,
// a device optimizer from the GPU, which must hold that range (ZeRO-1 rank r:
// [r S, r S + S) and, on the last rank, the tail up to the end; see
// skpo_optim_zero_range). Not a collective: each rank copies what it holds,
// so every rank can write its own shard of the state in parallel.
skpo_status skpo_optim_copy_range(const skpo_optim *o, size_t a, size_t b, float **m, float **v, skpo_err *err);
// The flat range rank r of n writes in a sharded state file: ZeRO-1's slice
// (S = total / n rounded down to a multiple of 4; the last rank also takes the
// remainder), which is exactly what a ZeRO-1 device optimizer holds there.
void skpo_optim_zero_range(size_t total, int r, int n, size_t *a, size_t *b);

// Host offload of a device optimizer between updates (verl's pattern): this
// rank's moments and the fp32 masters of the same elements (its ZeRO-1 slice
// and the tail; everything without ZeRO) move to host memory and the
// moments' device buffers are freed; then skpo_model_offload frees the
// model's masters and gradients. skpo_optim_reload (after skpo_model_reload,
// d = its new buffers) uploads the moments and this rank's masters and, under
// ZeRO-1, all-gathers the other ranks' masters (a collective). Bit-exact:
// nothing is recomputed. No-ops on a host optimizer.
// No second host copy: the masters go into the params' own host data (the
// model's float32 copy, when the params of skpo_optim_to_device are one
// contiguous array), the moments into o->mflat / o->vflat on the rank that
// keeps them (rank 0); only the others' moments (8 / N bytes per parameter)
// get buffers of their own. The first offload page-locks those ranges for fast
// copies, so free the optimizer before the model whose memory it locked.
// docs/scaling.md "Host memory" has the budget.
skpo_status skpo_optim_offload(skpo_optim *o, skpo_err *err);
skpo_status skpo_optim_reload(skpo_optim *o, const skpo_dev_params *d, skpo_err *err);
// Is the device optimizer offloaded?
int skpo_optim_offloaded(const skpo_optim *o);

// Load moments and t into o (created by skpo_optim_new for the same params).
// Every parameter must be present with its size. When the file holds master
// weights and each one rounds (to `dtype`) to the value now in params, the
// masters replace params' data and *used_master = 1; if any differs (the
// weights were edited since), params are left alone and *used_master = 0.
skpo_status skpo_optim_load(skpo_optim *o, skpo_param *params, skpo_dtype dtype, const char *path,
                            int *used_master, skpo_err *err);

#endif
