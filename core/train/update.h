/*
 * update.h - one training step of the policy: trained records -> mini-batches
 * -> micro-batches -> loss gradients (loss.h) -> all-reduce (comm.h) -> AdamW
 * (optim.h). What skpo-update runs between reading records and writing the
 * checkpoint; no file I/O here.
 *
 * Records: kinds up, down, full with `prompt` and `tokens` (i32s); `logp`
 * (f32s, one per token: the sampler's, i.e. rollout log-probs) unless SFT or
 * old_logp = field with mismatch off; `old_logp` (f32s) with old_logp = field;
 * `adv` (float, required
 * except SFT); `weight` (float, default 1); `ref_logp` when the KL term is on;
 * `uid` names the record in errors. Other kinds (prompt, meta, ...) are
 * ignored. A record with no tokens contributes nothing and counts as no sequence.
 *
 * Mini-batches: prompts in order of first appearance (key `pid`, else `gid`,
 * else `uid`), `minibatch` prompts per optimizer update, so a prompt's up record
 * and its downs always share one update; 128 prompts / 32 = 4 updates. No
 * shuffling (verl's actor default). Data parallel: whole prompts go to ranks,
 * within each mini-batch the heaviest (most tokens) first to the least-loaded
 * rank, a plan every rank computes identically. Micro-batches: a rank's
 * records of one mini-batch are cut into forward/backward passes of at most
 * `micro_tokens` tokens (a longer record goes alone): when the policy packs
 * (skpo_policy.packs), the tokens the pass computes, a group's shared prompt
 * once, and a group that fits stays whole (first fit, update.c micro_plan);
 * otherwise prompt + response tokens, records in order. Normalisers are counted over the whole mini-batch
 * on all ranks first (docs/algorithm.md 4.6), so the sum of micro-batch gradients equals
 * the gradient of the whole mini-batch (up to float summation order).
 *
 * Three log-probs per token: rollout (the records' `logp`), pi_old (the ratio's
 * denominator) and the current policy. pi_old is by default recomputed with
 * the weights the step starts with, one scoring pass over every record before
 * the first optimizer update (SKPO_OLD_RECOMPUTE); or taken as the rollout
 * log-probs (SKPO_OLD_ROLLOUT), or from the records' `old_logp` field
 * (SKPO_OLD_FIELD). The mismatch between rollout and pi_old gets the per-token
 * weights of skpo_mismatch_weights (loss.h), the same for every loss form;
 * masked tokens leave the normalisers. No correction and no mismatch metrics
 * when pi_old is the rollout.
 * SFT (opts.sft): every trained record's tokens in one token-mean of -logp,
 * record weights, advantages and the KL / entropy terms ignored.
 */
#ifndef SKPO_UPDATE_H
#define SKPO_UPDATE_H

#include "train/comm.h"
#include "base/common.h"
#include "train/loss.h"
#include "model/model.h"
#include "train/optim.h"
#include "record/record.h"

typedef enum skpo_old_logp {
    SKPO_OLD_RECOMPUTE = 0,   // score every record with the step's starting weights (default)
    SKPO_OLD_ROLLOUT = 1,     // the sampler's `logp`
    SKPO_OLD_FIELD = 2,       // the records' `old_logp` (e.g. skpo-score --field old_logp)
} skpo_old_logp;

// "recompute" | "rollout" | "field" -> source; -1 if unknown.
int skpo_old_logp_parse(const char *s);

typedef struct skpo_update_opts {
    skpo_loss_cfg loss;
    int sft;                // plain next-token cross-entropy
    int minibatch;          // prompts per optimizer update (32)
    long micro_tokens;      // tokens per forward/backward, packed when the policy packs (8192)
    skpo_old_logp old_logp;        // where pi_old comes from (recompute)
    skpo_mismatch_cfg mismatch;    // rollout vs pi_old correction (tis, cap 2)
    int epochs;             // passes over the step's mini-batches (PPO epochs, 1)
    double phase_weight[SKPO_NPHASE];   // NAN (default): each record's `weight`
    double temperature;     // log-probs of softmax(logits / T) (1.0)
    int64_t step;           // training step, 1-based: sets the learning rate
} skpo_update_opts;

void skpo_update_opts_default(skpo_update_opts *o);

// Per mini-batch metrics, summed over ranks.
typedef struct skpo_update_metrics {
    int epoch;                            // 0-based
    int minibatch;                        // 0-based index within the epoch
    int prompts;
    double seqs[SKPO_NPHASE];
    skpo_loss_stats phase[SKPO_NPHASE];   // phase[p].loss = L_p (before the weight)
    skpo_mismatch_stats mismatch;         // rollout vs pi_old over the mini-batch (tokens 0: not measured)
    double loss;                          // the optimised objective: sum of weight * L_p
    double tokens;                        // response tokens
    double raw_tokens;                    // prompt + response tokens the forward passes were given
    double packed_tokens;                 // the tokens they computed after packing (model/pack.h)
    double micro_batches;                 // forward/backward passes (all ranks)
    double grad_norm;                     // before clipping
    double lr;
    double seconds;                       // wall time of the mini-batch (this rank)
} skpo_update_metrics;

// --- the batch ------------------------------------------------------------------

typedef struct skpo_batch skpo_batch;

// Collect the trained records of recs (which must outlive the batch) and plan
// mini-batches for this rank. Fails naming the record (uid, else its index)
// whose fields are missing or inconsistent (logp length != tokens length, ...).
skpo_status skpo_batch_new(const skpo_rec *recs, size_t n, const skpo_update_opts *o, int rank, int size,
                           skpo_batch **out, skpo_err *err);
void skpo_batch_free(skpo_batch *b);
int skpo_batch_minibatches(const skpo_batch *b);
int skpo_batch_prompts(const skpo_batch *b);
size_t skpo_batch_records(const skpo_batch *b);   // trained records (all ranks)
double skpo_batch_tokens(const skpo_batch *b);    // their response tokens (all ranks)
// This rank's share of mini-batch k: records and prompt + response tokens.
void skpo_batch_local(const skpo_batch *b, int k, int *records, double *tokens);

// --- the step ----------------------------------------------------------------------

// Old log-probs from the current weights for this rank's records.
skpo_status skpo_update_recompute_old(const skpo_policy *pol, skpo_batch *b, const skpo_update_opts *o,
                                      skpo_err *err);
// pi_old (recomputed when o->old_logp says so) and the mismatch weights of
// this rank's records, once per batch; skpo_update_step calls it before the
// first update, skpo_update_grad on first use.
skpo_status skpo_update_prepare(const skpo_policy *pol, skpo_batch *b, const skpo_update_opts *o, skpo_err *err);
// Gradient of mini-batch k's objective into the params' grad (zeroed first),
// all-reduced over comm (device gradients: see skpo_policy.grads_finite); m receives the loss statistics (not grad_norm/lr).
skpo_status skpo_update_grad(const skpo_policy *pol, skpo_comm *comm, skpo_batch *b, int k,
                             const skpo_update_opts *o, skpo_update_metrics *m, skpo_err *err);
// The whole step: recompute old (if asked), then `epochs` times for every
// mini-batch grad + AdamW at the step's learning rate (old log-probs stay
// those of before the first update). met (nullable) receives
// epochs * skpo_batch_minibatches(b) entries, epoch-major. On error the message names the step, the
// mini-batch and the first offending record; parameters may have been updated
// by earlier mini-batches (the caller writes nothing then).
skpo_status skpo_update_step(const skpo_policy *pol, skpo_optim *opt, skpo_comm *comm, skpo_batch *b,
                             const skpo_update_opts *o, skpo_update_metrics *met, skpo_err *err);

// The metrics record (kind "metrics") of one mini-batch.
void skpo_update_metrics_rec(const skpo_update_metrics *m, int64_t step, skpo_rec *r);

#endif
