/*
 * tool.h (tools/update) - the skpo-update tool's parsed arguments and the
 * helpers main.c strings together. Core logic is in core/train/update.c,
 * core/train/checkpoint.c, core/train/optim.c and core/train/loss.c.
 */
#ifndef SKPO_TOOL_UPDATE_H
#define SKPO_TOOL_UPDATE_H

#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/shard.h"
#include "train/update.h"

typedef struct upd_args {
    const char *model, *out, *metrics, *input;
    skpo_update_opts u;
    skpo_adamw_cfg a;
    long step;            // 0 = from trainer_state.json + 1
    int resume;           // require optimizer state in --model
    int fresh_optimizer;  // ignore optimizer state in --model
    int allow_empty;      // --allow-empty: no trainable records writes the weights unchanged
    long threads;
    skpo_comm_kind comm;
    int device;           // --device (skpo_devices); -1 = $SKPO_DEVICE, else cuda when a GPU is visible
    int recompute;        // --recompute: per-layer activation recomputation (cuda)
    int no_pack;          // --no-pack: one row per sequence, shared prefixes computed per sequence (model/pack.h)
    long zero;            // --zero 0|1; -1 = 1 on cuda with more than one rank
    skpo_device dev;      // resolved by upd_bind_device
    // LoRA (lora.c here, core/lora.h)
    long lora_rank;       // 0 = not given
    double lora_alpha;    // NAN = not given (32)
    const char *lora_targets;   // NULL = not given (all seven)
    double lora_dropout;
    long lora_seed;
    const char *adapter;  // --adapter DIR: start from this adapter on the base --model
    int merge_adapter;    // --merge-adapter: write base + adapter merged to --out, no training
    skpo_lora *lora;      // the trained adapter (NULL: full fine-tuning)
    char *lora_base;      // absolute path of the frozen base the adapter belongs to
    const char *serve;    // --serve DIR: a trainer for the whole run (serve.c)
    int weights_only;     // --weights-only: no optimizer state in --out (the server keeps it)
    int offload;          // --offload: (--serve, cuda) trainer state in host memory between steps
} upd_args;

// Parse argv (exits 2 on a usage error, 0 after --help).
void upd_parse_args(upd_args *a, int argc, char **argv);

// --- lora.c --------------------------------------------------------------------

// Is this run a LoRA run (--lora-rank, --adapter, or --model is an adapter folder)?
int upd_lora_wanted(const upd_args *a);
// LoRA's upd_load: the frozen base (no gradients) on a->dev, the adapter
// (continued from --model / --adapter, else new from --lora-*), attached,
// and AdamW over the adapter's tensors (state continued from the adapter's
// folder unless --fresh-optimizer). Sets a->lora and a->lora_base.
void upd_lora_load(skpo_comm *c, upd_args *a, skpo_model **m, skpo_optim **o, int64_t *step);
// --merge-adapter: write --out as a plain HF checkpoint of base + adapter, then exit.
void upd_lora_merge_and_exit(upd_args *a);

// --- run.c ---------------------------------------------------------------------

// Stop every rank together: `st` is this rank's status; when any rank failed,
// rank 0 prints "skpo-update: <message of the first failed rank>", MPI is shut
// down and the process exits 1. Returns only when no rank failed.
void upd_check(skpo_comm *c, skpo_status st, const skpo_err *err);
// Rank 0 reads the trained records of path ("-" = stdin; each checked against skpo_needs[]
// under u's options) and broadcasts them; a bad record ends every rank.
void upd_read_records(skpo_comm *c, const char *path, const skpo_update_opts *u, skpo_rec **recs, size_t *n);
// The communicator: --comm's choice, or with --device cuda, several ranks
// and SKPO_NCCL_ID_FILE (no MPI launcher) the NCCL communicator bootstrapped
// through that file on a device context of its own (*cu, freed by the
// caller after the communicator).
void upd_comm_open(const upd_args *a, skpo_comm **c, struct skpo_cuda **cu);
void upd_comm_close(skpo_comm *c, struct skpo_cuda *cu);
// Pick the device (--device, SKPO_DEVICE, else cuda when a GPU is visible)
// and, under a launcher, this rank's GPU: CUDA_VISIBLE_DEVICES narrowed to
// entry (local rank mod count) before CUDA starts. Dies with one line when
// cuda is asked for and unusable.
void upd_bind_device(upd_args *a);
// Model (trainable, on a->dev) + optimizer (continued from --model's state
// unless --fresh-optimizer) + the step number to run.
void upd_load(skpo_comm *c, upd_args *a, skpo_model **m, skpo_optim **o, int64_t *step);
// On cuda: the NCCL communicator when c has more than one rank (*nc, else
// NULL) and the optimizer moved to the device (ZeRO-1 per --zero). A no-op
// on cpu.
void upd_to_device(skpo_comm *c, const upd_args *a, skpo_model *m, skpo_optim *o, skpo_comm **nc);
// Rank 0: append metrics records (after a meta record) to a->metrics and print
// the step summary on stderr.
void upd_report(skpo_comm *c, const upd_args *a, int argc, char **argv, const skpo_update_metrics *met, int nmb,
                const skpo_batch *b, double seconds);

// --- serve.c -------------------------------------------------------------------

// skpo-update --serve DIR: load --model once, then train one step per request
// file DIR/<step>.req (the one-shot command line of that step), writing
// DIR/<step>.done after the step's checkpoint and metrics are in place.
// Returns the exit status.
int upd_serve(upd_args *a);

#endif
