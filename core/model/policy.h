/*
 * policy.h - the policy: a model as the tools load it and the trainer drives
 * it, with or without a LoRA adapter (lora.h). Defined in policy.c, above the
 * backends: it calls model.h and lora.h, and no backend calls it.
 */
#ifndef SKPO_POLICY_H
#define SKPO_POLICY_H

#include "model/model.h"

typedef struct skpo_lora skpo_lora;

// --- loading -------------------------------------------------------------------------------

// Load the policy for inference: dir is a full checkpoint, or an adapter
// folder whose base_model_name_or_path is loaded as the base; adapter
// (nullable) names an adapter to apply to the checkpoint dir explicitly
// (dir's own adapter then must not exist). The adapter is merged once
// (merge = 1; *lora = NULL) or kept as the low-rank path (merge = 0; *lora
// gets it, free it after the model). *lora may be NULL when merge = 1.
skpo_status skpo_lora_model_load(const char *dir, const char *adapter, const skpo_model_opts *o, int merge,
                                 skpo_model **m, skpo_lora **lora, skpo_err *err);
// W += s B A for every targeted weight of m (host weights; a device copy is
// refreshed through skpo_model_sync_device).
skpo_status skpo_lora_merge(const skpo_lora *lo, skpo_model *m, skpo_err *err);

// --- the trainer's view ----------------------------------------------------------------------

// A model loaded with trainable = 1.
skpo_policy skpo_policy_of_model(skpo_model *m);
// Forward / backward through m with lo attached, the adapter's tensors as the parameters.
skpo_policy skpo_policy_of_lora(skpo_model *m, skpo_lora *lo);

#endif
