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

#include "base/cli.h"
#include "gen/generate.h"
#include "model/model.h"
#include "record/record.h"
#include "tokenizer/tokenizer.h"

#include <float.h>
#include <limits.h>

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
    int device;                 // skpo_devices (model.h); -1 = $SKPO_DEVICE, else cuda when a GPU is visible
    skpo_sample_params sample;
    const char *const *stops;   // (n_stops)
    int n_stops;
    // One weights load per GPU (model.h "weights_share"): the exporter lends its
    // device weights through the handle file export_weights when hold_fd (its
    // output) is a pipe; an importer maps them from import_weights, waiting for
    // the file until wait_fd (its input, which the exporter writes only after
    // exporting) is readable, and marks the loan taken, then done when it closes
    // (model.h "the loan's end"). Either side falls back to the ordinary load
    // with a note on stderr.
    const char *export_weights;
    int hold_fd;
    const char *import_weights;
    int wait_fd;
} skpo_rollout_opts;

// The defaults the rows below document: 64 sequences at once, 3072 new
// tokens, temperature 1 with top-p and top-k off; everything else zero.
void skpo_rollout_opts_default(skpo_rollout_opts *o);

// The option rows of every tool that samples (skpo-sample, skpo-splice), each
// writing straight into the skpo_rollout_opts `ro` (base/cli.h row macros).
// The weights-sharing rows: skpo-sample lends, skpo-splice borrows.
#define SKPO_ROLLOUT_EXPORT_ROW(ro) \
    SKPO_OPT_STR("export-weights", 0, &(ro).export_weights, "FILE", "lend the device weights to the next tool on this GPU through handle FILE (held after the output until that tool is done with them)")
#define SKPO_ROLLOUT_IMPORT_ROW(ro) \
    SKPO_OPT_STR("import-weights", 0, &(ro).import_weights, "FILE", "map the device weights lent through handle FILE (skpo-sample --export-weights) instead of loading them")

#define SKPO_ROLLOUT_OPT_ROWS(ro)                                                                                      \
    SKPO_OPT_STR("model", 0, &(ro).model_dir, "DIR", "checkpoint folder (config.json, safetensors; or a LoRA adapter folder)"), \
    SKPO_OPT_STR("adapter", 0, &(ro).adapter, "DIR", "LoRA adapter (PEFT folder) merged into --model at load"),      \
    SKPO_OPT_STR("tokenizer", 0, &(ro).tok_dir, "DIR", "tokenizer.json folder (default: --model)"),                    \
    SKPO_OPT_FLAG("no-text", 0, &(ro).no_text, "no tokenizer: no `text`, EOS from config.json"),                     \
    SKPO_OPT_INT("batch", 0, &(ro).batch, 1, 65536, "N", "sequences generated at once (default 64)"),                  \
    SKPO_OPT_DOUBLE("temperature", 0, &(ro).sample.temperature, 0, 100, "T", "0 = greedy (default 1.0)"),              \
    SKPO_OPT_DOUBLE("top-p", 0, &(ro).sample.top_p, DBL_MIN, 1, "P", "nucleus mass (default 1.0 = off)"),             \
    SKPO_OPT_INT("top-k", 0, &(ro).sample.top_k, 0, INT_MAX, "K", "keep the K most likely (default 0 = off)"),         \
    SKPO_OPT_LONG("max-tokens", 0, &(ro).max_tokens, 1, INT_MAX, "N", "new tokens per response (default 3072)"),       \
    SKPO_OPT_LONG("kv-tokens", 0, &(ro).kv_tokens, 1, 1e12, "N", "KV cache positions (default: batch x context)"),     \
    SKPO_OPT_INT("threads", 0, &(ro).threads, 0, 1024, "N", "CPU threads (default: OpenMP's)"),                        \
    SKPO_OPT_ENUM("device", 0, &(ro).device, &skpo_devices, "compute device (default: cuda when a GPU is visible)")

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
    int lent_fd;                // the output whose end starts the end of the loan (-1: not lent)
    char *lent;                 // the handle file of the lent weights (NULL: not lent)
    char *borrowed;             // the handle file of the mapped weights (NULL: loaded)
} skpo_rollout;

// How long a lender waits, after its output ended, for an importer to take the weights.
#define SKPO_LEND_UNTAKEN_S 60

// Open everything; on failure err names the file or setting.
skpo_status skpo_rollout_open(const skpo_rollout_opts *o, skpo_rollout *r, skpo_err *err);
void skpo_rollout_close(skpo_rollout *r);
// --stats of skpo-sample and skpo-splice: one line on stderr, "PROG: generated N tokens in
// W s (tok/s; C s CPU, tok/CPU-s); prefill N tokens; N model calls; peak KV N blocks (MiB)".
// wall_s and cpu_s are the caller's (its generation loop's) seconds.
void skpo_rollout_print_stats(const skpo_rollout *r, double wall_s, double cpu_s);
// With the weights lent (export_weights): frees the engine and KV cache, ends
// the output (hold_fd: its reader sees EOF) and waits until the importer is
// done with the weights (skpo_weights_lend_end); else returns at once. Call
// after the last output is written, before close.
void skpo_rollout_hold(skpo_rollout *r);

uint64_t skpo_rollout_seed(uint64_t seed, int64_t step, const char *tag, const char *id, uint64_t index);

// Set tokens, logp, finish ("stop" | "length"), seed and (with a tokenizer)
// text = decode(tokens, skip_special) on rec.
void skpo_rollout_fill(const skpo_rollout *r, skpo_rec *rec, const int32_t *tokens, const float *logp, int n,
                       int stopped, uint64_t seed);

#endif
