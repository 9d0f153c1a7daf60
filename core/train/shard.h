/*
 * shard.h - the sharded checkpoint: written by every rank of the update
 * server in parallel, beside checkpoint.h's one-writer format.
 *
 * Layout of a folder written by N ranks:
 *   model-<r+1>-of-<N>.safetensors   rank r's deal of the parameters (largest first
 *                                    to the least loaded, ties by index), a Hugging
 *                                    Face shard; rank 0 writes the index, so HF
 *                                    loaders and skpo_model_load read it as it is
 *   optim-<r>-of-<N>.safetensors     (durable steps) the flat range
 *                                    skpo_optim_zero_range(r, N) of the AdamW state:
 *                                    an ordinary skpo-adamw-1 file whose tensors are
 *                                    the parameters in the range, a parameter cut by
 *                                    the range's ends named "<name>[i:j]"
 *   optim.index.json                 {"format": "skpo-adamw-shards-2", "shards": N,
 *                                    "t": T, "numel": P}
 * No rank gathers another's state. The per-parameter deal of earlier builds
 * (skpo-adamw-shards-1) is still read.
 */
#ifndef SKPO_SHARD_H
#define SKPO_SHARD_H

#include "base/common.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/optim.h"

#define SKPO_SHARD_INDEX "optim.index.json"

// --- read --------------------------------------------------------------------------

// Does dir hold a per-rank optimizer state (optim.index.json + shard files)?
int skpo_shard_have_optim(const char *dir);
// Load every shard of dir into o (as skpo_optim_load does for one file), whatever
// the number of ranks that wrote it; *used_master as skpo_optim_load's.
skpo_status skpo_shard_load_optim(const char *dir, skpo_optim *o, skpo_param *p, int np, skpo_dtype dtype,
                                  int *used_master, skpo_err *err);

// --- write -------------------------------------------------------------------------

// Collective: the checkpoint `out` written by every rank of c in parallel:
// each rank its weights shard and, when durable, its range of the optimizer
// state (CPU or device, ZeRO-1 or not); rank 0 commits (src_dir: the
// checkpoint the step started from, for the files it carries over). Every rank
// returns the agreed status.
skpo_status skpo_shard_save(skpo_comm *c, const char *out, const char *src_dir, skpo_model *m, const skpo_optim *o,
                            int durable, const skpo_trainer_state *ts, double lr, skpo_err *err);

#endif
