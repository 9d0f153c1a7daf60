/*
 * generate.h - the generation engine: continuous batching over a paged KV
 * cache with prefix sharing.
 *
 * A request is a group: n samples of one prompt (G rollouts, or K responses).
 * The engine keeps up to max_batch sequences running; each skpo_gen_step()
 * makes ONE batched model call for all of them: a prefill chunk for a prompt
 * being read, one token for each decoding sequence. A finished sequence frees
 * its KV at once and a waiting one takes its place (continuous batching).
 *
 * Prefix sharing (share_prefix = 1): a group's prompt is prefilled once into a
 * parent sequence; each sample is a kvcache fork of the parent (blocks shared,
 * copy-on-write of the last partial block) that draws its first token from the
 * parent's final logits. The parent is dropped once every sample has been
 * forked, so G samples hold one copy of the prompt plus G suffixes. With
 * share_prefix = 0 every sample prefills the prompt itself (for tests and the
 * benchmark); the tokens are the same.
 *
 * Randomness: sample i of a request draws its coins from its own generator
 * seeded with seeds[i], so its tokens do not depend on batching, sharing or
 * what else runs.
 *
 * Memory: a sequence is admitted only when the blocks it may still need in the
 * worst case (prompt + max_new) are free after the reservations of those
 * already running, so the cache never runs out mid-sequence and a running
 * sequence is never preempted. Only an idle parent can be dropped: when
 * nothing runs and the oldest group cannot start, parents of later groups
 * give their blocks back and prefill again later. A request that cannot fit
 * even alone is rejected at submit.
 *
 * Stopping: an EOS id (kept as the last token), a stop condition on the
 * decoded text (skpo_gen_stop hooks; skpo_gen_stops_new gives stop strings
 * over a tokenizer; the token completing a stop string is the last token),
 * max_new tokens, or the context limit: a sample of a prompt of P tokens gets
 * at most ctx_limit - P tokens (docs/algorithm.md Q3).
 *
 * Results come back whole, one group at a time, in submission order.
 * Not here: records and the SKPO selection (tools/sample, tools/splice).
 */
#ifndef SKPO_GENERATE_H
#define SKPO_GENERATE_H

#include "base/common.h"
#include "model/kvcache.h"
#include "gen/sampler.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>

// The model, as the engine sees it (same contract as skpo_model_step): append
// toks[off[i]..off[i+1]) to KV sequence seq[i] for each i < nseq and write the
// logits of its last new token to logits + i * vocab.
typedef skpo_status (*skpo_gen_step_fn)(void *ctx, skpo_kv *kv, const int *seq, int nseq,
                                        const int32_t *toks, const int *off, float *logits, skpo_err *err);

// Stop on decoded text: open() makes the state of one sequence, feed() takes
// each sampled id and returns 1 when the sequence must stop, close() frees.
typedef struct skpo_gen_stop {
    void *(*open)(void *ctx);
    int (*feed)(void *state, int32_t id);
    void (*close)(void *state);
    void *ctx;
} skpo_gen_stop;

// Sampling where the logits are (optional; skpo_gen_dev_new builds one for a
// model on CUDA). With opts.dev set the engine calls dev->step instead of
// opts.step: the logits of the step's rows stay on the device, and
// dev->sample draws one token per row there. The coins are still drawn on the
// host, from each sequence's own generator, one per sampled row in the order
// the host path draws them (rows that sample nothing get coin 0 and their
// token is ignored), so a sample replays from its seed. A shared-prefix
// parent's prompt logits come to the host through dev->row, and its forks draw
// their first token with the host sampler (skpo_sample) from them. Tokens
// follow the sampler.h contract; the device may order a truncated (top-k/top-p)
// set differently from the host sampler, so the same coin can choose another
// token of the same distribution there.
typedef struct skpo_gen_dev {
    void *ctx;
    // The model call of skpo_gen_step_fn, without the logits copy.
    skpo_status (*step)(void *ctx, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks, const int *off,
                        skpo_err *err);
    // For each of the last step's nrows rows: tok[r], logp[r] from coin[r] in
    // [0, 1) with params p; tok[r] = -1 when the row's logits are NaN/Inf.
    skpo_status (*sample)(void *ctx, int nrows, const skpo_sample_params *p, const double *coin, int32_t *tok,
                          float *logp, skpo_err *err);
    // Copy row r of the last step's logits (vocab floats) to dst on the host.
    skpo_status (*row)(void *ctx, int r, float *dst, skpo_err *err);
} skpo_gen_dev;

typedef struct skpo_gen_opts {
    skpo_gen_step_fn step;     // the model; skpo_gen_model_step for a skpo_model
    void *step_ctx;            // its first argument (the skpo_model *)
    skpo_kv *kv;               // cache with at least 2 * max_batch + 1 sequence slots
    int vocab;                 // logits per row
    int max_batch;             // sequences running at once (>= 1)
    int step_tokens;           // tokens per model call, prefill + decode (0 = 2048)
    int share_prefix;          // 1: prefill a group's prompt once and fork its samples
    int ctx_limit;             // positions per sequence (max_position_embeddings)
    skpo_sample_params sample;
    const int32_t *eos;        // (n_eos) end-of-sequence ids
    int n_eos;
    const skpo_gen_stop *stop; // nullable: no text-based stopping
    const skpo_gen_dev *dev;   // nullable: logits come to the host and are sampled there
} skpo_gen_opts;

typedef struct skpo_gen_req {
    const int32_t *prompt;     // (n_prompt) ids, copied at submit
    int n_prompt;
    int n;                     // samples (>= 1)
    int max_new;               // tokens per sample (>= 0), capped by the context
    const uint64_t *seeds;     // (n) one per sample, copied
    void *user;                // returned with the results
} skpo_gen_req;

typedef struct skpo_gen_sample {
    int32_t *tokens;           // (n) generated ids
    float *logp;               // (n) behaviour log-probs (sampler.h)
    int n;
    int stopped;               // 1: EOS or stop string; 0: max_new or context limit
    uint64_t seed;
} skpo_gen_sample;

typedef struct skpo_gen_group {
    void *user;
    int n;
    skpo_gen_sample *s;        // (n) in sample order
} skpo_gen_group;

typedef struct skpo_gen_stats {
    uint64_t steps;            // model calls
    uint64_t prefill_tokens;   // prompt tokens run through the model
    uint64_t gen_tokens;       // tokens sampled
    size_t peak_blocks;        // most KV blocks in use after any step
} skpo_gen_stats;

typedef struct skpo_gen skpo_gen;

// --- open / close -----------------------------------------------------------------

skpo_gen *skpo_gen_new(const skpo_gen_opts *o);
void skpo_gen_free(skpo_gen *g);

// --- run ---------------------------------------------------------------------------

// Queue a group. Fails (nothing queued) with SKPO_ERANGE for an empty prompt,
// an id outside [0, vocab), a prompt that leaves no room in the context, or a
// group too large for the cache; the message names the problem, not the pid.
skpo_status skpo_gen_submit(skpo_gen *g, const skpo_gen_req *r, skpo_err *err);
// Groups submitted and not yet popped.
int skpo_gen_pending(const skpo_gen *g);
// Whether a call to skpo_gen_step would do work.
int skpo_gen_busy(const skpo_gen *g);
// Admit waiting sequences, make one model call, sample, retire finished
// sequences. A no-op when nothing runs. Errors: the model's, or SKPO_ENUMERIC
// when logits are NaN/Inf.
skpo_status skpo_gen_step(skpo_gen *g, skpo_err *err);
// The oldest submitted group if it is complete (caller frees it with
// skpo_gen_group_free), else NULL.
skpo_gen_group *skpo_gen_pop(skpo_gen *g);
void skpo_gen_group_free(skpo_gen_group *gr);
// Run until every submitted group is complete (convenience for tests/tools).
skpo_status skpo_gen_run(skpo_gen *g, skpo_err *err);

const skpo_gen_stats *skpo_gen_get_stats(const skpo_gen *g);

// --- adapters (gen_model.c, gen_stop.c) --------------------------------------------------------

// Stop strings matched on the incrementally decoded text (skip_special = 1)
// of each sequence. The strings are not copied: they must outlive the result.
skpo_gen_stop *skpo_gen_stops_new(const skpo_tok *tok, const char *const *stops, int n_stops);
void skpo_gen_stops_free(skpo_gen_stop *s);

// skpo_gen_step_fn over skpo_model_step; ctx is a skpo_model *.
skpo_status skpo_gen_model_step(void *ctx, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                                const int *off, float *logits, skpo_err *err);

// Device sampling (gen_device.c): skpo_model_step_dev + the backend's device
// sampler (model.h skpo_model_sampler_*; on CUDA it draws on the model's
// stream), for steps of at most max_rows rows (the engine's max_batch).
// `model` is a skpo_model *. NULL with SKPO_EUNSUPPORTED in err when the
// model's backend has no device sampler (the CPU).
struct skpo_model;
skpo_gen_dev *skpo_gen_dev_new(struct skpo_model *model, int max_rows, skpo_err *err);
void skpo_gen_dev_free(skpo_gen_dev *d);

#endif
