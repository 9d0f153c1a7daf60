/*
 * rollout.c - engine setup and record fields shared by the sampling tools;
 * see rollout.h.
 */
#include "gen/rollout.h"

#include "model/lora.h"

#include <stdlib.h>
#include <string.h>

static void add_eos(skpo_rollout *r, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < r->n_eos; i++) if (r->eos[i] == id) return;
    if (r->n_eos < (int)(sizeof r->eos / sizeof r->eos[0])) r->eos[r->n_eos++] = id;
}

void skpo_rollout_opts_default(skpo_rollout_opts *o) {
    memset(o, 0, sizeof *o);
    o->batch = 64;
    o->max_tokens = 3072;
    o->sample = (skpo_sample_params){.temperature = 1.0, .top_p = 1.0, .top_k = 0};
}

skpo_status skpo_rollout_open(const skpo_rollout_opts *o, skpo_rollout *r, skpo_err *err) {
    memset(r, 0, sizeof *r);
    skpo_model_opts mo = {.device = SKPO_DEV_CPU, .trainable = 0, .threads = o->threads};
    skpo_status st = skpo_device_parse(o->device, &mo.device, err);
    if (st != SKPO_OK) return st;
    // LoRA: merged into the base once at load (no per-token cost; lora.h).
    st = skpo_lora_model_load(o->model_dir, o->adapter, &mo, 1, &r->model, NULL, err);
    if (st != SKPO_OK) return st;
    const skpo_config *c = skpo_model_config(r->model);
    r->ctx = c->max_position_embeddings;
    r->vocab = c->vocab_size;
    r->bos = c->bos_token_id;
    for (int i = 0; i < c->n_eos; i++) add_eos(r, c->eos_token_ids[i]);
    if (!o->no_text) {
        const char *td = o->tok_dir ? o->tok_dir : o->model_dir;
        char *base = NULL, *tj = skpo_path_join(td, "tokenizer.json");
        // An adapter folder as PEFT writes it has no tokenizer: use its base's.
        if (!o->tok_dir && !skpo_path_exists(tj) && skpo_lora_is_adapter_dir(td) && !skpo_lora_base_of(td, &base, err))
            td = base;
        free(tj);
        st = skpo_tok_load(td, &r->tok, err);
        free(base);
        if (st != SKPO_OK) { skpo_rollout_close(r); return st; }
        int32_t ids[16];
        int n = skpo_tok_eos_ids(r->tok, ids, 16);
        for (int i = 0; i < n; i++) add_eos(r, ids[i]);
        if (o->n_stops > 0) r->stop = skpo_gen_stops_new(r->tok, o->stops, o->n_stops);
    } else if (o->n_stops > 0) {
        skpo_rollout_close(r);
        return skpo_err_set(err, SKPO_ERANGE, "stop strings need a tokenizer (drop --no-text)");
    }
    long per_seq = 1024 + o->max_tokens < r->ctx ? 1024 + o->max_tokens : r->ctx;
    long kv_tokens = o->kv_tokens > 0 ? o->kv_tokens : (long)o->batch * per_seq;
    r->kv = skpo_model_kv_new(r->model, (size_t)kv_tokens, 2 * o->batch + 1, err);
    if (!r->kv) { skpo_rollout_close(r); return SKPO_ENOMEM; }
    // On a GPU the logits stay there and are sampled there (the coins still
    // come from each sequence's host generator, so seeds replay the same way).
    if (skpo_model_device(r->model) == SKPO_DEV_CUDA && !(r->gdev = skpo_gen_dev_new(r->model, o->batch, err))) {
        skpo_rollout_close(r);
        return SKPO_EDEVICE;
    }
    skpo_gen_opts go = {.step = skpo_gen_model_step, .step_ctx = r->model, .kv = r->kv, .vocab = r->vocab,
                        .max_batch = o->batch, .share_prefix = o->share_prefix, .ctx_limit = r->ctx,
                        .sample = o->sample, .eos = r->eos, .n_eos = r->n_eos, .stop = r->stop, .dev = r->gdev};
    r->gen = skpo_gen_new(&go);
    return SKPO_OK;
}

void skpo_rollout_close(skpo_rollout *r) {
    skpo_gen_free(r->gen);
    if (r->gdev) skpo_gen_dev_free(r->gdev);
    if (r->stop) skpo_gen_stops_free(r->stop);
    if (r->kv) skpo_kv_free(r->kv);
    if (r->tok) skpo_tok_free(r->tok);
    if (r->model) skpo_model_free(r->model);
    memset(r, 0, sizeof *r);
}

uint64_t skpo_rollout_seed(uint64_t seed, int64_t step, const char *tag, const char *id, uint64_t index) {
    return skpo_seed_derive(skpo_seed_derive(seed, tag, (uint64_t)step), id, index);
}

void skpo_rollout_fill(const skpo_rollout *r, skpo_rec *rec, const int32_t *tokens, const float *logp, int n,
                       int stopped, uint64_t seed) {
    skpo_rec_set_i32s(rec, F_TOKENS, tokens, (size_t)n);
    skpo_rec_set_f32s(rec, F_LOGP, logp, (size_t)n);
    if (r->tok) {
        size_t len = 0;
        char *text = skpo_tok_decode(r->tok, tokens, (size_t)n, 1, &len);
        skpo_rec_set_strn(rec, F_TEXT, text, len);
        free(text);
    } else {
        skpo_rec_del(rec, F_TEXT); // a prompt's rendered text must not pass for the response
    }
    skpo_rec_set_str(rec, F_FINISH, stopped ? "stop" : "length");
    skpo_rec_set_int(rec, F_SEED, (int64_t)seed);
}
