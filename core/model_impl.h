/*
 * model_impl.h - private to model.c / model_train.c: the layout of the model
 * struct, its weights and the saved activations of a training pass. Not a
 * public interface; tools and other modules use model.h only.
 */
#ifndef SKPO_MODEL_IMPL_H
#define SKPO_MODEL_IMPL_H

#include "model.h"
#include "ops.h"

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
    int N;               // token rows (all sequences concatenated)
    int nseq;
    int *seq_off;        // (nseq + 1) row offsets
    int *pos;            // (N) position of each row in its sequence
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
    float temperature;
    int saved;           // 1 when per-layer activations are kept (training)
} model_acts;

struct skpo_model {
    skpo_config c;
    skpo_model_opts o;
    const skpo_ops *ops;
    void **packed;            // (L * 7 + 1) backend copies of the matrices for inference (model.c
                              // model_pack); NULL until a non-trainable model's first step
    skpo_dtype src_dtype;
    float *mem, *grad;        // all parameters / gradients, contiguous
    size_t numel;
    skpo_param *params;
    int nparams;
    float *wte, *normf, *lm_head; // lm_head == wte when tied
    model_layer *layers;
    float *inv_freq;          // (HS / 2) RoPE frequencies (llama3-scaled if configured)
    model_acts acts;          // of the last train_forward
    int have_acts;
    struct model_cuda *cuda;  // device mirror (model_cuda.h); NULL on CPU
    struct skpo_lora *lora;   // LoRA: low-rank path added after each targeted projection (lora.h); not owned
};

// Gradient buffer matching a parameter pointer.
// NULL when the base has no gradients (frozen under LoRA).
static inline float *model_grad_of(const skpo_model *m, const float *w) { return w && m->grad ? m->grad + (w - m->mem) : NULL; }

// Argument checks shared by the CPU and CUDA paths (model.c, model_train.c):
// the skpo_model_step contract (sequences, offsets, token ids) and the
// skpo_seq batch of scoring/training (start, length, ids, temperature).
skpo_status model_step_check(const skpo_model *m, const int *seq, int nseq, const int32_t *toks, const int *off,
                             skpo_err *err);
// Reserve off[i+1]-off[i] positions of kv sequence seq[i] for every i, all or
// nothing; old[i] gets each sequence's previous length.
skpo_status model_step_reserve(const skpo_model *m, skpo_kv *kv, const int *seq, int nseq, const int *off, int *old,
                               skpo_err *err);
skpo_status model_check_seqs(const skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, skpo_err *err);

// model_train.c
void model_acts_free(model_acts *a);
// Forward over whole sequences: fills logp / entropy (nullable) of the scored tokens.
skpo_status model_forward_seqs(skpo_model *m, const skpo_seq *seqs, int nseq, float temperature, int save,
                               float *logp, float *entropy, model_acts *a, skpo_err *err);

#endif
