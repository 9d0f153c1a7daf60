/*
 * rollout.c - engine setup and record fields shared by the sampling tools;
 * see rollout.h.
 */
#include "gen/rollout.h"

#include "model/lora.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void add_eos(skpo_rollout *r, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < r->n_eos; i++) if (r->eos[i] == id) return;
    if (r->n_eos < (int)(sizeof r->eos / sizeof r->eos[0])) r->eos[r->n_eos++] = id;
}

void skpo_rollout_opts_default(skpo_rollout_opts *o) {
    memset(o, 0, sizeof *o);
    o->batch = 64;
    o->max_tokens = 3072;
    o->device = -1;
    o->sample = (skpo_sample_params){.temperature = 1.0, .top_p = 1.0, .top_k = 0};
}

// The importer: wait for the handle file (the exporter writes it before any
// output, so readable input without it means none is coming), then map it.
// 1 when r->model holds the borrowed weights; 0 (with a note) to load as usual.
static int import_weights(const skpo_rollout_opts *o, const skpo_model_opts *mo, skpo_rollout *r) {
    // CPU: nothing is lent (the tools share the checkpoint through the page cache)
    if (mo->device != SKPO_DEV_CUDA) return 0;
    const char *why = NULL;
    skpo_err e = {0};
    if (o->adapter || skpo_lora_is_adapter_dir(o->model_dir)) why = "a LoRA adapter is merged at load";
    while (!why && !skpo_path_exists(o->import_weights)) {
        struct pollfd p = {.fd = o->wait_fd, .events = POLLIN};
        if (poll(&p, 1, 20) > 0 && !skpo_path_exists(o->import_weights)) why = "the sampler wrote no handle before its output";
    }
    if (!why && skpo_model_load_shared(o->model_dir, o->import_weights, mo, &r->model, &e) == SKPO_OK) {
        // The exporter frees the weights once this mark says done (or this process is gone).
        if (skpo_weights_mark(o->import_weights, SKPO_MARK_TAKEN, &e) == SKPO_OK) {
            r->borrowed = skpo_xstrdup(o->import_weights);
            return 1;
        }
        skpo_model_free(r->model);   // unmarked, the loan may end under us
        r->model = NULL;
    }
    fprintf(stderr, "%s: note: loading '%s' itself, not the lent weights: %s\n", skpo_progname(), o->model_dir,
            why ? why : e.msg);
    // A lender waits for a mark: say it need not (a `none` file lends nothing).
    skpo_weights_handle h;
    skpo_err me = {0};
    if (skpo_weights_handle_read(o->import_weights, &h, &me) == SKPO_OK && !h.none[0])
        (void)skpo_weights_mark(o->import_weights, SKPO_MARK_DECLINED, &me);
    return 0;
}

// The exporter: lend the weights when the output is a pipe (the importer's
// mark ends the loan, skpo_rollout_hold); a `none` file otherwise, so the
// importer does not wait.
static void export_weights(const skpo_rollout_opts *o, skpo_rollout *r) {
    struct stat st;
    skpo_err e = {0};
    if (fstat(o->hold_fd, &st) || !S_ISFIFO(st.st_mode)) {
        skpo_weights_handle h = {0};
        snprintf(h.none, sizeof h.none, "the sampler's output is not a pipe (nobody to hold the weights for)");
        if (skpo_weights_handle_write(o->export_weights, &h, &e) == SKPO_OK) return;
    } else if (skpo_model_export_weights(r->model, o->model_dir, o->export_weights, &e) == SKPO_OK) {
        r->lent_fd = o->hold_fd;
        r->lent = skpo_xstrdup(o->export_weights);
        return;
    } else if (skpo_model_device(r->model) != SKPO_DEV_CUDA) {
        return;  // CPU: the `none` file says why; nothing to note
    }
    fprintf(stderr, "%s: note: not lending the weights: %s\n", skpo_progname(), e.msg);
}

skpo_status skpo_rollout_open(const skpo_rollout_opts *o, skpo_rollout *r, skpo_err *err) {
    memset(r, 0, sizeof *r);
    r->lent_fd = -1;
    skpo_model_opts mo = {.device = SKPO_DEV_CPU, .trainable = 0, .threads = o->threads};
    skpo_status st = skpo_device_parse(skpo_enum_name(&skpo_devices, o->device), &mo.device, err);
    if (st != SKPO_OK) return st;
    // LoRA: merged into the base once at load (no per-token cost; lora.h).
    if (!o->import_weights || !import_weights(o, &mo, r)) {
        st = skpo_lora_model_load(o->model_dir, o->adapter, &mo, 1, &r->model, NULL, err);
        if (st != SKPO_OK) return st;
    }
    if (o->export_weights) export_weights(o, r);
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

void skpo_rollout_hold(skpo_rollout *r) {
    if (r->lent_fd < 0) return;
    skpo_gen_free(r->gen);
    if (r->gdev) skpo_gen_dev_free(r->gdev);
    if (r->kv) skpo_kv_free(r->kv);
    r->gen = NULL, r->gdev = NULL, r->kv = NULL;
    if (skpo_weights_lend_end(r->lent, r->lent_fd, SKPO_LEND_UNTAKEN_S) == SKPO_LOAN_UNTAKEN)
        fprintf(stderr, "%s: note: nobody mapped the lent weights within %d s of the end of the output: freeing them\n",
                skpo_progname(), SKPO_LEND_UNTAKEN_S);
    r->lent_fd = -1;
}

void skpo_rollout_close(skpo_rollout *r) {
    skpo_gen_free(r->gen);
    if (r->gdev) skpo_gen_dev_free(r->gdev);
    if (r->stop) skpo_gen_stops_free(r->stop);
    if (r->kv) skpo_kv_free(r->kv);
    if (r->tok) skpo_tok_free(r->tok);
    if (r->model) skpo_model_free(r->model);   // a borrowed model unmaps the lent weights here
    skpo_err e = {0};
    if (r->borrowed && skpo_weights_mark(r->borrowed, SKPO_MARK_DONE, &e))
        fprintf(stderr, "%s: note: cannot mark the lent weights done (the sampler waits until this process exits): %s\n",
                skpo_progname(), e.msg);
    free(r->borrowed);
    free(r->lent);
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

void skpo_rollout_print_stats(const skpo_rollout *r, double wall_s, double cpu_s) {
    const skpo_gen_stats *gs = skpo_gen_get_stats(r->gen);
    fprintf(stderr, "%s: generated %llu tokens in %.3f s (%.1f tok/s; %.3f s CPU, %.1f tok/CPU-s); prefill %llu "
            "tokens; %llu model calls; peak KV %zu blocks (%.1f MiB)\n", skpo_progname(),
            (unsigned long long)gs->gen_tokens, wall_s, wall_s > 0 ? gs->gen_tokens / wall_s : 0.0, cpu_s,
            cpu_s > 0 ? gs->gen_tokens / cpu_s : 0.0, (unsigned long long)gs->prefill_tokens,
            (unsigned long long)gs->steps, gs->peak_blocks,
            gs->peak_blocks * (double)skpo_kv_bytes_per_block(r->kv) / (1 << 20));
}
