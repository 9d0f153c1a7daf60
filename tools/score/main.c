/*
 * skpo-score - per-token log-probs of given responses under a model: reads
 * records with `prompt` and `tokens`, writes each back with a float32 array
 * field (default `ref_logp`) holding log softmax(logits / T) of every response
 * token given everything before it. Every other field and record kind passes
 * through unchanged and in order. A response record (up, down, full, self)
 * without prompt or tokens is refused (skpo_needs[]): passed through unscored,
 * it would reach the loss without the log-probs it was sent here for. Records are scored in batches of about --batch-tokens tokens and
 * written (and flushed) batch by batch, so a pipe keeps flowing.
 */
#include "base/cli.h"
#include "base/common.h"
#include "model/lora.h"
#include "model/model.h"
#include "record/record.h"

#include <stdlib.h>
#include <string.h>

static const char *SYN =
    "--model DIR [--field NAME] [--temperature T] [--batch-tokens N] [--threads N] [--device cpu|cuda] [--no-pack] [FILE]";
static const char *ABOUT =
    "Add the log-prob of every response token (field `tokens`, conditioned on `prompt`) under the\n"
    "model in DIR as a float32 array field NAME (default ref_logp). Reads FILE or stdin, writes stdout.";

typedef struct batch {
    skpo_rec *r;
    size_t n, cap;
    long tokens;
} batch;

// Score the batch's records that have prompt + tokens, then write all of it.
static void flush_batch(skpo_model *m, batch *b, const char *field, float temp, skpo_writer *w, const char *src) {
    skpo_seq *seqs = skpo_xcalloc(b->n ? b->n : 1, sizeof *seqs);
    int32_t **bufs = skpo_xcalloc(b->n ? b->n : 1, sizeof *bufs);
    size_t *which = skpo_xcalloc(b->n ? b->n : 1, sizeof *which), ns = 0, S = 0;
    for (size_t i = 0; i < b->n; i++) {
        size_t np, nt;
        const int32_t *p = skpo_rec_i32s(&b->r[i], F_PROMPT, &np), *t = skpo_rec_i32s(&b->r[i], F_TOKENS, &nt);
        if (!p || !t || skpo_rec_is_kind(&b->r[i], SKPO_KIND_META) || skpo_rec_is_kind(&b->r[i], SKPO_KIND_PROMPT)) continue;
        if (np == 0) skpo_die("%s: a record with an empty prompt cannot be scored (record %zu of the batch)", src, i + 1);
        bufs[ns] = skpo_xmalloc((np + nt) * sizeof(int32_t));
        memcpy(bufs[ns], p, np * sizeof(int32_t));
        memcpy(bufs[ns] + np, t, nt * sizeof(int32_t));
        seqs[ns] = (skpo_seq){bufs[ns], (int)(np + nt), (int)np};
        which[ns++] = i;
        S += nt;
    }
    float *lp = skpo_xmalloc((S ? S : 1) * sizeof(float));
    skpo_err err = {0};
    if (ns && skpo_model_logprobs(m, seqs, (int)ns, temp, lp, NULL, &err)) skpo_die("%s: %s", src, err.msg);
    for (size_t k = 0, o = 0; k < ns; k++) {
        size_t n = (size_t)(seqs[k].n - seqs[k].start);
        skpo_rec_set_f32s(&b->r[which[k]], field, lp + o, n);
        o += n;
        free(bufs[k]);
    }
    for (size_t i = 0; i < b->n; i++) {
        if (skpo_writer_put(w, &b->r[i], &err)) skpo_die("%s", err.msg);
        skpo_rec_clear(&b->r[i]);
    }
    if (skpo_writer_flush(w, &err)) skpo_die("%s", err.msg);
    b->n = 0;
    b->tokens = 0;
    free(seqs); free(bufs); free(which); free(lp);
}

static void score_stream(skpo_model *m, skpo_reader *rd, skpo_writer *w, const char *field, float temp, long max_tok) {
    batch b = {0};
    skpo_err err = {0};
    for (;;) {
        if (b.n == b.cap) {
            size_t old = b.cap;
            skpo_xgrow((void **)&b.r, &b.cap, b.n + 1, sizeof *b.r);
            for (size_t i = old; i < b.cap; i++) skpo_rec_init(&b.r[i]);
        }
        skpo_status s = skpo_reader_next(rd, &b.r[b.n], &err);
        if (s == SKPO_EOF) break;
        if (s || skpo_rec_check_needs(&b.r[b.n], "skpo-score", NULL, skpo_reader_name(rd), skpo_reader_count(rd), &err))
            skpo_die("%s", err.msg);
        size_t np = 0, nt = 0;
        skpo_rec_i32s(&b.r[b.n], F_PROMPT, &np);
        skpo_rec_i32s(&b.r[b.n], F_TOKENS, &nt);
        b.tokens += (long)(np + nt);
        b.n++;
        if (b.tokens >= max_tok || b.n >= 256) flush_batch(m, &b, field, temp, w, skpo_reader_name(rd));
    }
    flush_batch(m, &b, field, temp, w, skpo_reader_name(rd));
    for (size_t i = 0; i < b.cap; i++) skpo_rec_free(&b.r[i]);
    free(b.r);
}

int main(int argc, char **argv) {
    const char *dir = NULL, *field = F_REF_LOGP, *adapter = NULL;
    int device = -1;   // skpo_devices; -1 = $SKPO_DEVICE, else cuda when visible
    double temp = 1.0;
    long max_tok = 8192, threads = 0;
    int no_pack = 0;
    skpo_opt opts[] = {
        SKPO_OPT_STR("model", 'm', &dir, "DIR", "checkpoint folder (config.json + safetensors)"),
        SKPO_OPT_STR("field", 0, &field, "NAME", "output field (default ref_logp)"),
        SKPO_OPT_DOUBLE("temperature", 't', &temp, 1e-6, 1e6, "T", "score softmax(logits / T) (default 1)"),
        SKPO_OPT_LONG("batch-tokens", 0, &max_tok, 1, 1L << 30, "N", "tokens per scoring batch (default 8192)"),
        SKPO_OPT_LONG("threads", 0, &threads, 0, 4096, "N", "CPU threads (default: all)"),
        SKPO_OPT_ENUM("device", 0, &device, &skpo_devices, "compute device (default: cuda when a GPU is visible)"),
        SKPO_OPT_STR("adapter", 0, &adapter, "DIR", "LoRA adapter (PEFT folder) merged into --model at load"),
        SKPO_OPT_FLAG("no-pack", 0, &no_pack, "score a shared prompt once per record (default: once per batch)"),
        {0},
    };
    const char *input = skpo_cli_parse_input(SYN, ABOUT, opts, argc, argv, "-");
    if (!dir) skpo_cli_usage_error(SYN, "--model is required");
    if (!*field) skpo_cli_usage_error(SYN, "--field must not be empty");
    skpo_err err = {0};
    skpo_model *m;
    skpo_model_opts mo = {.threads = (int)threads};
    if (skpo_device_parse(skpo_enum_name(&skpo_devices, device), &mo.device, &err) || skpo_lora_model_load(dir, adapter, &mo, 1, &m, NULL, &err))
        skpo_die("%s", err.msg);
    skpo_model_set_pack(m, !no_pack);   // records of one prompt in a batch share its forward (docs/model.md)
    skpo_reader *rd;
    skpo_writer *w;
    if (skpo_reader_open(input, &rd, &err) || skpo_writer_open_fd(1, 0, &w, &err))
        skpo_die("%s", err.msg);
    skpo_rec extra;
    skpo_rec_init(&extra);
    skpo_rec_set_str(&extra, "model", dir);
    if (adapter) skpo_rec_set_str(&extra, "adapter", adapter);
    if (skpo_writer_meta(w, argc, argv, &extra, &err)) skpo_die("%s", err.msg);
    skpo_rec_free(&extra);
    double tc = skpo_now(), cc = skpo_cpu_seconds();
    score_stream(m, rd, w, field, (float)temp, max_tok);
    skpo_timing_report(skpo_now() - tc, cc);
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
    skpo_reader_close(rd);
    skpo_model_free(m);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}
