// test_config.c - config.json parsing for Qwen2 and Llama (config.h).
#include "harness.h"
#include "base/config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *fix(const char *name) {
    const char *top = getenv("SKPO_TOP");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/tests/fixtures/model/%s", top ? top : ".", name);
    return p;
}

static void qwen25_math_7b_config_loads_with_hf_param_count(void) {
    skpo_config c;
    skpo_err err = {0};
    char *p = fix("qwen2.5-math-7b.config.json");
    CHECK(skpo_config_load(p, &c, &err) == SKPO_OK);
    free(p);
    CHECK(!strcmp(c.model_type, "qwen2"));
    CHECK(c.hidden_size == 3584 && c.num_hidden_layers == 28 && c.num_key_value_heads == 4);
    CHECK(c.head_dim == 128);            // default hidden / heads
    CHECK(c.attention_bias == 1);        // qwen2 always has q/k/v bias
    CHECK(!c.tie_word_embeddings && !c.rope_llama3);
    CHECK(c.n_eos == 1 && c.eos_token_ids[0] == 151643 && c.bos_token_id == 151643);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    CHECK(!strcmp(c.torch_dtype, "bfloat16"));
    // transformers on the meta device counts 7615616512
    CHECK_MSG(skpo_config_num_params(&c) == 7615616512ull, "%zu", skpo_config_num_params(&c));
}

static void llama32_3b_config_loads_with_llama3_rope_and_eos_list(void) {
    skpo_config c;
    skpo_err err = {0};
    char *p = fix("llama-3.2-3b.config.json");
    CHECK(skpo_config_load(p, &c, &err) == SKPO_OK);
    free(p);
    CHECK(!strcmp(c.model_type, "llama"));
    CHECK(c.head_dim == 128 && c.num_attention_heads == 24 && c.num_key_value_heads == 8);
    CHECK(c.tie_word_embeddings && !c.attention_bias);
    CHECK(c.rope_llama3 && c.rope_original_max_position_embeddings == 8192);
    CHECK_NEAR(c.rope_factor, 32, 0);
    CHECK_NEAR(c.rope_low_freq_factor, 1, 0);
    CHECK_NEAR(c.rope_high_freq_factor, 4, 0);
    CHECK_NEAR(c.rope_theta, 500000, 0);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 0);
    CHECK(c.n_eos == 3 && c.eos_token_ids[2] == 128009 && c.bos_token_id == 128000);
    CHECK_MSG(skpo_config_num_params(&c) == 3212749824ull, "%zu", skpo_config_num_params(&c));
}

static void transformers5_rope_parameters_layout_is_read(void) {
    const char *j = "{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":8,\"intermediate_size\":16,"
                    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"rope_parameters\":{\"rope_type\":\"llama3\","
                    "\"rope_theta\":5000.0,\"factor\":2.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                    "\"original_max_position_embeddings\":64},\"dtype\":\"float32\"}";
    skpo_config c;
    skpo_err err = {0};
    CHECK(skpo_config_parse(j, strlen(j), &c, &err) == SKPO_OK);
    CHECK(c.rope_llama3 && c.rope_original_max_position_embeddings == 64);
    CHECK_NEAR(c.rope_theta, 5000, 0);
    CHECK(c.num_key_value_heads == 2 && c.head_dim == 4 && c.bos_token_id == -1 && c.n_eos == 0);
    CHECK(!strcmp(c.torch_dtype, "float32"));
}

static void unsupported_or_malformed_configs_are_rejected_by_name(void) {
    struct { const char *json; skpo_status st; const char *needle; } cases[] = {
        {"{\"model_type\":\"gpt2\"}", SKPO_EUNSUPPORTED, "gpt2"},
        {"{\"model_type\":\"llama\",\"hidden_size\":8}", SKPO_ENOTFOUND, "vocab_size"},
        {"{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":8,\"intermediate_size\":16,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"rope_scaling\":{\"type\":\"yarn\"}}", SKPO_EUNSUPPORTED, "yarn"},
        {"{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":8,\"intermediate_size\":16,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":3,\"num_key_value_heads\":2}", SKPO_ERANGE, "multiple"},
        {"{\"model_type\":\"llama\",\"vocab_size\":-1}", SKPO_ERANGE, "vocab_size"},
        {"{\"model_type\":\"llama\",\"vocab_size\":\"x\"}", SKPO_ETYPE, "vocab_size"},
        {"[1,2", SKPO_EFORMAT, "json"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        skpo_config c;
        skpo_err err = {0};
        skpo_status st = skpo_config_parse(cases[i].json, strlen(cases[i].json), &c, &err);
        CHECK_MSG(st == cases[i].st && strstr(err.msg, cases[i].needle), "case %zu: %d '%s'", i, st, err.msg);
    }
}

static void saved_config_loads_back_identically(void) {
    skpo_config a, b;
    skpo_err err = {0};
    char *p = fix("llama-3.2-3b.config.json");
    CHECK(skpo_config_load(p, &a, &err) == SKPO_OK);
    free(p);
    char tmp[] = "/tmp/skpo_cfg_XXXXXX";
    int fd = mkstemp(tmp);
    close(fd);
    CHECK(skpo_config_save(&a, tmp, "float32", &err) == SKPO_OK);
    CHECK(skpo_config_load(tmp, &b, &err) == SKPO_OK);
    unlink(tmp);
    CHECK(!strcmp(b.torch_dtype, "float32"));
    snprintf(b.torch_dtype, sizeof b.torch_dtype, "%s", a.torch_dtype);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
}

int main(void) {
    RUN(qwen25_math_7b_config_loads_with_hf_param_count);
    RUN(llama32_3b_config_loads_with_llama3_rope_and_eos_list);
    RUN(transformers5_rope_parameters_layout_is_read);
    RUN(unsupported_or_malformed_configs_are_rejected_by_name);
    RUN(saved_config_loads_back_identically);
    return TEST_SUMMARY();
}
