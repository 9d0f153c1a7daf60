/*
 * model.h - the policy: a decoder-only transformer of the Qwen2 / Llama
 * families, loaded from and saved to Hugging Face checkpoint folders.
 *
 * Three uses share one set of weights:
 *   inference  skpo_model_step() appends tokens of many sequences to a paged KV
 *              cache (kvcache.h) and returns next-token logits (sampler);
 *   scoring    skpo_model_logprobs() gives per-token log-probs of given tokens;
 *   training   skpo_model_train_forward()/..._backward() compute log-probs and
 *              accumulate d(loss)/d(params) from d(loss)/d(logp).
 * Where the model computes is a backend (model_impl.h, model_backend): the
 * CPU reference (model_cpu.c, model_train.c; float32, kernels of cpu/ops.h)
 * and, in builds with nvcc, CUDA (model_cuda.c, model_cuda_train.c; bf16
 * weights, fp32 accumulation). docs/architecture.md has the picture.
 */
#ifndef SKPO_MODEL_H
#define SKPO_MODEL_H

#include "base/cli.h"
#include "base/common.h"
#include "base/config.h"
#include "model/kvcache.h"

#include <stdint.h>

typedef enum skpo_device { SKPO_DEV_CPU = 0, SKPO_DEV_CUDA = 1 } skpo_device;
typedef enum skpo_dtype { SKPO_DT_F32 = 0, SKPO_DT_BF16 = 1, SKPO_DT_F16 = 2 } skpo_dtype;

typedef struct skpo_model skpo_model;

// --- load / save -----------------------------------------------------------------

typedef struct skpo_model_opts {
    skpo_device device;
    int trainable;   // allocate gradients and keep activations for backward
    int threads;     // 0 = OpenMP default
} skpo_model_opts;

// Load config.json + model.safetensors or a sharded index from dir.
skpo_status skpo_model_load(const char *dir, const skpo_model_opts *o, skpo_model **out, skpo_err *err);
void skpo_model_free(skpo_model *m);
// A model with random weights for config c, as transformers initialises one:
// normal(0, std) for projection matrices and embeddings, 1 for norm weights,
// 0 for biases. Deterministic for a seed (each tensor has its own stream).
skpo_status skpo_model_init_random(const skpo_config *c, const skpo_model_opts *o, uint64_t seed, double std,
                                   skpo_model **out, skpo_err *err);
const skpo_config *skpo_model_config(const skpo_model *m);
// dtype the checkpoint was stored in (what a save keeps by default).
skpo_dtype skpo_model_src_dtype(const skpo_model *m);
// Write config.json + model.safetensors (sharded above shard_bytes, 0 = 4 GiB)
// into an existing directory, with HF tensor names.
skpo_status skpo_model_save(const skpo_model *m, const char *dir, skpo_dtype dtype, size_t shard_bytes, skpo_err *err);
// A checkpoint written by several processes at once: part k of nparts writes
// the parameters i with owner[i] == k as the Hugging Face shard
// model-<k+1>-of-<nparts>.safetensors (from the host parameters: sync a
// device model first); then one of them writes the index and config.json.
skpo_status skpo_model_save_part(const skpo_model *m, const char *dir, skpo_dtype dtype, const int *owner, int part,
                                 int nparts, skpo_err *err);
skpo_status skpo_model_save_index(const skpo_model *m, const char *dir, skpo_dtype dtype, const int *owner, int nparts,
                                  skpo_err *err);

// --- inference over a paged KV cache ------------------------------------------------

// A KV cache shaped for this model with room for max_tokens positions.
skpo_kv *skpo_model_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err);

// For each i < nseq: append toks[off[i] .. off[i+1]) to sequence seq[i] of kv
// (prefill when several, decode when one) and write the logits of its last new
// token to logits + i * vocab_size. All sequences advance in one batched pass.
// Fails with SKPO_ERANGE when the cache is full or a position exceeds
// max_position_embeddings (nothing is appended then).
skpo_status skpo_model_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq,
                            const int32_t *toks, const int *off, float *logits, skpo_err *err);

// Like skpo_model_step, but on a CUDA model the float32 logits (nseq, vocab)
// stay on the device: *dev_logits gets the device pointer, on the model's
// stream, valid until the next step (for sampling on the device). A CPU model
// fails with SKPO_EUNSUPPORTED.
skpo_status skpo_model_step_dev(skpo_model *m, skpo_kv *kv, const int *seq, int nseq,
                                const int32_t *toks, const int *off, const float **dev_logits, skpo_err *err);

// --- sampling on the device (optional: a backend may have none) ---------------------
//
// Draws one token per row of skpo_model_step_dev's logits where they are, on
// the model's stream: B coins go up, B tokens and log-probs come back. The
// sampling rule is gen/sampler.h's (temperature, then top-k, then top-p);
// tok[r] = -1 when row r's logits are not finite. (gen/gen_device.c builds the
// engine's skpo_gen_dev on it.)
typedef struct skpo_model_draw {
    double temperature, top_p;
    int top_k;
} skpo_model_draw;
typedef struct skpo_model_sampler skpo_model_sampler;
// For steps of at most max_rows rows. SKPO_EUNSUPPORTED when m's backend has no
// device sampler (the CPU: sample the host logits instead).
skpo_status skpo_model_sampler_new(skpo_model *m, int max_rows, skpo_model_sampler **out, skpo_err *err);
// logits: the (nrows, vocab) device array of the last skpo_model_step_dev.
skpo_status skpo_model_sampler_draw(skpo_model_sampler *s, const float *logits, int nrows, const skpo_model_draw *p,
                                    const double *coin, int32_t *tok, float *logp, skpo_err *err);
// Row r of those logits (vocab floats) to dst on the host.
skpo_status skpo_model_sampler_row(skpo_model_sampler *s, const float *logits, int r, float *dst, skpo_err *err);
void skpo_model_sampler_free(skpo_model_sampler *s);

// --- devices ------------------------------------------------------------------------

// The device the model computes on.
skpo_device skpo_model_device(const skpo_model *m);
// The model's CUDA context (cuda.h; its stream is the one the step runs on),
// for device-side work on skpo_model_step_dev's logits; NULL on CPU.
struct skpo_cuda *skpo_model_cuda_ctx(const skpo_model *m);
// Parse a --device value: "cuda" or "cpu"; NULL means cuda when a GPU is
// visible, else cpu. "cuda" in a build without CUDA or on a machine without a
// visible device fails with a one-line message naming the reason.
skpo_status skpo_device_parse(const char *name, skpo_device *out, skpo_err *err);
// Every device kind a build may have, whether or not this one does (base/cli.h
// table, indexed by skpo_device; backends.c): "cpu" "cuda". The tools' --device
// options parse against it; -1 (not given) is passed on as name NULL.
extern const skpo_enum skpo_devices;

// --- scoring and training ---------------------------------------------------------

// One sequence: ids[0..n) is prompt ++ response; tokens ids[start..n) are scored
// (start >= 1). Output arrays hold n - start values per sequence, concatenated.
typedef struct skpo_seq {
    const int32_t *ids;
    int n;
    int start;
} skpo_seq;

// log softmax(logits / temperature)[ids[t]] for every scored token.
// entropy (nullable): entropy of softmax(logits / temperature) at each scored token.
skpo_status skpo_model_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature,
                                float *logp, float *entropy, skpo_err *err);

// Training pass (model loaded with trainable = 1): like logprobs, but keeps what
// backward needs. backward takes dL/dlogp (and dL/dentropy, nullable) for the
// same scored tokens and ADDS the parameter gradients into each param's grad.
skpo_status skpo_model_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature,
                                     float *logp, float *entropy, skpo_err *err);
skpo_status skpo_model_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err);
void skpo_model_zero_grad(skpo_model *m);
// Packed passes (model/pack.h): logprobs, train_forward and train_backward
// compute a prefix shared by several sequences of a call once, in one row
// with their continuations (on by default). Results are those of the
// unpacked pass (CPU: log-probs bit for bit, gradients up to summation
// order). on = 0: one row per sequence, as before packing existed.
void skpo_model_set_pack(skpo_model *m, int on);
// Whether this model's passes may pack now (set_pack and a backend that can;
// a CUDA pass packs on its own attention kernels, custom, deterministic or
// flash: it leaves cuDNN for flash to pack, unless SKPO_ATTN forces cuDNN).
int skpo_model_packs(const skpo_model *m);
// Tokens of the last logprobs / train_forward: as given (sum of n) and as
// computed (after packing; equal when nothing was packed).
void skpo_model_pass_tokens(const skpo_model *m, long *raw, long *packed);

// --- parameters -----------------------------------------------------------------------

// A named parameter tensor with float32 master data and gradient (host memory
// on CPU). Names are the HF tensor names ("model.layers.0.self_attn.q_proj.weight").
typedef struct skpo_param {
    const char *name;
    float *data;
    float *grad;       // NULL unless trainable
    size_t numel;
    int ndim;
    int64_t shape[2];
} skpo_param;

// Array of all parameters (owned by the model); returns the count.
int skpo_model_params(skpo_model *m, skpo_param **params);

// The model's flat device buffers (a CUDA model, skpo_model_dev_params): the
// params of skpo_model_params, in order and contiguous (param i starts at the
// sum of the numel before it); the device optimizer (train/optim.h) works on them.
// One segment of the one-launch AdamW of the device optimizer: flat elements
// [x, x + n), their moments at mo, weight decay wd (the layout of
// cuda_train.h's skpo_adamw_seg).
typedef struct skpo_dev_seg {
    uint64_t x, n, mo;
    float wd, unused;
} skpo_dev_seg;

// The device primitives the device optimizer (train/optim_dev.c) runs on,
// given by the model's backend with its buffers (skpo_model_dev_params); ctx
// is the skpo_dev_params' device context. The optimizer names no device.
typedef struct skpo_dev_ops {
    skpo_status (*malloc)(void *ctx, void **p, size_t bytes, const char *what, skpo_err *err);
    void (*free)(void *p);
    skpo_status (*h2d)(void *ctx, void *dst, const void *src, size_t bytes, skpo_err *err);
    skpo_status (*d2h)(void *ctx, void *dst, const void *src, size_t bytes, skpo_err *err);
    skpo_status (*d2d)(void *ctx, void *dst, const void *src, size_t bytes, skpo_err *err);
    skpo_status (*sync)(void *ctx, skpo_err *err);
    skpo_status (*host_alloc)(void **p, size_t bytes, skpo_err *err);     // page-locked host memory
    void (*host_free)(void *p);
    skpo_status (*host_register)(void *p, size_t bytes, skpo_err *err);  // page-lock existing memory
    void (*host_unregister)(void *p);
    skpo_status (*to_bf16)(void *ctx, uint16_t *dst, const float *src, size_t n, skpo_err *err);
    skpo_status (*sumsq_f64)(void *ctx, double *out, const float *g, size_t n, skpo_err *err);  // one launch, deterministic
    skpo_status (*adamw_plan_new)(void *ctx, const skpo_dev_seg *segs, int nseg, void **plan, skpo_err *err);
    void (*adamw_plan_free)(void *plan);
    skpo_status (*adamw_multi)(void *ctx, const void *plan, float *w, uint16_t *wb, float *m, float *v, const float *g,
                               float lr, float b1, float b2, float eps, int step, float gscale, skpo_err *err);
} skpo_dev_ops;

typedef struct skpo_dev_params {
    struct skpo_cuda *cu;
    float *master;      // (numel) float32 weights
    uint16_t *w;        // (numel) bf16 copy the forward reads
    float *grad;        // (numel) float32 gradients (rank-local sums before a step)
    size_t numel;
    const skpo_dev_ops *ops;   // the backend's device primitives (NULL: no device optimizer)
} skpo_dev_params;

// Keep only each layer's input in the training forward and recompute the
// layer in backward (off by default). A CPU model ignores it.
void skpo_model_set_recompute(skpo_model *m, int on);
// The flat device buffers the device optimizer works on (model loaded on cuda
// with trainable = 1); SKPO_EUNSUPPORTED otherwise.
skpo_status skpo_model_dev_params(skpo_model *m, skpo_dev_params *out, skpo_err *err);
// Copy the device weights (fp32 masters when trainable) into the host
// parameters, so skpo_model_save / skpo_optim_save see them; after host-side
// changes (a loaded optimizer state's masters) skpo_model_sync_device pushes
// them back. Both are no-ops on a CPU model.
skpo_status skpo_model_sync_host(skpo_model *m, skpo_err *err);
skpo_status skpo_model_sync_device(skpo_model *m, skpo_err *err);
// skpo_model_sync_host for the flat elements [a, b) of the parameters only
// (a rank that writes its slice of a checkpoint downloads just that slice).
skpo_status skpo_model_sync_host_range(skpo_model *m, size_t a, size_t b, skpo_err *err);
// Between updates (verl's offload pattern): a trainable CUDA model frees its
// fp32 masters and gradients on the device (8 of its 10 bytes per parameter)
// and its training activations (the next pass allocates them again); the bf16
// weights stay. The device optimizer
// keeps the masters' values: call skpo_optim_offload first, and after
// skpo_model_reload (fresh buffers, gradients zero, masters undefined)
// skpo_optim_reload with the new skpo_model_dev_params, which writes them
// back. While offloaded, training calls and sync_host fail. No-ops on a CPU
// model.
skpo_status skpo_model_offload(skpo_model *m, skpo_err *err);
skpo_status skpo_model_reload(skpo_model *m, skpo_err *err);
// Sum of squares (double) of the device gradient buffer; SKPO_EUNSUPPORTED
// for a model without device gradients.
skpo_status skpo_model_grad_sumsq(skpo_model *m, double *ss, skpo_err *err);

// --- one weights load per GPU: a sampler's device weights shared (weights_share.c) --------
//
// skpo-sample on a GPU exports its bf16 device weights (a CUDA IPC handle in a
// small text file) and skpo-splice on the same GPU maps them instead of reading
// and uploading the checkpoint again (docs/scaling.md). The handle file:
//   skpo-weights-ipc 1
//   pid <exporter>          it keeps the weights allocated until the importer is done (below)
//   device <PCI bus id>     the GPU they are on
//   numel <parameters>
//   weights <identity>      skpo_weights_identity of the checkpoint folder
//   handle <128 hex digits> the cudaIpcMemHandle_t
// or, when the exporter has nothing to share (CPU: both processes read the one
// file through the page cache; export failed), `none <why>` after the first line.
typedef struct skpo_weights_handle {
    long pid;
    char device[32];
    size_t numel;
    char weights[48];
    unsigned char ipc[64];
    char none[200];     // non-empty: no handle, and why
} skpo_weights_handle;
// A digest of the folder's real path and the name, size, mtime and inode of
// config.json and every *.safetensors / *.json index in it: the weights of
// another checkpoint, or one rewritten in place, have another identity.
skpo_status skpo_weights_identity(const char *dir, char out[48], skpo_err *err);
skpo_status skpo_weights_handle_write(const char *path, const skpo_weights_handle *h, skpo_err *err);
// EFORMAT naming the line for a malformed file; a `none` file reads as SKPO_OK with h->none set.
skpo_status skpo_weights_handle_read(const char *path, skpo_weights_handle *h, skpo_err *err);
// Write PATH for model m loaded from dir: a handle when m's backend can export
// its device weights; else a `none` file with the reason, and that reason in err
// (SKPO_EUNSUPPORTED on CPU). Either way PATH exists afterwards unless the write failed.
skpo_status skpo_model_export_weights(const skpo_model *m, const char *dir, const char *path, skpo_err *err);
// Load dir for inference with its device weights mapped from PATH's exporter
// (nothing read from the safetensors files, nothing uploaded; the host copy of
// the weights is left unloaded). Fails, saying why, when PATH is a `none` file,
// its exporter is gone, it is for other weights, another GPU, another shape,
// o is not an inference model on CUDA, or the mapping fails; the caller then
// loads dir as usual.
skpo_status skpo_model_load_shared(const char *dir, const char *path, const skpo_model_opts *o, skpo_model **out,
                                   skpo_err *err);

// The loan's end. The importer reads the exporter's output until EOF, so the
// exporter cannot hold that pipe open until the importer is gone (that was a
// deadlock: the shell running the pipeline holds it too). Instead the importer
// writes a mark next to PATH (PATH.in): taken once it mapped the weights (if
// it cannot write that, it must not use them), declined when it loads the
// checkpoint itself, done after it unmapped them. The exporter, after its
// last output, calls skpo_weights_lend_end: fd (its output) is pointed at
// /dev/null, so the reader sees EOF, then it waits until the mark says done or
// declined, or the marking process is gone (its exit unmaps), or, with no mark
// at all, untaken_s seconds (nobody took the weights: the handle is removed
// before giving up, so a late importer loads the checkpoint itself). PATH and
// its mark are removed; the caller may then free the weights.
typedef enum { SKPO_MARK_TAKEN, SKPO_MARK_DECLINED, SKPO_MARK_DONE } skpo_loan_mark;
typedef enum { SKPO_LOAN_DONE, SKPO_LOAN_GONE, SKPO_LOAN_UNTAKEN } skpo_loan_end;
skpo_status skpo_weights_mark(const char *path, skpo_loan_mark k, skpo_err *err);
skpo_loan_end skpo_weights_lend_end(const char *path, int fd, double untaken_s);
// PATH.in (malloc'd).
char *skpo_weights_mark_path(const char *path);

// What the trainer needs from a model (skpo_policy_of_model in train/checkpoint.h
// wraps this model, skpo_policy_of_lora in model/lora.h an adapted one; tests
// plug in small exact models).
typedef struct skpo_policy {
    void *ctx;
    // Training forward: per-token logp (and entropy, nullable) of seqs; keeps
    // what backward needs.
    skpo_status (*forward)(void *ctx, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                           float *entropy, skpo_err *err);
    // Accumulate parameter gradients from dL/dlogp (and dL/dH, nullable).
    skpo_status (*backward)(void *ctx, const float *dlogp, const float *dentropy, skpo_err *err);
    // Scoring only (no activations kept): used for --recompute-old.
    skpo_status (*score)(void *ctx, const skpo_seq *seqs, int nseq, float temperature, float *logp, skpo_err *err);
    void (*zero_grad)(void *ctx);
    int (*params)(void *ctx, skpo_param **params);
    // Optional (NULL: the params' host grads are the gradients). Set when the
    // gradients live on a device: checks them there after each micro-batch,
    // and skpo_update_grad then leaves them rank-local: the device optimizer
    // (skpo_optim_to_device) reduces them inside skpo_optim_step (ZeRO-1).
    int (*grads_finite)(void *ctx);
    // Optional (NULL: nothing packed). Tokens of the last forward or score
    // as given and as computed after packing (model/pack.h).
    void (*pass_tokens)(void *ctx, long *raw, long *packed);
    // Optional (NULL: never packs). Whether forward and score pack shared
    // prefixes now (skpo_model_packs): skpo-update then budgets a
    // micro-batch by its packed size, the tokens the pass computes.
    int (*packs)(void *ctx);
} skpo_policy;

#endif
