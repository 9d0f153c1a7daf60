/*
 * model_impl.h - private to core/model/: the layout of the model struct, its
 * weights and the saved activations of a training pass, and the backend
 * interface (model_backend) that the generic code (model.c) calls and each
 * backend fills: the CPU reference (model_cpu.c, model_train.c) and, in
 * builds with nvcc, CUDA (model_cuda.c, model_cuda_train.c). backends.c is
 * the one place that names them. Not a public interface; tools and other
 * modules use model.h only (white-box tests in tests/unit/ may include it).
 *
 *     model.c (load, save, params, the public calls)
 *        -> backends.c (which backends this build has)
 *             -> model_cpu.c + model_train.c | model_cuda.c + model_cuda_train.c
 *                  -> model_check.c (argument checks both backends share)
 */
#ifndef SKPO_MODEL_IMPL_H
#define SKPO_MODEL_IMPL_H

#include "model/lora.h"

#include "model/model.h"
#include "cpu/ops.h"

// Pointers into the one parameter buffer; NULL where the config has no such tensor.
typedef struct model_layer {
    float *ln1;          // (C) input_layernorm
    float *wq, *bq;      // (QD, C), (QD)
    float *wk, *bk;      // (KVD, C), (KVD)
    float *wv, *bv;      // (KVD, C), (KVD)
    float *wo, *bo;      // (C, QD), (C) (bo: llama attention_bias only)
    float *ln2;          // (C) post_attention_layernorm
    float *wg, *wu;      // (F, C) gate_proj, up_proj
    float *wd;           // (C, F) down_proj
} model_layer;

// Activations kept by a training forward for backward. With a layer stride of
// zero (scoring) every layer reuses the same buffers.
typedef struct model_acts {
    int N;               // tokens (all rows concatenated; model/pack.h)
    int nseq;            // rows: sequences, or packed groups of them
    int *seq_off;        // (nseq + 1) token offset of each row
    int *pos;            // (N) position of each token in its sequence
    int *seg;            // (N) segment of each token (base/attn_mask.h); NULL when no row is packed
    int32_t *ids;        // (N)
    float *x;            // (L + 1, N, C) residual stream entering each layer; x[L] leaves the last
    float *ln1, *rstd1;  // (L, N, C), (L, N)
    float *q;            // (L, N, QD) after RoPE
    float *k, *v;        // (L, N, KVD) (k after RoPE)
    float *att, *lse;    // (L, N, QD), (L, N, NH)
    float *xmid;         // (L, N, C) residual after attention
    float *ln2, *rstd2;  // (L, N, C), (L, N)
    float *gate, *up;    // (L, N, F)
    float *h;            // (N, F) scratch for silu(gate) * up
    float *lnf, *rstdf;  // (N, C), (N)
    int S;               // scored tokens
    int *srow;           // (S) row whose logits predict the scored token
    int32_t *stgt;       // (S) the scored token
    float *slse, *sent;  // (S) log-normaliser and entropy of each scored row
    float *logits;       // (S, V) kept by a training forward for backward when small enough (model_train.c), else NULL
    float temperature;
    int saved;           // 1 when per-layer activations are kept (training)
} model_acts;

struct skpo_model {
    skpo_config c;
    skpo_model_opts o;
    const skpo_ops *ops;
    void **packed;            // (L * 7 + 1) the CPU backend's packed copies of the matrices, made from
                              // the compute weights at the first forward after a weight change
                              // (model_cpu.c model_cpu_prepare); NULL until then
    void **packed_t;          // (L * 7 + 1) the same matrices packed for the backward's din, made at
                              // the first backward of a weight version; NULL until then
    float *cw;                // the compute weights when they differ from mem: the bf16 rounding of
                              // the fp32 masters of a trainable model from a bf16 checkpoint (what
                              // the samplers read); same offsets as mem; NULL = mem itself
    skpo_dtype src_dtype;
    float *mem, *grad;        // all parameters / gradients, contiguous
    size_t numel;
    skpo_param *params;
    int nparams;
    int *hf_index;            // (nparams) HF module-order index of params[j] (model.c layout_order)
    float *wte, *normf, *lm_head; // lm_head == wte when tied
    model_layer *layers;
    float *inv_freq;          // (HS / 2) RoPE frequencies (llama3-scaled if configured)
    model_acts acts;          // of the last train_forward
    int have_acts;
    int no_pack;              // skpo_model_set_pack(m, 0): one row per sequence
    long last_raw, last_packed; // tokens of the last scoring / training pass, as given and as computed
    const struct model_backend *be; // the backend the model computes on (never NULL after model_alloc)
    void *be_ctx;             // the backend's state, opaque here: set by its open, freed by its close
                              // (the CUDA backend's is a model_cuda, read through model_cuda_of)
    struct skpo_lora *lora;   // LoRA: low-rank path added after each targeted projection (lora.h); not owned
};

// The value a CPU pass computes with for a parameter pointer (into mem): its
// bf16 rounding when the model keeps one (cw), else the parameter itself.
static inline const float *model_cw(const skpo_model *m, const float *w) { return w && m->cw ? m->cw + (w - m->mem) : w; }

// Gradient buffer matching a parameter pointer.
// NULL when the base has no gradients (frozen under LoRA).
static inline float *model_grad_of(const skpo_model *m, const float *w) { return w && m->grad ? m->grad + (w - m->mem) : NULL; }

// --- the backend interface -------------------------------------------------------------------
//
// Each public call of model.h that depends on where the model computes goes
// through m->be. Slots marked (nullable) may be NULL: model.c then does what
// the comment says. Every other slot is filled by every backend.
typedef struct model_backend {
    const char *name;        // the --device spelling: "cpu", "cuda"
    skpo_device device;
    int can_pack;            // scoring and training may take packed rows (model/pack.h); each pass sets
                             // m->last_raw / last_packed to what it computed
    int (*visible)(void);    // devices of this kind visible now
    // Before any weight is read: fails when device `device` cannot be used.
    skpo_status (*probe)(int device, skpo_err *err);                             // (nullable: always usable)
    // After the weights are in m->mem (load, init): move them where the backend computes.
    skpo_status (*open)(skpo_model *m, skpo_err *err);                           // (nullable: nothing to do)
    // Frees everything the backend made (open, passes, packed copies, saved activations).
    void (*close)(skpo_model *m);
    // The caller may write the host weights next (skpo_model_params): drop derived copies.
    void (*host_weights_changed)(skpo_model *m);                                 // (nullable)
    // Device -> m->mem (save, the CPU reference) and m->mem -> device (resume).
    skpo_status (*sync_to_host)(const skpo_model *m, skpo_err *err);             // (nullable: m->mem is current)
    skpo_status (*sync_from_host)(skpo_model *m, skpo_err *err);                 // (nullable)
    // Device -> m->mem for elements [a, b) only (a rank saving its slice).
    skpo_status (*sync_to_host_range)(const skpo_model *m, size_t a, size_t b, skpo_err *err);  // (nullable: m->mem is current)
    // Trainable state off the device between updates and back (model.h skpo_model_offload).
    skpo_status (*offload)(skpo_model *m, skpo_err *err);                        // (nullable: nothing to move)
    skpo_status (*reload)(skpo_model *m, skpo_err *err);                         // (nullable)
    // --- inference (model.h: skpo_model_kv_new, skpo_model_step, skpo_model_step_dev)
    skpo_kv *(*kv_new)(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err);
    skpo_status (*step)(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks, const int *off,
                        float *logits, skpo_err *err);
    skpo_status (*step_dev)(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, const float **dev_logits, skpo_err *err);  // (nullable: unsupported)
    struct skpo_cuda *(*cuda_ctx)(const skpo_model *m);                            // (nullable: NULL)
    // --- sampling on the device (model.h skpo_model_sampler_*): all four or none
    skpo_status (*sampler_new)(skpo_model *m, int max_rows, void **out, skpo_err *err); // (nullable: no device sampler)
    skpo_status (*sampler_draw)(void *s, const float *logits, int nrows, const skpo_model_draw *p, const double *coin,
                                int32_t *tok, float *logp, skpo_err *err);
    skpo_status (*sampler_row)(void *s, const float *logits, int r, float *dst, skpo_err *err);
    void (*sampler_free)(void *s);
    // --- scoring and training (model.h)
    skpo_status (*logprobs)(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                            float *entropy, skpo_err *err);
    skpo_status (*train_forward)(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                 float *entropy, skpo_err *err);
    skpo_status (*train_backward)(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err);
    // --- optimizer hooks
    skpo_status (*zero_grad)(skpo_model *m, skpo_err *err);
    void (*set_recompute)(skpo_model *m, int on);                                  // (nullable: ignored)
    skpo_status (*dev_params)(skpo_model *m, skpo_dev_params *out, skpo_err *err); // (nullable: unsupported)
    skpo_status (*grad_sumsq)(skpo_model *m, double *ss, skpo_err *err);           // (nullable: unsupported)
    // --- the device weights lent to / borrowed from another process on the same device (model.h)
    // Fill h's device, ipc (pid, numel and identity are model.c's).
    skpo_status (*export_weights)(const skpo_model *m, skpo_weights_handle *h, skpo_err *err); // (nullable: none)
    // Instead of `open`: map h's weights (m->mem is not loaded).
    skpo_status (*open_shared)(skpo_model *m, const skpo_weights_handle *h, skpo_err *err);    // (nullable: none)
} model_backend;

// Whether a pass packs shared prefixes (skpo_model_packs); inline so the
// backends need not call up into model.c (tests/sh/t_layers.sh: no link circle).
static inline int model_packs(const skpo_model *m) { return !m->no_pack && m->be->can_pack; }

// backends.c: the backend for device d, or an error naming why there is none
// (SKPO_EUNSUPPORTED: not in this build, or an unknown device).
skpo_status model_backend_get(skpo_device d, const model_backend **out, skpo_err *err);

// --- model_check.c: argument checks shared by the backends -----------------------------------

// The skpo_model_step contract (sequences, offsets, token ids).
skpo_status model_step_check(const skpo_model *m, const int *seq, int nseq, const int32_t *toks, const int *off,
                             skpo_err *err);
// Reserve off[i+1]-off[i] positions of kv sequence seq[i] for every i, all or
// nothing; old[i] gets each sequence's previous length.
skpo_status model_step_reserve(const skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int *off, int *old,
                               skpo_err *err);
// The skpo_seq batch of scoring/training (start, length, ids, temperature).
skpo_status model_check_seqs(const skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, skpo_err *err);

// --- the CPU backend (model_cpu.c: inference; model_train.c: scoring and training) --------

extern const model_backend model_backend_cpu;
void model_acts_free(model_acts *a);
// Before a CPU pass: the compute weights and packed matrices of the current
// weights (kept until skpo_model_params says the weights may change).
void model_cpu_prepare(skpo_model *m);
// Slots of m->packed: per layer, then the lm_head.
enum { PK_Q, PK_K, PK_V, PK_O, PK_G, PK_U, PK_D, PK_PER_LAYER };
// out (N, O) (+)= in (N, K) @ W^T + bias with the packed matrix `slot` (ops.h
// matmul_packed): the one forward product of every CPU pass.
void model_cpu_linear(const skpo_model *m, int slot, float *out, const float *in, const float *bias, int N, int K, int O,
                      int acc);
// Matrix `slot` packed for the backward (ops.h pack_t), made on first use per weight version.
const void *model_cpu_packed_t(skpo_model *m, int slot);
// Forward over whole sequences: fills logp / entropy (nullable) of the scored tokens.
skpo_status model_forward_seqs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, int save,
                               float *logp, float *entropy, model_acts *a, skpo_err *err);
skpo_status model_cpu_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                               float *entropy, skpo_err *err);
skpo_status model_cpu_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                    float *entropy, skpo_err *err);
skpo_status model_cpu_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err);

// --- the CUDA backend (model_cuda.c: the device mirror and inference; ------------------------
// --- model_cuda_train.c: scoring and training). Compiled only with SKPO_HAVE_CUDA. ----------
//
// Contract of the device mirror:
//   - every parameter lives on the device in bf16 at the SAME element offset
//     as in the host buffer m->mem, so a host parameter pointer p maps to
//     model_cuda_w(m, p) = w + (p - m->mem) (NULL stays NULL);
//   - a trainable model also keeps fp32 master weights and fp32 gradients on
//     the device (same offsets); the training code (model_cuda_train.c) owns
//     `train`, model_cuda.c owns `infer`;
//   - the host copy m->mem is only refreshed by model_cuda_sync_to_host (save
//     and the CPU reference call it); after the host changes the weights
//     (resume, tests) call model_cuda_sync_from_host;
//   - kernels come from cuda/cuda.h, cuda/cuda_infer.h and cuda/cuda_train.h
//     only; one stream per model.
// For the sampling engine (device-side sampling without the logits copy):
// skpo_model_step_dev() (model.h), or model_cuda_step() with logits == NULL
// followed by model_cuda_last_logits(): the float32 logits (nseq, vocab) of
// the last step stay on the device, on the model's stream, valid until the
// next step; the device sampler (model_cuda_sample.c) draws from them.

typedef uint16_t skpo_bf16;  // same typedef as cuda.h
typedef struct skpo_cuda skpo_cuda;

typedef struct model_cuda {
    skpo_cuda *cu;            // context on the chosen device (its stream is the model's stream)
    skpo_bf16 *w;             // every parameter in bf16, same element offsets as the host m->mem
    float *master, *grad;     // fp32 master weights and gradients (trainable only, else NULL), same offsets
    int offloaded;            // master and grad are freed (skpo_model_offload); the optimizer keeps the masters' values
    float *inv_freq;          // (head_dim / 2) RoPE frequencies, device copy
    int w_shared;             // w is mapped from another process's export (CUDA IPC): unmapped, not freed
    void *train;              // owned by model_cuda_train.c: saved activations, scratch
    void (*train_free)(struct model_cuda *mc);  // set with `train`; model_cuda_close calls it first
    void *infer;              // owned by model_cuda.c: step scratch, staging buffers, last logits
} model_cuda;

// The CUDA backend's state of m (NULL before model_cuda_open, after close).
static inline model_cuda *model_cuda_of(const skpo_model *m) { return (model_cuda *)m->be_ctx; }

// Device pointer of a host parameter pointer (NULL stays NULL).
static inline skpo_bf16 *model_cuda_w(const skpo_model *m, const float *p) {
    return p ? model_cuda_of(m)->w + (p - m->mem) : NULL;
}
static inline float *model_cuda_master(const skpo_model *m, const float *p) {
    return p && model_cuda_of(m)->master ? model_cuda_of(m)->master + (p - m->mem) : NULL;
}
static inline float *model_cuda_grad(const skpo_model *m, const float *p) {
    return p && model_cuda_of(m)->grad ? model_cuda_of(m)->grad + (p - m->mem) : NULL;
}

extern const model_backend model_backend_cuda;
// Attention paths of the CUDA backend (core/cuda/cuda_dnn.h says what each is).
typedef enum { ATTN_CUSTOM, ATTN_FLASH, ATTN_CUDNN, ATTN_NPATHS } model_attn_path;
extern const char *const model_attn_names[ATTN_NPATHS];   // "custom", "flash", "cudnn"
// The path for attention of this shape: SKPO_ATTN when set (cudnn that cannot
// run here or flash with another head_dim: SKPO_EUNSUPPORTED naming the reason;
// an unknown name: SKPO_ERANGE), else cudnn where it runs, else flash
// (training, head_dim 64 or 128), else custom. *forced: SKPO_ATTN named it (a
// forced path never falls back). training = 0: prefill, where flash is custom.
skpo_status model_cuda_attn_select(skpo_cuda *cu, int training, int nh, int nkv, int hs, model_attn_path *path,
                                   int *forced, skpo_err *err);
// model_cuda.c
// Fails (EDEVICE without a visible device `device`) before anything is loaded.
skpo_status model_cuda_probe(int device, skpo_err *err);
// Upload m->mem as bf16 (and as fp32 master + zeroed fp32 grad when
// m->o.trainable) to device `device` (0 = first visible one). Checks the
// bytes needed against the free device memory first. Sets m->be_ctx (and *out
// when out is non-NULL).
skpo_status model_cuda_open(skpo_model *m, int device, model_cuda **out, skpo_err *err);
// Frees everything on the device (train/infer parts included); m->be_ctx = NULL.
void model_cuda_close(skpo_model *m);
// Device -> m->mem: fp32 master when trainable, else the bf16 weights widened.
skpo_status model_cuda_sync_to_host(const skpo_model *m, skpo_err *err);
skpo_status model_cuda_sync_to_host_range(const skpo_model *m, size_t a, size_t b, skpo_err *err);
// m->mem -> device (bf16 weights, and the fp32 master when trainable).
skpo_status model_cuda_sync_from_host(skpo_model *m, skpo_err *err);
// The model's device context (kernels from cuda.h take it); NULL on CPU.
skpo_cuda *model_cuda_ctx(const skpo_model *m);
// model_cuda_sample.c: the device sampler slots (skpo_cuda_sample on the model's stream).
skpo_status model_cuda_sampler_new(skpo_model *m, int max_rows, void **out, skpo_err *err);
skpo_status model_cuda_sampler_draw(void *s, const float *logits, int nrows, const skpo_model_draw *p,
                                    const double *coin, int32_t *tok, float *logp, skpo_err *err);
skpo_status model_cuda_sampler_row(void *s, const float *logits, int r, float *dst, skpo_err *err);
void model_cuda_sampler_free(void *s);
// model_cuda_devops.c: the device primitives of the device optimizer (model.h skpo_dev_ops).
extern const skpo_dev_ops model_cuda_dev_ops;
// A KV cache whose pool (bf16, kvcache.h layout) lives on the device. Bookkeeping
// stays on the host (kvcache.c); copy-on-write copies blocks on the device.
// Fails with SKPO_ENOMEM naming bytes needed and free.
skpo_kv *model_cuda_kv_new(const skpo_model *m, size_t max_tokens, int max_seqs, skpo_err *err);
// skpo_model_step on the device, same contract; logits == NULL leaves them on
// the device only (see model_cuda_last_logits).
skpo_status model_cuda_step(skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int32_t *toks,
                            const int *off, float *logits, skpo_err *err);
// *dev_logits = device pointer to the float32 logits (nseq, vocab) of the last
// successful step (NULL before any or after a failed one); returns nseq (0
// then). Valid until the next step.
int model_cuda_last_logits(const skpo_model *m, const float **dev_logits);

// model_cuda_train.c: the packed-sequence forward (bf16 activations, fp32
// rstd / log-sum-exp saved), the backward of every op with fp32 gradients
// accumulated into the device gradient buffer, and optional per-layer
// activation recomputation; same contracts as the model.h calls.
// Memory of one micro-batch of N tokens (bytes, bf16 = 2): saved per layer
// 2 N (4C + 2QD + 2KVD + 2F) + 12 N (rstd x2, lse NH); with recompute only the
// layer inputs 2 N C per layer plus one layer's worth. The lm_head runs on
// the scored rows in chunks sized to the free device memory (all of them
// when they fit in half of it).
skpo_status model_cuda_logprobs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                float *entropy, skpo_err *err);
skpo_status model_cuda_train_forward(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, float *logp,
                                     float *entropy, skpo_err *err);
skpo_status model_cuda_train_backward(skpo_model *m, const float *dlogp, const float *dentropy, skpo_err *err);
skpo_status model_cuda_zero_grad(skpo_model *m, skpo_err *err);
void model_cuda_set_recompute(skpo_model *m, int on);
skpo_status model_cuda_dev_params(skpo_model *m, skpo_dev_params *out, skpo_err *err);
skpo_status model_cuda_grad_sumsq(skpo_model *m, double *ss, skpo_err *err);
skpo_status model_cuda_offload(skpo_model *m, skpo_err *err);
skpo_status model_cuda_reload(skpo_model *m, skpo_err *err);

// --- LoRA: what lora_cuda.c needs to see of an adapter (lora.c) ---------------------
// Module (l, t): A (r, K), B (O, r) host float32, grads (NULL when not trainable); A NULL when not adapted.
void lora_mod_get(const skpo_lora *lo, int l, int t, const float **A, const float **B, float **dA, float **dB, int *K,
                  int *O);
int lora_layers(const skpo_lora *lo);
float lora_scale_f(const skpo_lora *lo);
// A backend's device copy of the adapter (NULL until set), and the function
// that frees it with the adapter: lora.c never names the backend that made it.
void *lora_dev_get(const skpo_lora *lo);
void lora_dev_set(skpo_lora *lo, void *dev, void (*dev_free)(void *dev));
// Where policy.c keeps skpo_policy_of_lora's context (freed with the adapter).
void **lora_pol_slot(skpo_lora *lo);

// --- LoRA on the CUDA backend (lora_cuda.c; called by model_cuda_train.c only) --------------
// The model on cuda keeps a device copy of the adapter: A and s B in bf16
// (uploaded from the host tensors before every training / scoring pass),
// float32 device gradients, N x r scratch. Pointers are device bf16
// (skpo_bf16) activations of the pass.
struct skpo_cuda;
// Upload the adapter and size the scratch for N rows.
skpo_status skpo_lora_cuda_sync(skpo_lora *lo, struct skpo_cuda *cu, int N, skpo_err *err);
// y (N, O) += s (x A^T) B^T.
skpo_status skpo_lora_cuda_fwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *y, const uint16_t *x,
                               int N, skpo_err *err);
// dx (N, K) += s dy B A; device dA, dB accumulate.
skpo_status skpo_lora_cuda_bwd(skpo_lora *lo, struct skpo_cuda *cu, int l, int t, uint16_t *dx, const uint16_t *dy,
                               const uint16_t *x, int N, skpo_err *err);
// Host gradients += device gradients (which are then zeroed); after each backward.
skpo_status skpo_lora_cuda_grads_to_host(skpo_lora *lo, struct skpo_cuda *cu, skpo_err *err);

#endif
