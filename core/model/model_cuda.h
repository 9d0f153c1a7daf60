/*
 * model_cuda.h - private to model*.c: the device mirror of a skpo_model on
 * CUDA and inference over a paged KV cache whose pool lives on the GPU.
 *
 * Contract:
 *   - every parameter lives on the device in bf16 at the SAME element offset
 *     as in the host buffer m->mem, so a host parameter pointer p maps to
 *     model_cuda_w(m, p) = w + (p - m->mem) (NULL stays NULL);
 *   - a trainable model also keeps fp32 master weights and fp32 gradients on
 *     the device (same offsets); the training code (model_cuda_train.c) owns
 *     `train`, this file owns `infer`;
 *   - the host copy m->mem is only refreshed by model_cuda_sync_to_host (save
 *     and the CPU reference call it); after the host changes the weights
 *     (resume, tests) call model_cuda_sync_from_host.
 *   - kernels come from cuda.h and cuda_infer.h only; one stream per model.
 *
 * In a build without CUDA (no nvcc) the functions exist and fail with
 * SKPO_EUNSUPPORTED "this build has no CUDA (rebuild with nvcc on the PATH)".
 *
 * For the sampling engine (device-side sampling without the logits copy):
 * call skpo_model_step_dev() (model.h), or model_cuda_step() with logits ==
 * NULL followed by model_cuda_last_logits(): the float32 logits (nseq, vocab)
 * of the last step stay on the device, on the model's stream, valid until the
 * next step. Pass them to skpo_cuda_sample() with skpo_model_cuda_ctx(m)
 * (model.h; the same as model_cuda_ctx here).
 */
#ifndef SKPO_MODEL_CUDA_H
#define SKPO_MODEL_CUDA_H

#include "model/model_impl.h"

#include <stdint.h>

typedef uint16_t skpo_bf16;  // same typedef as cuda.h
typedef struct skpo_cuda skpo_cuda;

typedef struct model_cuda {
    skpo_cuda *cu;            // context on the chosen device (its stream is the model's stream)
    skpo_bf16 *w;             // every parameter in bf16, same element offsets as the host m->mem
    float *master, *grad;     // fp32 master weights and gradients (trainable only, else NULL), same offsets
    float *inv_freq;          // (head_dim / 2) RoPE frequencies, device copy
    void *train;              // owned by core/model/model_cuda_train.c: saved activations, scratch
    void (*train_free)(struct model_cuda *mc);  // set with `train`; model_cuda_close calls it first
    void *infer;              // owned by core/model/model_cuda.c: step scratch, staging buffers, last logits
} model_cuda;

// Device pointer of a host parameter pointer (NULL stays NULL).
static inline skpo_bf16 *model_cuda_w(const skpo_model *m, const float *p) {
    return p ? m->cuda->w + (p - m->mem) : NULL;
}
static inline float *model_cuda_master(const skpo_model *m, const float *p) {
    return p && m->cuda->master ? m->cuda->master + (p - m->mem) : NULL;
}
static inline float *model_cuda_grad(const skpo_model *m, const float *p) {
    return p && m->cuda->grad ? m->cuda->grad + (p - m->mem) : NULL;
}

// Fails (EUNSUPPORTED without CUDA in the build, EDEVICE without a visible
// device `device`) before anything is loaded; model_alloc calls it.
skpo_status model_cuda_probe(int device, skpo_err *err);
// Upload m->mem as bf16 (and as fp32 master + zeroed fp32 grad when
// m->o.trainable) to device `device` (0 = first visible one). Checks the
// bytes needed against the free device memory first. Sets m->cuda (and *out
// when out is non-NULL).
skpo_status model_cuda_open(skpo_model *m, int device, model_cuda **out, skpo_err *err);
// Frees everything on the device (train/infer parts included); m->cuda = NULL.
void model_cuda_close(skpo_model *m);
// Device -> m->mem: fp32 master when trainable, else the bf16 weights widened.
skpo_status model_cuda_sync_to_host(const skpo_model *m, skpo_err *err);
// m->mem -> device (bf16 weights, and the fp32 master when trainable).
skpo_status model_cuda_sync_from_host(skpo_model *m, skpo_err *err);
// The model's device context (kernels from cuda.h take it); NULL on CPU.
skpo_cuda *model_cuda_ctx(const skpo_model *m);

// A KV cache whose pool (bf16, kvcache.h layout) lives on the device. Bookkeeping
// stays on the host (kvcache.c); copy-on-write copies blocks on the device.
// Fails with SKPO_ENOMEM naming bytes needed and free.
skpo_kv *model_cuda_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err);

// skpo_model_step on the device, same contract; logits == NULL leaves them on
// the device only (see model_cuda_last_logits).
skpo_status model_cuda_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, float *logits, skpo_err *err);
// *dev_logits = device pointer to the float32 logits (nseq, vocab) of the last
// successful step (NULL before any or after a failed one); returns nseq (0
// then). Valid until the next step.
int model_cuda_last_logits(const skpo_model *m, const float **dev_logits);

#endif
