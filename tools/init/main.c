/*
 * skpo-init - a randomly initialised Hugging Face checkpoint folder from a
 * config.json: weights normal(0, initializer_range), norms 1, biases 0, as
 * transformers initialises a new model; deterministic for a seed. The folder
 * is built under a temporary name and renamed into place, so DIR is either the
 * old folder or the complete new one.
 */
#include "base/cli.h"
#include "base/common.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *SYN = "--config FILE --out DIR [--seed N] [--dtype f32|bf16] [--std X] [--tokenizer DIR]";
static const char *ABOUT =
    "Write a randomly initialised Qwen2 / Llama checkpoint (config.json + model.safetensors)\n"
    "into DIR. --tokenizer copies the tokenizer files of another checkpoint folder next to it.";

static const char *TOKENIZER_FILES[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "vocab.json", "merges.txt", "generation_config.json", NULL};

static skpo_status copy_tokenizer(const char *from, const char *to, skpo_err *err) {
    int copied = 0;
    skpo_status st = SKPO_OK;
    for (const char **f = TOKENIZER_FILES; *f && !st; f++) {
        char *s = skpo_path_join(from, *f), *d = skpo_path_join(to, *f);
        if (skpo_path_exists(s)) {
            st = skpo_copy_file(s, d, err);
            copied++;
        }
        free(s);
        free(d);
    }
    if (!st && !copied) st = skpo_err_set(err, SKPO_ENOTFOUND, "no tokenizer files in '%s'", from);
    return st;
}

// Everything goes into tmp; the caller renames it into place.
static skpo_status write_tmp(const skpo_model *m, const char *tmp, const char *dtype, const char *tok, skpo_err *err) {
    skpo_status st = skpo_mkdir_p(tmp, err);
    if (!st) st = skpo_dir_mark_begin(tmp, err);
    if (!st) st = skpo_model_save(m, tmp, strcmp(dtype, "bf16") ? SKPO_DT_F32 : SKPO_DT_BF16, 0, err);
    if (!st && tok) st = copy_tokenizer(tok, tmp, err);
    if (!st) st = skpo_dir_mark_complete(tmp, err);   // last: every file above is fsynced
    if (!st) st = skpo_fsync_dir(tmp, err);
    return st;
}

int main(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *dtype = "f32", *tok = NULL;
    long seed = 0;
    double std = 0;
    skpo_opt opts[] = {
        SKPO_OPT_STR("config", 0, &config, "FILE", "Hugging Face config.json (qwen2 or llama)"),
        SKPO_OPT_STR("out", 'o', &out, "DIR", "checkpoint folder to create (replaced if it exists)"),
        SKPO_OPT_LONG("seed", 0, &seed, 0, 9.2e18, "N", "random seed (default 0)"),
        SKPO_OPT_STR("dtype", 0, &dtype, "f32|bf16", "weight dtype on disk (default f32)"),
        SKPO_OPT_DOUBLE("std", 0, &std, 1e-12, 10, "X", "init std (default: initializer_range of the config, else 0.02)"),
        SKPO_OPT_STR("tokenizer", 0, &tok, "DIR", "copy tokenizer files from this folder"),
        {0},
    };
    skpo_cli_parse(SYN, ABOUT, opts, argc, argv, NULL);
    if (!config || !out) skpo_cli_usage_error(SYN, "--config and --out are required");
    if (strcmp(dtype, "f32") && strcmp(dtype, "bf16")) skpo_cli_usage_error(SYN, "--dtype must be f32 or bf16");
    skpo_err err = {0};
    skpo_config c;
    if (skpo_config_load(config, &c, &err)) skpo_die("%s", err.msg);
    skpo_model *m;
    skpo_model_opts mo = {0};
    if (skpo_model_init_random(&c, &mo, (uint64_t)seed, std > 0 ? std : c.initializer_range, &m, &err))
        skpo_die("%s", err.msg);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    if (write_tmp(m, tmp, dtype, tok, &err) || skpo_dir_replace(tmp, out, &err)) {
        skpo_err e2 = {0};
        skpo_rm_rf(tmp, &e2);
        skpo_die("%s", err.msg);
    }
    fprintf(stderr, "%s: wrote '%s' (%s, %zu parameters, %s, seed %ld)\n", skpo_progname(), out, c.model_type,
            skpo_config_num_params(&c), dtype, seed);
    skpo_model_free(m);
    return SKPO_EXIT_OK;
}
