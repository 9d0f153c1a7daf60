/*
 * lora.h - low-rank adapters (LoRA, Hu et al. 2021) on the seven linear
 * projections of every layer, in the folder format Hugging Face PEFT reads
 * and writes.
 *
 * A targeted projection y = x W^T (W (O, K), frozen, in its checkpoint dtype)
 * becomes
 *     y = x W^T + s (x A^T) B^T,   A (r, K), B (O, r), s = alpha / r
 * (s = alpha / sqrt(r) with use_rslora). A and B are float32 and are the only
 * trained tensors: the base gets activation gradients, never weight
 * gradients. Initialisation is PEFT's default (init_lora_weights = True):
 * A kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(K), 1/sqrt(K)), B = 0,
 * so an untrained adapter computes exactly the base model.
 *
 * Folder (what peft.PeftModel.save_pretrained writes for a causal LM):
 *   adapter_config.json        {"peft_type": "LORA", "r": R, "lora_alpha": A,
 *                               "target_modules": ["q_proj", ...],
 *                               "lora_dropout": 0.0, "bias": "none",
 *                               "base_model_name_or_path": BASE, ...}
 *   adapter_model.safetensors  base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight (r, K)
 *                              base_model.model.model.layers.L.self_attn.q_proj.lora_B.weight (O, r)
 *                              ... for k_proj, v_proj, o_proj, mlp.gate_proj / up_proj / down_proj
 * Reading refuses what skpo does not implement (DoRA, rank/alpha patterns,
 * bias training, modules_to_save, fan_in_fan_out, layer subsets) and any
 * tensor whose name, layer or shape does not fit the base model, naming it.
 *
 * Two ways to apply an adapter:
 *   merged     skpo_lora_merge: W += s B A once (inference tools do this at
 *              load: no per-token cost afterwards);
 *   low-rank   skpo_lora_attach: the model's forward / backward / step add
 *              s (x A^T) B^T after each targeted projection (training; and
 *              the reference the merged path is tested against).
 * The hooks (skpo_lora_fwd / skpo_lora_bwd) are called from model.c and
 * model_train.c on the CPU, from model_cuda_train.c (through lora_cuda.c) on
 * CUDA for scoring and training; the CUDA KV-cache step has no low-rank path
 * (inference tools merge instead).
 */
#ifndef SKPO_LORA_H
#define SKPO_LORA_H

#include "base/common.h"
#include "base/config.h"
#include "model/model.h"
#include "model/policy.h"
#include "cpu/ops.h"

#include <stdint.h>

#define SKPO_LORA_CONFIG_FILE "adapter_config.json"
#define SKPO_LORA_WEIGHTS_FILE "adapter_model.safetensors"

// The targets, in HF module order within a layer.
typedef enum skpo_lora_target {
    SKPO_LORA_Q, SKPO_LORA_K, SKPO_LORA_V, SKPO_LORA_O, SKPO_LORA_GATE, SKPO_LORA_UP, SKPO_LORA_DOWN, SKPO_LORA_NT
} skpo_lora_target;

#define SKPO_LORA_ALL ((1u << SKPO_LORA_NT) - 1)

typedef struct skpo_lora_cfg {
    int rank;            // r >= 1
    double alpha;        // lora_alpha (32, "LoRA Without Regret" / TRL's recipe)
    unsigned targets;    // bit t = target t (all seven: PEFT's "all-linear" minus lm_head)
    double dropout;      // lora_dropout; only 0 is implemented (PEFT's default)
    int rslora;          // use_rslora: s = alpha / sqrt(r)
    uint64_t seed;       // initialisation of A
} skpo_lora_cfg;

void skpo_lora_cfg_default(skpo_lora_cfg *c);
// "q,k,v,o,gate,up,down" (short or PEFT names: q_proj, ..., down_proj; or
// "all-linear"); an unknown name fails naming it.
skpo_status skpo_lora_targets_parse(const char *list, unsigned *out, skpo_err *err);
// "q_proj,k_proj,..." for messages; buf of 96 bytes.
const char *skpo_lora_targets_str(unsigned targets, char *buf, size_t n);
skpo_status skpo_lora_cfg_check(const skpo_lora_cfg *c, skpo_err *err);
double skpo_lora_scale(const skpo_lora_cfg *c);

typedef struct skpo_lora skpo_lora;

// A fresh adapter for a model of config mc (PEFT's init). trainable: also
// allocate float32 gradients.
skpo_status skpo_lora_new(const skpo_config *mc, const skpo_lora_cfg *c, int trainable, skpo_lora **out,
                          skpo_err *err);
// Read dir (adapter_config.json + adapter_model.safetensors) for a model of
// config mc; errors name the file and tensor.
skpo_status skpo_lora_load(const char *dir, const skpo_config *mc, int trainable, skpo_lora **out, skpo_err *err);
void skpo_lora_free(skpo_lora *lo);
// Write the PEFT folder into the existing directory dir; base is recorded as
// base_model_name_or_path (NULL: the one read by skpo_lora_load, if any).
skpo_status skpo_lora_save(const skpo_lora *lo, const char *dir, const char *base, skpo_err *err);

const skpo_lora_cfg *skpo_lora_get_cfg(const skpo_lora *lo);
// base_model_name_or_path of a loaded adapter (NULL for a new one).
const char *skpo_lora_base(const skpo_lora *lo);
// The trained tensors (A and B of every target, PEFT names), owned by lo.
int skpo_lora_params(skpo_lora *lo, skpo_param **params);
void skpo_lora_zero_grad(skpo_lora *lo);

// --- applying it --------------------------------------------------------------------

// Compute the low-rank path in m's forward, backward and step (lo must
// outlive m, or be detached with lo = NULL). Training then needs no base
// gradients: load the model with trainable = 0.
skpo_status skpo_lora_attach(skpo_model *m, skpo_lora *lo, skpo_err *err);

// The hooks (model.c, model_train.c), one targeted projection of layer l;
// no-ops when that target is not adapted. x (N, K) is the projection's input.
// fwd: y (N, O) += s (x A^T) B^T.
void skpo_lora_fwd(const skpo_lora *lo, const skpo_ops *op, int l, int t, float *y, const float *x, int N);
// bwd, given dy (N, O): dx (N, K) += s dy B A; dA, dB accumulate (when trainable).
void skpo_lora_bwd(skpo_lora *lo, const skpo_ops *op, int l, int t, float *dx, const float *dy, const float *x, int N);

// --- loading a policy -----------------------------------------------------------------

// Does dir hold an adapter (adapter_config.json)?
int skpo_lora_is_adapter_dir(const char *dir);
// skpo_lora_model_load, skpo_lora_merge and skpo_policy_of_lora: policy.h.
// The base folder of adapter folder dir: base_model_name_or_path, resolved
// against dir when relative and not found from the working directory.
skpo_status skpo_lora_base_of(const char *dir, char **base, skpo_err *err);

#endif
