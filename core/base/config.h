/*
 * config.h - a Hugging Face config.json for the Qwen2 and Llama families.
 * Field names follow transformers. Loading rejects what we cannot run
 * (unknown model_type, unsupported rope_scaling) with a message.
 */
#ifndef SKPO_CONFIG_H
#define SKPO_CONFIG_H

#include "base/common.h"

#define SKPO_MAX_EOS 8

typedef struct skpo_config {
    char model_type[16];        // "qwen2" | "llama"
    int vocab_size;
    int hidden_size;            // C
    int intermediate_size;      // FFN hidden
    int num_hidden_layers;      // L
    int num_attention_heads;    // NH
    int num_key_value_heads;    // NKV (GQA: NH % NKV == 0)
    int head_dim;               // HS (default hidden_size / num_attention_heads)
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;
    int attention_bias;         // q/k/v projections have bias (qwen2: 1)
    // rope_scaling type "llama3" (0 = none)
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position_embeddings;
    int bos_token_id;           // -1 if none
    int eos_token_ids[SKPO_MAX_EOS];
    int n_eos;
    char torch_dtype[16];       // "float32" | "bfloat16" | "float16"
    double initializer_range;   // std of the random init (default 0.02)
} skpo_config;

skpo_status skpo_config_load(const char *path, skpo_config *c, skpo_err *err);
skpo_status skpo_config_parse(const char *json, size_t len, skpo_config *c, skpo_err *err);
// Write config.json (atomic) with HF field names; dtype overrides torch_dtype if non-NULL.
skpo_status skpo_config_save(const skpo_config *c, const char *path, const char *dtype, skpo_err *err);
// Parameter count (embedding counted once when tied).
size_t skpo_config_num_params(const skpo_config *c);

#endif
