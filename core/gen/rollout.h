/*
 * rollout.h - what skpo-sample and skpo-splice share: opening a model,
 * tokenizer, KV cache and engine from command-line settings, the seeds of
 * each sequence, and the response fields of a rollout record.
 *
 * Seeds (docs/algorithm.md "Randomness"): every sequence's generator is
 * seeded with skpo_rollout_seed(run seed, step, tag, id, index), e.g.
 * (S, 7, "full", pid, k) for the k-th response to pid at step 7, and that
 * value is stored in the record's `seed`. Re-running one sequence with that
 * seed, the same model and prompt reproduces its tokens.
 */
#ifndef SKPO_ROLLOUT_H
#define SKPO_ROLLOUT_H

#include "gen/generate.h"
#include "model/model.h"
#include "record/record.h"
#include "tokenizer/tokenizer.h"

typedef struct skpo_rollout_opts {
    const char *model_dir;      // a checkpoint, or a LoRA adapter folder (its base is loaded, lora.h)
    const char *adapter;        // LoRA adapter folder applied to model_dir (NULL: none, or model_dir's own)
    const char *tok_dir;        // NULL = model_dir
    int no_text;                // no tokenizer: no `text`, EOS from config.json only
    int batch;                  // sequences at once
    long max_tokens;            // new tokens per response (capped by the context)
    long kv_tokens;             // KV pool positions; 0 = batch * min(ctx, prompt guess + max_tokens)
    int share_prefix;
    int threads;                // 0 = OpenMP default
    const char *device;         // "cuda" | "cpu"; NULL = $SKPO_DEVICE, else cuda when a GPU is visible
    skpo_sample_params sample;
    const char *const *stops;   // (n_stops)
    int n_stops;
} skpo_rollout_opts;

typedef struct skpo_rollout {
    skpo_model *model;
    skpo_tok *tok;              // NULL with no_text
    skpo_kv *kv;
    skpo_gen *gen;
    skpo_gen_dev *gdev;         // sampling on the GPU (CUDA model only, else NULL)
    skpo_gen_stop *stop;        // NULL without stop strings
    int32_t eos[16];
    int n_eos;
    int ctx;                    // max_position_embeddings
    int vocab;
    int bos;                    // config bos_token_id, -1 none
} skpo_rollout;

// Open everything; on failure err names the file or setting.
skpo_status skpo_rollout_open(const skpo_rollout_opts *o, skpo_rollout *r, skpo_err *err);
void skpo_rollout_close(skpo_rollout *r);

uint64_t skpo_rollout_seed(uint64_t seed, int64_t step, const char *tag, const char *id, uint64_t index);

// Set tokens, logp, finish ("stop" | "length"), seed and (with a tokenizer)
// text = decode(tokens, skip_special) on rec.
void skpo_rollout_fill(const skpo_rollout *r, skpo_rec *rec, const int32_t *tokens, const float *logp, int n,
                       int stopped, uint64_t seed);

#endif
