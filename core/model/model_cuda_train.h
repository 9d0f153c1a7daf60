/*
 * model_cuda_train.h - scoring and training of a model that lives on a CUDA
 * device (model_cuda.h): the packed-sequence forward (bf16 activations, fp32
 * rstd / log-sum-exp saved), the backward of every op with fp32 gradients
 * accumulated into the device gradient buffer, and optional per-layer
 * activation recomputation. Same contract as skpo_model_logprobs /
 * skpo_model_train_forward / _backward / skpo_model_zero_grad (model.h), which
 * dispatch here when the model was loaded on cuda.
 *
 * Memory of one micro-batch of N tokens (bytes, bf16 = 2): saved per layer
 * 2 N (4C + 2QD + 2KVD + 2F) + 12 N (rstd x2, lse NH); with recompute only the
 * layer inputs 2 N C per layer plus one layer's worth. The lm_head runs on
 * the scored rows in chunks of at most 2^26 logits, so no (N, vocab) tensor.
 *
 * In builds without CUDA every function fails with SKPO_EUNSUPPORTED.
 */
#ifndef SKPO_MODEL_CUDA_TRAIN_H
#define SKPO_MODEL_CUDA_TRAIN_H

#include "model/model.h"

// --- public (tools, update, tests) ---------------------------------------------------

// Keep only each layer's input in the training forward and recompute the
// layer in backward (off by default). A CPU model ignores it.
void skpo_model_set_recompute(skpo_model *m, int on);
// The flat device buffers the device optimizer works on (model loaded on cuda
// with trainable = 1); SKPO_EUNSUPPORTED otherwise.
skpo_status skpo_model_dev_params(skpo_model *m, skpo_dev_params *out, skpo_err *err);
// Copy the device weights (fp32 masters when trainable) into the host
// parameters, so skpo_model_save / skpo_optim_save see them; after host-side
// changes (a loaded optimizer state's masters) skpo_model_sync_device pushes
// them back. Both are no-ops on a CPU model.
skpo_status skpo_model_sync_host(skpo_model *m, skpo_err *err);
skpo_status skpo_model_sync_device(skpo_model *m, skpo_err *err);
// Sum of squares (double) of the device gradient buffer.
skpo_status skpo_model_grad_sumsq(skpo_model *m, double *ss, skpo_err *err);

// --- private to model_train.c / model_cuda.c ---------------------------------------------

skpo_status model_cuda_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                float *entropy, skpo_err *err);
skpo_status model_cuda_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                     float *entropy, skpo_err *err);
skpo_status model_cuda_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err);
skpo_status model_cuda_zero_grad(skpo_model *m, skpo_err *err);

#endif
