/*
 * args.c - skpo-update's option table. Defaults are docs/algorithm.md's (section 2, Q7,
 * Q12); every number is range-checked, never clamped.
 */
#include "base/cli.h"
#include "tool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SYNOPSIS =
    "--model DIR --out DIR [--metrics FILE] [--step N] [--minibatch N] [--micro-tokens N]\n"
    "       [--old-logp recompute|rollout|field] [--mismatch MODE] [--loss skpo|sft] [--up-loss|--down-loss|--full-loss FORM]\n"
    "       [--lr X] [--warmup-steps N] [--clip-low E] [--clip-high E] [--resume | --fresh-optimizer] [OPTIONS] [FILE]\n"
    "       --serve DIR --model DIR [--fresh-optimizer] [--device D] [--threads N] [--offload]";

static const char *ABOUT =
    "Read one training step's records (kinds up, down, full with prompt, tokens, logp, adv,\n"
    "weight; other kinds are ignored) from FILE or stdin, update the policy in --model with\n"
    "the clipped objectives of docs/algorithm.md 4.5 (token-mean per phase, 0.5 up + 0.5 down from the\n"
    "records' weight) and AdamW, and write --out atomically as a Hugging Face checkpoint plus\n"
    "optimizer state and step. Optimizer state in --model is continued when present.\n"
    "Under `mpirun -np N` the records are split by prompt across ranks and gradients are\n"
    "all-reduced; rank 0 writes the checkpoint. On GPUs (--device cuda, one process per GPU\n"
    "under mpirun / srun) gradients go over NCCL and AdamW state is sharded (--zero).\n"
    "Writes nothing on stdout.";

// What the rows write before it can go into upd_args: names still to be
// parsed, and per-phase values where NAN means "not given" (a per-phase flag
// overrides its group flag, which overrides the default).
typedef struct upd_raw {
    const char *loss, *decay, *comm, *old_logp;
    int agg, mismatch;                          // skpo_loss_aggs, skpo_mismatch_modes
    int pl[SKPO_NPHASE], pagg[SKPO_NPHASE];     // skpo_loss_phase_kinds, skpo_loss_aggs; -1 = not given
    int recompute_old;
    double clip_low, clip_high, clip_high_up;
    double lo[SKPO_NPHASE], hi[SKPO_NPHASE], dual[SKPO_NPHASE];
    double mm_cap, mm_low, mm_high;
} upd_raw;

// "No upper bound" for coefficients and clip widths.
static const double B = 1e300;

// Copies one concern's rows into the tool's table; the table is sized with
// room to spare, so running out is a programming error.
static skpo_opt *put_rows(skpo_opt *o, skpo_opt *end, const skpo_opt *rows, size_t n) {
    if ((size_t)(end - o) < n) {
        fprintf(stderr, "skpo-update: option table too small (tools/update/args.c)\n");
        abort();
    }
    memcpy(o, rows, n * sizeof *rows);
    return o + n;
}

// Where the records and checkpoints are, and how a step is cut into batches.
static skpo_opt *rows_io(skpo_opt *o, skpo_opt *end, upd_args *a) {
    const skpo_opt rows[] = {
        SKPO_OPT_STR("serve", 0, &a->serve, "DIR", "stay up: load --model once, train each DIR/<step>.req (docs/update.md)"),
        SKPO_OPT_FLAG("weights-only", 0, &a->weights_only, "write no optimizer state in --out (a served step between durable saves)"),
        SKPO_OPT_FLAG("offload", 0, &a->offload, "--serve on cuda: moments and fp32 masters to pinned host memory between steps"),
        SKPO_OPT_STR("model", 0, &a->model, "DIR", "checkpoint to update (HF folder; + optimizer state)"),
        SKPO_OPT_STR("out", 0, &a->out, "DIR", "checkpoint to write (replaced atomically)"),
        SKPO_OPT_STR("metrics", 0, &a->metrics, "FILE", "append one metrics record per mini-batch"),
        SKPO_OPT_LONG("step", 0, &a->step, 1, 1e9, "N", "training step (default: the checkpoint's step + 1)"),
        SKPO_OPT_INT("minibatch", 0, &a->u.minibatch, 1, 1e9, "N", "prompts per optimizer update (32)"),
        SKPO_OPT_LONG("micro-tokens", 0, &a->u.micro_tokens, 1, 1e12, "N", "tokens per forward/backward, a group's shared prompt once unless --no-pack (8192)"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// The per-phase policy losses of docs/algorithm.md 4.5: form, clip range, weight, aggregation.
static skpo_opt *rows_objective(skpo_opt *o, skpo_opt *end, upd_args *a, upd_raw *r) {
    const skpo_opt rows[] = {
        SKPO_OPT_DOUBLE("temperature", 0, &a->u.temperature, 1e-6, 1e6, "T", "log-probs of softmax(logits/T) (1.0)"),
        SKPO_OPT_STR("loss", 0, &r->loss, "skpo|sft", "per-phase policy losses, or cross-entropy on tokens (skpo)"),
        SKPO_OPT_DOUBLE("clip-low", 0, &r->clip_low, 0, 0.999999, "E", "ratio floor 1-E for every phase (0.2)"),
        SKPO_OPT_DOUBLE("clip-high", 0, &r->clip_high, 0, B, "E", "ratio ceiling 1+E for down and full (0.28)"),
        SKPO_OPT_DOUBLE("clip-high-up", 0, &r->clip_high_up, 0, B, "E", "ratio ceiling 1+E for up (0.2)"),
        SKPO_OPT_ENUM("up-loss", 0, &r->pl[0], &skpo_loss_phase_kinds, "upstream loss form (ppo)"),
        SKPO_OPT_DOUBLE("up-clip-low", 0, &r->lo[0], 0, 0.999999, "E", "upstream ratio floor (--clip-low)"),
        SKPO_OPT_DOUBLE("up-clip-high", 0, &r->hi[0], 0, B, "E", "upstream ratio ceiling (--clip-high-up)"),
        SKPO_OPT_DOUBLE("up-dual-clip", 0, &r->dual[0], 0, B, "C", "upstream dual clip for A<0, 0 = off = eq. 6 exactly (0)"),
        SKPO_OPT_ENUM("down-loss", 0, &r->pl[1], &skpo_loss_phase_kinds, "downstream loss form (cispo)"),
        SKPO_OPT_DOUBLE("down-clip-low", 0, &r->lo[1], 0, 0.999999, "E", "downstream ratio floor (--clip-low)"),
        SKPO_OPT_DOUBLE("down-clip-high", 0, &r->hi[1], 0, B, "E", "downstream ratio ceiling (--clip-high)"),
        SKPO_OPT_DOUBLE("down-dual-clip", 0, &r->dual[1], 0, B, "C", "downstream dual clip (ppo form), 0 = off (0)"),
        SKPO_OPT_ENUM("full-loss", 0, &r->pl[2], &skpo_loss_phase_kinds, "full-response (GRPO/DAPO/SPO) loss form (ppo)"),
        SKPO_OPT_DOUBLE("full-clip-low", 0, &r->lo[2], 0, 0.999999, "E", "full ratio floor (--clip-low)"),
        SKPO_OPT_DOUBLE("full-clip-high", 0, &r->hi[2], 0, B, "E", "full ratio ceiling (--clip-high)"),
        SKPO_OPT_DOUBLE("full-dual-clip", 0, &r->dual[2], 0, B, "C", "full dual clip for A<0, 0 = off (3)"),
        SKPO_OPT_DOUBLE("w-up", 0, &a->u.phase_weight[0], 0, 1e6, "W", "upstream weight (default: the records' `weight`)"),
        SKPO_OPT_DOUBLE("w-down", 0, &a->u.phase_weight[1], 0, 1e6, "W", "downstream weight (default: the records' `weight`)"),
        SKPO_OPT_DOUBLE("w-full", 0, &a->u.phase_weight[2], 0, 1e6, "W", "full-response weight (default: the records' `weight`)"),
        SKPO_OPT_ENUM("loss-agg", 0, &r->agg, &skpo_loss_aggs, "how a phase's token losses are summed (token-mean)"),
        SKPO_OPT_ENUM("up-loss-agg", 0, &r->pagg[0], &skpo_loss_aggs, "upstream aggregation (default: --loss-agg)"),
        SKPO_OPT_ENUM("down-loss-agg", 0, &r->pagg[1], &skpo_loss_aggs, "downstream aggregation (default: --loss-agg)"),
        SKPO_OPT_ENUM("full-loss-agg", 0, &r->pagg[2], &skpo_loss_aggs, "full-response aggregation (default: --loss-agg)"),
        SKPO_OPT_DOUBLE("loss-norm", 0, &a->u.loss.agg_norm, 1e-9, B, "N", "constant of seq-mean-token-sum-norm (3072)"),
        SKPO_OPT_DOUBLE("kl-coef", 0, &a->u.loss.kl_coef, 0, B, "X", "k3 KL to `ref_logp` (0 = off)"),
        SKPO_OPT_DOUBLE("entropy-coef", 0, &a->u.loss.entropy_coef, 0, B, "X", "entropy bonus (0 = off)"),
        SKPO_OPT_DOUBLE("sapo-tau-pos", 0, &a->u.loss.sapo_tau_pos, 1e-9, B, "T", "SAPO gate temperature for A > 0 (1.0)"),
        SKPO_OPT_DOUBLE("sapo-tau-neg", 0, &a->u.loss.sapo_tau_neg, 1e-9, B, "T", "SAPO gate temperature for A <= 0 (1.05)"),
        SKPO_OPT_DOUBLE("prm-beta", 0, &a->u.loss.prm_beta, 1e-9, B, "X", "prm-ce: beta of the implicit PRM reward (0.05, PRIME)"),
        SKPO_OPT_DOUBLE("refine-gamma", 0, &a->u.loss.shape_gamma, 1e-9, B, "X",
                        "records with refine=true (Critique-GRPO) take loss -A p/(p+X), no ratio (0.1)"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// AdamW and the learning-rate schedule (docs/algorithm.md Q12).
static skpo_opt *rows_adamw(skpo_opt *o, skpo_opt *end, upd_args *a, upd_raw *r) {
    const skpo_opt rows[] = {
        SKPO_OPT_DOUBLE("lr", 0, &a->a.lr, 0, 1, "X", "peak learning rate (1e-6)"),
        SKPO_OPT_INT("warmup-steps", 0, &a->a.warmup_steps, 0, 1e9, "N", "linear warmup over N training steps (10)"),
        SKPO_OPT_DOUBLE("weight-decay", 0, &a->a.weight_decay, 0, 1e6, "X", "decoupled weight decay (0.1)"),
        SKPO_OPT_STR("decay", 0, &r->decay, "all|matrices", "which parameters decay (all, as verl)"),
        SKPO_OPT_DOUBLE("beta1", 0, &a->a.beta1, 0, 0.999999999, "X", "AdamW beta1 (0.9)"),
        SKPO_OPT_DOUBLE("beta2", 0, &a->a.beta2, 0, 0.999999999, "X", "AdamW beta2 (0.999)"),
        SKPO_OPT_DOUBLE("adam-eps", 0, &a->a.eps, 1e-30, 1, "X", "AdamW epsilon (1e-8)"),
        SKPO_OPT_DOUBLE("max-grad-norm", 0, &a->a.max_grad_norm, 0, B, "X", "global grad-norm clip, 0 = off (1.0)"),
        SKPO_OPT_INT("epochs", 0, &a->u.epochs, 1, 1000, "N", "passes over the step's mini-batches (1)"),
        SKPO_OPT_FLAG("resume", 0, &a->resume, "fail unless --model holds optimizer state"),
        SKPO_OPT_FLAG("fresh-optimizer", 0, &a->fresh_optimizer, "ignore optimizer state in --model"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// Threads, ranks and devices.
static skpo_opt *rows_placement(skpo_opt *o, skpo_opt *end, upd_args *a, upd_raw *r) {
    const skpo_opt rows[] = {
        SKPO_OPT_LONG("threads", 0, &a->threads, 0, 4096, "N", "CPU threads (0 = OpenMP default)"),
        SKPO_OPT_STR("comm", 0, &r->comm, "auto|local|mpi", "data-parallel transport (auto: mpi under mpirun)"),
        SKPO_OPT_ENUM("device", 0, &a->device, &skpo_devices, "where to train (cuda when a GPU is visible)"),
        SKPO_OPT_FLAG("recompute", 0, &a->recompute, "cuda: keep layer inputs only, recompute in backward"),
        SKPO_OPT_FLAG("no-pack", 0, &a->no_pack, "compute a group's shared prefix once per sequence (default: once per group)"),
        SKPO_OPT_LONG("zero", 0, &a->zero, 0, 1, "0|1", "cuda, N ranks: shard AdamW state (1 when N > 1)"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// LoRA adapters (docs/update.md, core/model/lora.h).
static skpo_opt *rows_lora(skpo_opt *o, skpo_opt *end, upd_args *a) {
    const skpo_opt rows[] = {
        SKPO_OPT_LONG("lora-rank", 0, &a->lora_rank, 1, 65536, "R", "train a LoRA adapter of rank R on a frozen base (off)"),
        SKPO_OPT_DOUBLE("lora-alpha", 0, &a->lora_alpha, 1e-9, 1e9, "A", "LoRA scale alpha / R (32)"),
        SKPO_OPT_STR("lora-targets", 0, &a->lora_targets, "LIST", "adapted projections (q,k,v,o,gate,up,down)"),
        SKPO_OPT_DOUBLE("lora-dropout", 0, &a->lora_dropout, 0, 0.999, "P", "LoRA dropout (0; only 0 is implemented)"),
        SKPO_OPT_LONG("lora-seed", 0, &a->lora_seed, 0, 1e18, "N", "seed of a new adapter's A (0)"),
        SKPO_OPT_STR("adapter", 0, &a->adapter, "DIR", "continue training this PEFT adapter on the base --model"),
        SKPO_OPT_FLAG("merge-adapter", 0, &a->merge_adapter, "write --model's adapter merged into its base to --out; no training"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// pi_old and the rollout-vs-pi_old mismatch correction (docs/update.md).
static skpo_opt *rows_off_policy(skpo_opt *o, skpo_opt *end, upd_raw *r) {
    const skpo_opt rows[] = {
        SKPO_OPT_FLAG("recompute-old", 0, &r->recompute_old, "same as --old-logp recompute"),
        SKPO_OPT_STR("old-logp", 0, &r->old_logp, "SRC", "pi_old: recompute (one scoring pass), rollout (`logp`) or field (`old_logp`)"),
        SKPO_OPT_ENUM("mismatch", 0, &r->mismatch, &skpo_mismatch_modes, "rollout vs pi_old correction (tis)"),
        SKPO_OPT_DOUBLE("mismatch-cap", 0, &r->mm_cap, 1e-9, 1e6, "C", "tis: token weight min(ratio, C) (2)"),
        SKPO_OPT_DOUBLE("mismatch-low", 0, &r->mm_low, 0, 1e6, "R", "mask modes: lowest kept ratio (mask-token 0, mask-seq 1/1.001, icepop 0.5)"),
        SKPO_OPT_DOUBLE("mismatch-high", 0, &r->mm_high, 1e-9, 1e6, "R", "mask modes: highest kept ratio (mask-token 3, mask-seq 1.001, icepop 5)"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// The rest, and the other spellings callers use (pipelines/common.sh on main).
static skpo_opt *rows_misc(skpo_opt *o, skpo_opt *end, upd_args *a) {
    const skpo_opt rows[] = {
        SKPO_OPT_FLAG("allow-empty", 0, &a->allow_empty, "no trainable records: write the weights unchanged (else exit 1)"),
        SKPO_OPT_ALIAS("warmup", "warmup-steps"),
        SKPO_OPT_ALIAS("eps", "adam-eps"),
        SKPO_OPT_ALIAS("grad-clip", "max-grad-norm"),
    };
    return put_rows(o, end, rows, sizeof rows / sizeof *rows);
}

// Per-phase clip values: a per-phase flag beats its group flag (--clip-low,
// --clip-high, or --clip-high-up for up), which beats the default.
static void resolve_clips(skpo_loss_cfg *L, const upd_raw *r) {
    skpo_phase_loss *P = L->phase;
    for (int p = 0; p < SKPO_NPHASE; p++) {
        double group_high = p == SKPO_PHASE_UP ? r->clip_high_up : r->clip_high;
        if (!isnan(r->lo[p])) P[p].eps_low = r->lo[p];
        else if (!isnan(r->clip_low)) P[p].eps_low = r->clip_low;
        if (!isnan(r->hi[p])) P[p].eps_high = r->hi[p];
        else if (!isnan(group_high)) P[p].eps_high = group_high;
        if (!isnan(r->dual[p])) P[p].dual_clip = r->dual[p];
    }
}

static void resolve_loss(upd_args *a, const upd_raw *r) {
    skpo_loss_cfg *L = &a->u.loss;
    resolve_clips(L, r);
    if (!strcmp(r->loss, "sft")) a->u.sft = 1;
    else if (strcmp(r->loss, "skpo")) skpo_cli_usage_error(SYNOPSIS, "--loss: '%s' is not skpo or sft", r->loss);
    if (a->u.sft && (L->kl_coef != 0 || L->entropy_coef != 0 || r->recompute_old || r->old_logp))
        skpo_cli_usage_error(SYNOPSIS, "--loss sft takes no --kl-coef, --entropy-coef, --old-logp or --recompute-old");
}

// Each phase's loss form and aggregation (a per-phase mode beats --loss-agg).
static void resolve_phase_forms(skpo_loss_cfg *L, const upd_raw *r) {
    for (int p = 0; p < SKPO_NPHASE; p++) {
        if (r->pl[p] >= 0) L->phase[p].kind = r->pl[p];
        L->agg[p] = r->pagg[p] >= 0 ? r->pagg[p] : r->agg;
    }
}

static void resolve_off_policy(upd_args *a, const upd_raw *r) {
    if (r->recompute_old && r->old_logp && strcmp(r->old_logp, "recompute"))
        skpo_cli_usage_error(SYNOPSIS, "--recompute-old contradicts --old-logp %s", r->old_logp);
    if (r->old_logp) {
        int src = skpo_old_logp_parse(r->old_logp);
        if (src < 0) skpo_cli_usage_error(SYNOPSIS, "--old-logp: '%s' is not recompute, rollout or field", r->old_logp);
        a->u.old_logp = src;
    }
    int mm = r->mismatch;
    skpo_mismatch_cfg_default(&a->u.mismatch, mm);
    if (!isnan(r->mm_cap) && mm != SKPO_MISMATCH_TIS) skpo_cli_usage_error(SYNOPSIS, "--mismatch-cap needs --mismatch tis");
    if ((!isnan(r->mm_low) || !isnan(r->mm_high)) && mm < SKPO_MISMATCH_MASK_TOKEN)
        skpo_cli_usage_error(SYNOPSIS, "--mismatch-low/--mismatch-high need --mismatch mask-token, mask-seq or icepop");
    if (!isnan(r->mm_cap)) a->u.mismatch.cap = r->mm_cap;
    if (!isnan(r->mm_low)) a->u.mismatch.low = r->mm_low;
    if (!isnan(r->mm_high)) a->u.mismatch.high = r->mm_high;
}

static void resolve_decay_and_placement(upd_args *a, const upd_raw *r) {
    if (!strcmp(r->decay, "matrices")) a->a.decay_matrices_only = 1;
    else if (strcmp(r->decay, "all")) skpo_cli_usage_error(SYNOPSIS, "--decay: '%s' is not all or matrices", r->decay);
    if (!strcmp(r->comm, "auto")) a->comm = SKPO_COMM_AUTO;
    else if (!strcmp(r->comm, "local")) a->comm = SKPO_COMM_LOCAL;
    else if (!strcmp(r->comm, "mpi")) a->comm = SKPO_COMM_MPI;
    else skpo_cli_usage_error(SYNOPSIS, "--comm: '%s' is not auto, local or mpi", r->comm);
}

// Everything a row cannot check by itself: required and exclusive flags,
// names, and the combined loss / AdamW / mismatch configuration. The order
// is the order the messages were always checked in.
static void upd_check_args(upd_args *a, const upd_raw *r, int npos) {
    if (!a->model || (!a->out && !a->serve)) skpo_cli_usage_error(SYNOPSIS, "--model and --out are required");
    if (a->serve && (a->out || npos))
        skpo_cli_usage_error(SYNOPSIS, "--serve takes --model only: --out and the records come with each request");
    if (npos > 1) skpo_cli_usage_error(SYNOPSIS, "at most one input FILE");
    if (a->offload && !a->serve) skpo_cli_usage_error(SYNOPSIS, "--offload is a --serve option (a one-shot run frees the device when it exits)");
    if (a->lora_dropout != 0) skpo_cli_usage_error(SYNOPSIS, "--lora-dropout %g: only 0 is implemented", a->lora_dropout);
    if (a->merge_adapter && (a->lora_rank || a->resume))
        skpo_cli_usage_error(SYNOPSIS, "--merge-adapter trains nothing: no --lora-rank or --resume");
    if (a->resume && a->fresh_optimizer) skpo_cli_usage_error(SYNOPSIS, "--resume and --fresh-optimizer exclude each other");
    resolve_loss(a, r);
    resolve_off_policy(a, r);
    resolve_phase_forms(&a->u.loss, r);
    resolve_decay_and_placement(a, r);
    skpo_err e = {0};
    if (skpo_loss_cfg_check(&a->u.loss, &e) || skpo_adamw_cfg_check(&a->a, &e) ||
        skpo_mismatch_cfg_check(&a->u.mismatch, &e))
        skpo_cli_usage_error(SYNOPSIS, "%s", e.msg);
}

void upd_parse_args(upd_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    skpo_update_opts_default(&a->u);
    skpo_adamw_cfg_default(&a->a);
    a->zero = -1;
    a->device = -1;
    a->lora_alpha = NAN;
    upd_raw r = {
        .loss = "skpo", .agg = SKPO_AGG_TOKEN_MEAN, .decay = "all", .comm = "auto", .mismatch = SKPO_MISMATCH_TIS,
        .pl = {-1, -1, -1}, .pagg = {-1, -1, -1},   // the forms of skpo_loss_cfg_default
        .clip_low = NAN, .clip_high = NAN, .clip_high_up = NAN,
        .lo = {NAN, NAN, NAN}, .hi = {NAN, NAN, NAN}, .dual = {NAN, NAN, NAN},
        .mm_cap = NAN, .mm_low = NAN, .mm_high = NAN,
    };
    skpo_opt opts[128], *o = opts, *end = opts + 127;  // the last one stays the {0} end row
    o = rows_io(o, end, a);
    o = rows_objective(o, end, a, &r);
    o = rows_adamw(o, end, a, &r);
    o = rows_placement(o, end, a, &r);
    o = rows_lora(o, end, a);
    o = rows_off_policy(o, end, &r);
    o = rows_misc(o, end, a);
    *o = (skpo_opt)SKPO_OPT_END;
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv, pos);
    a->input = npos ? pos[0] : "-";
    free(pos);
    upd_check_args(a, &r, npos);
}
