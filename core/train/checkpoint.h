/*
 * checkpoint.h - training checkpoints: a Hugging Face folder that any tool can
 * load, plus what resuming needs, written atomically.
 *
 * Layout of a checkpoint folder:
 *   config.json, model.safetensors (or shards + index)   the policy, in the dtype
 *                                                        of the checkpoint it came from
 *   tokenizer files, generation_config.json, chat template  copied from the source
 *   optim.safetensors    AdamW moments (several ranks: optim-<r>-of-<N>.safetensors
 *                        + optim.index.json, one per rank, train/shard.h) (+ float32 master weights when the
 *                        weights are stored narrower), see optim.h
 *   trainer_state.json   {"format": "skpo-trainer-1", "step": S,
 *                         "optimizer_updates": T, "dtype": "...", "lr": ...,
 *                         "parent": the checkpoint it was trained from}
 *                        step = training steps completed (the step that wrote it);
 *                        "optimizer_state": false in a weights-only checkpoint
 *                        (o = NULL: a served step between durable saves, whose
 *                        optimizer state lives in the server's memory)
 * LoRA checkpoint (skpo_checkpoint_save_adapter): adapter_config.json +
 *   adapter_model.safetensors instead of config.json + model.safetensors; the
 *   rest as above, the base referenced by path, never copied.
 * Atomicity: everything is written into "<out>.tmp.<pid>" next to <out> (each
 * file fsynced), the completion marker SKPO_MARKER_FILE first as "complete":
 * false and last as "complete": true with every file's size (base/common.h),
 * the folder is fsynced, then skpo_dir_replace() swaps it in; a crash at any
 * point leaves the previous <out> (or none) intact. Loaders
 * (skpo_model_load, skpo_lora_load) refuse a folder whose marker is not
 * complete or whose files do not match it, naming the folder. A stale
 * temp folder of a crashed run is removed by the next save to the same <out>
 * from the same pid only; others are left for the user.
 */
#ifndef SKPO_CHECKPOINT_H
#define SKPO_CHECKPOINT_H

#include "base/common.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/policy.h"
#include "train/optim.h"
#include "train/update.h"

#include <stdint.h>

#define SKPO_TRAINER_FORMAT "skpo-trainer-1"
#define SKPO_OPTIM_FILE "optim.safetensors"
#define SKPO_TRAINER_FILE "trainer_state.json"

typedef struct skpo_trainer_state {
    int64_t step;               // training steps completed
    int64_t optimizer_updates;  // AdamW updates so far (== the optimizer's t)
} skpo_trainer_state;

// Does dir/trainer_state.json say "optimizer_state": false (a weights-only
// checkpoint, its optimizer state kept by the update server)? 0 when absent.
int skpo_checkpoint_weights_only(const char *dir);

// The trainer's view of a model loaded with trainable = 1: skpo_policy_of_model
// in model/policy.h (included here for the callers that found it here).

// Read dir/trainer_state.json. *present = 0 (and SKPO_OK) when the file does
// not exist; a malformed file is an error naming it.
skpo_status skpo_checkpoint_read_state(const char *dir, skpo_trainer_state *st, int *present, skpo_err *err);
// Does dir hold optimizer state (optim.safetensors)?
int skpo_checkpoint_has_optim(const char *dir);

// Write checkpoint `out` from model m (weights in dtype) and optimizer o,
// copying tokenizer-side files from src_dir (NULL: none). o = NULL writes a
// weights-only checkpoint (no optim.safetensors; trainer_state.json says so). lr is recorded for
// the reader's information only. A model on cuda is synced to the host first;
// a device optimizer must have been gathered (skpo_optim_from_device, a
// collective every rank calls) before the saving rank calls this.
skpo_status skpo_checkpoint_save(const char *out, const char *src_dir, skpo_model *m, skpo_dtype dtype,
                                 const skpo_optim *o, const skpo_trainer_state *st, double lr, skpo_err *err);
// (o and st may be NULL: a plain HF checkpoint, e.g. a merged adapter.)

// A checkpoint written by N ranks in parallel (the update server on several
// ranks; same layout, the weights as Hugging Face shards): one rank calls
// parts_begin ("<out>.tmp.<its pid>", created empty) and tells the others
// the folder; every rank k calls save_part (its tensors, owner[i] == k, from
// the device when the model is there: only those are downloaded) and writes
// its optimizer shard, if any, into it; once all succeeded, the first rank
// calls parts_commit with s = the agreed status: index, config.json,
// tokenizer files, trainer_state.json ("optimizer_shards": optimizer_shards,
// or "optimizer_state": false when 0), then the same fsync and swap as
// skpo_checkpoint_save. With s != SKPO_OK it only removes the folder.
skpo_status skpo_checkpoint_parts_begin(const char *out, char **tmp, skpo_err *err);
skpo_status skpo_checkpoint_save_part(const char *tmp, skpo_model *m, skpo_dtype dtype, const int *owner, int part,
                                      int nparts, skpo_err *err);
skpo_status skpo_checkpoint_parts_commit(skpo_status s, const char *out, const char *tmp, const char *src_dir,
                                         skpo_model *m, skpo_dtype dtype, const int *owner, int nparts,
                                         const skpo_trainer_state *st, int optimizer_shards, double lr, skpo_err *err);

// A LoRA checkpoint: the PEFT adapter folder (lora.h) with base_model as its
// base_model_name_or_path, tokenizer-side files from src_dir, optim.safetensors
// (the adapter's AdamW moments) and trainer_state.json; the base weights are
// never copied. Same atomic write as skpo_checkpoint_save.
skpo_status skpo_checkpoint_save_adapter(const char *out, const char *src_dir, const char *base_model, skpo_lora *lo,
                                         const skpo_optim *o, const skpo_trainer_state *st, double lr, skpo_err *err);

#endif
