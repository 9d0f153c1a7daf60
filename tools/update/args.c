/*
 * args.c - skpo-update's option table. Defaults are SKPO.md's (section 2, Q7,
 * Q12); every number is range-checked, never clamped.
 */
#include "cli.h"
#include "tool.h"

#include <math.h>
#include <string.h>

static const char *SYNOPSIS =
    "--model DIR --out DIR [--metrics FILE] [--step N] [--minibatch N] [--micro-tokens N]\n"
    "       [--old-logp recompute|rollout|field] [--mismatch off|tis|mask-token|mask-seq|icepop] [--loss skpo|sft] [--up-loss|--down-loss|--full-loss ppo|cispo]\n"
    "       [--lr X] [--warmup-steps N] [--clip-low E] [--clip-high E] [--resume | --fresh-optimizer] [OPTIONS] [FILE]";

static const char *ABOUT =
    "Read one training step's records (kinds up, down, full with prompt, tokens, logp, adv,\n"
    "weight; other kinds are ignored) from FILE or stdin, update the policy in --model with\n"
    "the clipped objectives of SKPO.md 4.5 (token-mean per phase, 0.5 up + 0.5 down from the\n"
    "records' weight) and AdamW, and write --out atomically as a Hugging Face checkpoint plus\n"
    "optimizer state and step. Optimizer state in --model is continued when present.\n"
    "Under `mpirun -np N` the records are split by prompt across ranks and gradients are\n"
    "all-reduced; rank 0 writes the checkpoint. On GPUs (--device cuda, one process per GPU\n"
    "under mpirun / srun) gradients go over NCCL and AdamW state is sharded (--zero).\n"
    "Writes nothing on stdout.";

static int kind_or_die(const char *flag, const char *v) {
    int k = skpo_loss_kind_parse(v);
    if (k != SKPO_LOSS_PPO && k != SKPO_LOSS_CISPO)
        skpo_cli_usage_error(SYNOPSIS, "--%s: '%s' is not ppo or cispo", flag, v);
    return k;
}

void upd_parse_args(upd_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    skpo_update_opts_default(&a->u);
    skpo_adamw_cfg_default(&a->a);
    skpo_loss_cfg *L = &a->u.loss;
    const char *loss = "skpo", *agg = "token-mean", *decay = "all", *comm = "auto";
    const char *old_logp = NULL, *mismatch = "tis";
    int recompute_old = 0;
    double mm_cap = NAN, mm_low = NAN, mm_high = NAN;
    const char *pagg[SKPO_NPHASE] = {NULL, NULL, NULL};
    const char *pl[SKPO_NPHASE] = {"ppo", "cispo", "ppo"};
    long minibatch = a->u.minibatch, warmup = a->a.warmup_steps, epochs = 1;
    a->threads = 0;
    a->zero = -1;
    const double B = 1e300;
    // NAN = not given: per-phase flags override the group flags, which override the defaults.
    double lo[SKPO_NPHASE] = {NAN, NAN, NAN}, hi[SKPO_NPHASE] = {NAN, NAN, NAN}, dual[SKPO_NPHASE] = {NAN, NAN, NAN};
    double clip_low = NAN, clip_high = NAN, clip_high_up = NAN;
    double *W = a->u.phase_weight;
    skpo_opt opts[] = {
        {"model", 0, SKPO_OPT_STR, &a->model, 0, 0, "DIR", "checkpoint to update (HF folder; + optimizer state)"},
        {"out", 0, SKPO_OPT_STR, &a->out, 0, 0, "DIR", "checkpoint to write (replaced atomically)"},
        {"metrics", 0, SKPO_OPT_STR, &a->metrics, 0, 0, "FILE", "append one metrics record per mini-batch"},
        {"step", 0, SKPO_OPT_INT, &a->step, 1, 1e9, "N", "training step (default: the checkpoint's step + 1)"},
        {"minibatch", 0, SKPO_OPT_INT, &minibatch, 1, 1e9, "N", "prompts per optimizer update (32)"},
        {"micro-tokens", 0, SKPO_OPT_INT, &a->u.micro_tokens, 1, 1e12, "N", "tokens per forward/backward (8192)"},
        {"old-logp", 0, SKPO_OPT_STR, &old_logp, 0, 0, "SRC", "pi_old: recompute (one scoring pass), rollout (`logp`) or field (`old_logp`)"},
        {"recompute-old", 0, SKPO_OPT_FLAG, &recompute_old, 0, 0, NULL, "same as --old-logp recompute"},
        {"mismatch", 0, SKPO_OPT_STR, &mismatch, 0, 0, "MODE", "rollout vs pi_old correction: off|tis|mask-token|mask-seq|icepop (tis)"},
        {"mismatch-cap", 0, SKPO_OPT_DOUBLE, &mm_cap, 1e-9, 1e6, "C", "tis: token weight min(ratio, C) (2)"},
        {"mismatch-low", 0, SKPO_OPT_DOUBLE, &mm_low, 0, 1e6, "R", "mask modes: lowest kept ratio (mask-token 0, mask-seq 1/1.001, icepop 0.5)"},
        {"mismatch-high", 0, SKPO_OPT_DOUBLE, &mm_high, 1e-9, 1e6, "R", "mask modes: highest kept ratio (mask-token 3, mask-seq 1.001, icepop 5)"},
        {"temperature", 0, SKPO_OPT_DOUBLE, &a->u.temperature, 1e-6, 1e6, "T", "log-probs of softmax(logits/T) (1.0)"},
        {"loss", 0, SKPO_OPT_STR, &loss, 0, 0, "skpo|sft", "per-phase policy losses, or cross-entropy on tokens (skpo)"},
        {"clip-low", 0, SKPO_OPT_DOUBLE, &clip_low, 0, 0.999999, "E", "ratio floor 1-E for every phase (0.2)"},
        {"clip-high", 0, SKPO_OPT_DOUBLE, &clip_high, 0, B, "E", "ratio ceiling 1+E for down and full (0.28)"},
        {"clip-high-up", 0, SKPO_OPT_DOUBLE, &clip_high_up, 0, B, "E", "ratio ceiling 1+E for up (0.2)"},
        {"up-loss", 0, SKPO_OPT_STR, &pl[0], 0, 0, "ppo|cispo", "upstream loss form (ppo)"},
        {"up-clip-low", 0, SKPO_OPT_DOUBLE, &lo[0], 0, 0.999999, "E", "upstream ratio floor (--clip-low)"},
        {"up-clip-high", 0, SKPO_OPT_DOUBLE, &hi[0], 0, B, "E", "upstream ratio ceiling (--clip-high-up)"},
        {"up-dual-clip", 0, SKPO_OPT_DOUBLE, &dual[0], 0, B, "C", "upstream dual clip for A<0, 0 = off = eq. 6 exactly (0)"},
        {"down-loss", 0, SKPO_OPT_STR, &pl[1], 0, 0, "ppo|cispo", "downstream loss form (cispo)"},
        {"down-clip-low", 0, SKPO_OPT_DOUBLE, &lo[1], 0, 0.999999, "E", "downstream ratio floor (--clip-low)"},
        {"down-clip-high", 0, SKPO_OPT_DOUBLE, &hi[1], 0, B, "E", "downstream ratio ceiling (--clip-high)"},
        {"down-dual-clip", 0, SKPO_OPT_DOUBLE, &dual[1], 0, B, "C", "downstream dual clip (ppo form), 0 = off (0)"},
        {"full-loss", 0, SKPO_OPT_STR, &pl[2], 0, 0, "ppo|cispo", "full-response (GRPO/DAPO/SPO) loss form (ppo)"},
        {"full-clip-low", 0, SKPO_OPT_DOUBLE, &lo[2], 0, 0.999999, "E", "full ratio floor (--clip-low)"},
        {"full-clip-high", 0, SKPO_OPT_DOUBLE, &hi[2], 0, B, "E", "full ratio ceiling (--clip-high)"},
        {"full-dual-clip", 0, SKPO_OPT_DOUBLE, &dual[2], 0, B, "C", "full dual clip for A<0, 0 = off (3)"},
        {"w-up", 0, SKPO_OPT_DOUBLE, &W[0], 0, 1e6, "W", "upstream weight (default: the records' `weight`)"},
        {"w-down", 0, SKPO_OPT_DOUBLE, &W[1], 0, 1e6, "W", "downstream weight (default: the records' `weight`)"},
        {"w-full", 0, SKPO_OPT_DOUBLE, &W[2], 0, 1e6, "W", "full-response weight (default: the records' `weight`)"},
        {"loss-agg", 0, SKPO_OPT_STR, &agg, 0, 0, "MODE", "token-mean | seq-mean-token-mean | seq-mean-token-sum-norm"},
        {"up-loss-agg", 0, SKPO_OPT_STR, &pagg[0], 0, 0, "MODE", "upstream aggregation (default: --loss-agg)"},
        {"down-loss-agg", 0, SKPO_OPT_STR, &pagg[1], 0, 0, "MODE", "downstream aggregation (default: --loss-agg)"},
        {"full-loss-agg", 0, SKPO_OPT_STR, &pagg[2], 0, 0, "MODE", "full-response aggregation (default: --loss-agg)"},
        {"loss-norm", 0, SKPO_OPT_DOUBLE, &L->agg_norm, 1e-9, B, "N", "constant of seq-mean-token-sum-norm (3072)"},
        {"kl-coef", 0, SKPO_OPT_DOUBLE, &L->kl_coef, 0, B, "X", "k3 KL to `ref_logp` (0 = off)"},
        {"entropy-coef", 0, SKPO_OPT_DOUBLE, &L->entropy_coef, 0, B, "X", "entropy bonus (0 = off)"},
        {"lr", 0, SKPO_OPT_DOUBLE, &a->a.lr, 0, 1, "X", "peak learning rate (1e-6)"},
        {"warmup-steps", 0, SKPO_OPT_INT, &warmup, 0, 1e9, "N", "linear warmup over N training steps (10)"},
        {"weight-decay", 0, SKPO_OPT_DOUBLE, &a->a.weight_decay, 0, 1e6, "X", "decoupled weight decay (0.1)"},
        {"decay", 0, SKPO_OPT_STR, &decay, 0, 0, "all|matrices", "which parameters decay (all, as verl)"},
        {"beta1", 0, SKPO_OPT_DOUBLE, &a->a.beta1, 0, 0.999999999, "X", "AdamW beta1 (0.9)"},
        {"beta2", 0, SKPO_OPT_DOUBLE, &a->a.beta2, 0, 0.999999999, "X", "AdamW beta2 (0.999)"},
        {"adam-eps", 0, SKPO_OPT_DOUBLE, &a->a.eps, 1e-30, 1, "X", "AdamW epsilon (1e-8)"},
        {"max-grad-norm", 0, SKPO_OPT_DOUBLE, &a->a.max_grad_norm, 0, B, "X", "global grad-norm clip, 0 = off (1.0)"},
        {"epochs", 0, SKPO_OPT_INT, &epochs, 1, 1000, "N", "passes over the step's mini-batches (1)"},
        {"resume", 0, SKPO_OPT_FLAG, &a->resume, 0, 0, NULL, "fail unless --model holds optimizer state"},
        {"fresh-optimizer", 0, SKPO_OPT_FLAG, &a->fresh_optimizer, 0, 0, NULL, "ignore optimizer state in --model"},
        {"allow-empty", 0, SKPO_OPT_FLAG, &a->allow_empty, 0, 0, NULL, "no trainable records: write the weights unchanged (else exit 1)"},
        {"threads", 0, SKPO_OPT_INT, &a->threads, 0, 4096, "N", "CPU threads (0 = OpenMP default)"},
        {"comm", 0, SKPO_OPT_STR, &comm, 0, 0, "auto|local|mpi", "data-parallel transport (auto: mpi under mpirun)"},
        {"device", 0, SKPO_OPT_STR, &a->device, 0, 0, "cuda|cpu", "where to train (cuda when a GPU is visible)"},
        {"recompute", 0, SKPO_OPT_FLAG, &a->recompute, 0, 0, NULL, "cuda: keep layer inputs only, recompute in backward"},
        {"zero", 0, SKPO_OPT_INT, &a->zero, 0, 1, "0|1", "cuda, N ranks: shard AdamW state (1 when N > 1)"},
        // Other spellings callers use (pipelines/common.sh on main).
        {"warmup", 0, SKPO_OPT_INT, &warmup, 0, 1e9, "N", "same as --warmup-steps"},
        {"eps", 0, SKPO_OPT_DOUBLE, &a->a.eps, 1e-30, 1, "X", "same as --adam-eps"},
        {"grad-clip", 0, SKPO_OPT_DOUBLE, &a->a.max_grad_norm, 0, B, "X", "same as --max-grad-norm"},
        {0},
    };
    int npos = skpo_cli_parse(SYNOPSIS, ABOUT, opts, argc, argv);
    if (!a->model || !a->out) skpo_cli_usage_error(SYNOPSIS, "--model and --out are required");
    if (npos > 1) skpo_cli_usage_error(SYNOPSIS, "at most one input FILE");
    a->input = npos ? argv[1] : "-";
    if (a->resume && a->fresh_optimizer) skpo_cli_usage_error(SYNOPSIS, "--resume and --fresh-optimizer exclude each other");
    a->u.minibatch = (int)minibatch;
    a->u.epochs = (int)epochs;
    a->a.warmup_steps = (int)warmup;
    skpo_phase_loss *P = L->phase;
    for (int p = 0; p < SKPO_NPHASE; p++) {
        double group_high = p == SKPO_PHASE_UP ? clip_high_up : clip_high;
        if (!isnan(lo[p])) P[p].eps_low = lo[p];
        else if (!isnan(clip_low)) P[p].eps_low = clip_low;
        if (!isnan(hi[p])) P[p].eps_high = hi[p];
        else if (!isnan(group_high)) P[p].eps_high = group_high;
        if (!isnan(dual[p])) P[p].dual_clip = dual[p];
    }
    if (!strcmp(loss, "sft")) a->u.sft = 1;
    else if (strcmp(loss, "skpo")) skpo_cli_usage_error(SYNOPSIS, "--loss: '%s' is not skpo or sft", loss);
    if (a->u.sft && (L->kl_coef != 0 || L->entropy_coef != 0 || recompute_old || old_logp))
        skpo_cli_usage_error(SYNOPSIS, "--loss sft takes no --kl-coef, --entropy-coef, --old-logp or --recompute-old");
    if (recompute_old && old_logp && strcmp(old_logp, "recompute"))
        skpo_cli_usage_error(SYNOPSIS, "--recompute-old contradicts --old-logp %s", old_logp);
    if (old_logp) {
        int src = skpo_old_logp_parse(old_logp);
        if (src < 0) skpo_cli_usage_error(SYNOPSIS, "--old-logp: '%s' is not recompute, rollout or field", old_logp);
        a->u.old_logp = src;
    }
    int mm = skpo_mismatch_parse(mismatch);
    if (mm < 0) skpo_cli_usage_error(SYNOPSIS, "--mismatch: '%s' is not off, tis, mask-token, mask-seq or icepop", mismatch);
    skpo_mismatch_cfg_default(&a->u.mismatch, mm);
    if (!isnan(mm_cap) && mm != SKPO_MISMATCH_TIS) skpo_cli_usage_error(SYNOPSIS, "--mismatch-cap needs --mismatch tis");
    if ((!isnan(mm_low) || !isnan(mm_high)) && mm < SKPO_MISMATCH_MASK_TOKEN)
        skpo_cli_usage_error(SYNOPSIS, "--mismatch-low/--mismatch-high need --mismatch mask-token, mask-seq or icepop");
    if (!isnan(mm_cap)) a->u.mismatch.cap = mm_cap;
    if (!isnan(mm_low)) a->u.mismatch.low = mm_low;
    if (!isnan(mm_high)) a->u.mismatch.high = mm_high;
    static const char *flag[] = {"up-loss", "down-loss", "full-loss"};
    for (int p = 0; p < SKPO_NPHASE; p++) P[p].kind = kind_or_die(flag[p], pl[p]);
    static const char *aflag[] = {"up-loss-agg", "down-loss-agg", "full-loss-agg"};
    for (int p = 0; p < SKPO_NPHASE; p++) {
        const char *v = pagg[p] ? pagg[p] : agg;
        int g = skpo_loss_agg_parse(v);
        if (g < 0) skpo_cli_usage_error(SYNOPSIS, "--%s: unknown mode '%s'", pagg[p] ? aflag[p] : "loss-agg", v);
        L->agg[p] = g;
    }
    if (!strcmp(decay, "matrices")) a->a.decay_matrices_only = 1;
    else if (strcmp(decay, "all")) skpo_cli_usage_error(SYNOPSIS, "--decay: '%s' is not all or matrices", decay);
    if (!strcmp(comm, "auto")) a->comm = SKPO_COMM_AUTO;
    else if (!strcmp(comm, "local")) a->comm = SKPO_COMM_LOCAL;
    else if (!strcmp(comm, "mpi")) a->comm = SKPO_COMM_MPI;
    else skpo_cli_usage_error(SYNOPSIS, "--comm: '%s' is not auto, local or mpi", comm);
    if (a->device && strcmp(a->device, "cuda") && strcmp(a->device, "cpu"))
        skpo_cli_usage_error(SYNOPSIS, "--device: '%s' is not cuda or cpu", a->device);
    skpo_err e = {0};
    if (skpo_loss_cfg_check(L, &e) || skpo_adamw_cfg_check(&a->a, &e) || skpo_mismatch_cfg_check(&a->u.mismatch, &e))
        skpo_cli_usage_error(SYNOPSIS, "%s", e.msg);
}
