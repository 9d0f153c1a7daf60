/*
 * bench_decode.c - decode tokens/s of a Qwen2.5-shaped model (random weights)
 * on the GPU at batch 1, 8, 64, 256, as a fraction of the HBM roofline.
 *
 * Each batch: B sequences get a 512-token prompt (prefilled, not timed), then
 * 128 decode steps of one token per sequence through skpo_model_step are
 * timed (after 2 warm-up steps) through skpo_model_step_dev: the logits stay
 * on the device, as when the engine samples there. Roofline: every step must
 * read the bf16 weights once plus the KV of every sequence at its length;
 * those bytes over the device copy bandwidth measured in the same run (read +
 * write counted) give the fastest possible step. frac = roofline time /
 * measured time. The device sampler's time for the same batch (skpo_cuda_sample,
 * T = 1, top-p 0.95, V = 151936) is printed as an INFO line beside it: the
 * engine adds it to each step. Last, the whole engine at batch 64 (one prompt,
 * 64 samples of 128 tokens, shared prefix) with device and with host sampling:
 * `INFO engine ... sampling=device|host tok_s=...`, what the device sampler
 * (generate.h, skpo_gen_dev) saves.
 * Usage: bench_decode [0.5b|1.5b]
 */
#include "gpu_bench.h"
#include "gen/generate.h"
#include "model/kvcache.h"
#ifdef SKPO_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <stdlib.h>

enum { PROMPT = 512, GEN = 128, WARM = 2, PREFILL_TOKENS = 16384 };

#ifndef SKPO_HAVE_CUDA
int main(int argc, char **argv) {
    skpo_config c;
    const char *model;
    bench_start("decode", argc, argv, &c, &model);
    return 0;
}
#else
static int run_batch(skpo_model *m, const skpo_config *c, const char *model, int B, double copy_bps) {
    skpo_err e = {0};
    int V = c->vocab_size;
    skpo_kv *kv = skpo_model_kv_new(m, (size_t)B * (PROMPT + GEN + WARM + 16), B, &e);
    if (!kv) { printf("FAIL bench decode %s batch=%d: KV cache: %s\n", model, B, e.msg); return 0; }
    int *seq = skpo_xmalloc((size_t)B * sizeof *seq), *off = skpo_xmalloc((size_t)(B + 1) * sizeof *off);
    int32_t *toks = skpo_xmalloc((size_t)B * PROMPT * sizeof *toks);
    float *logits = skpo_xmalloc((size_t)B * V * sizeof *logits); // prefill rows (host logits)
    for (int i = 0; i < B; i++) seq[i] = skpo_kv_seq_new(kv);
    uint64_t r = 42;
    for (int i = 0; i < B * PROMPT; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; toks[i] = (int32_t)((r >> 33) % (uint64_t)V); }
    int ok = 1;
    // prefill in calls of at most PREFILL_TOKENS tokens
    int per = PREFILL_TOKENS / PROMPT > 0 ? PREFILL_TOKENS / PROMPT : 1;
    for (int s0 = 0; ok && s0 < B; s0 += per) {
        int n = B - s0 < per ? B - s0 : per;
        for (int i = 0; i <= n; i++) off[i] = i * PROMPT;
        ok = skpo_model_step(m, kv, seq + s0, n, toks + (size_t)s0 * PROMPT, off, logits, &e) == SKPO_OK;
    }
    for (int i = 0; i <= B; i++) off[i] = i;
    double t0 = 0;
    for (int step = 0; ok && step < WARM + GEN; step++) {
        if (step == WARM) { bench_sync(); t0 = bench_now(); }
        for (int i = 0; i < B; i++) toks[i] = (int32_t)((toks[i] * 7 + step + 1) % V);
        const float *dlog;
        ok = skpo_model_step_dev(m, kv, seq, B, toks, off, &dlog, &e) == SKPO_OK;
    }
    if (ok) bench_sync();
    double t = bench_now() - t0;
    if (!ok) {
        printf("FAIL bench decode %s batch=%d: %s\n", model, B, e.msg);
    } else {
        // KV read over the timed steps: sequence length PROMPT + WARM + k + 1 at step k
        double kv_pos = 0;
        for (int k = 0; k < GEN; k++) kv_pos += (double)B * (PROMPT + WARM + k + 1);
        double bytes = GEN * bench_weight_bytes(c) + kv_pos * bench_kv_bytes_per_pos(c);
        double roof = bytes / copy_bps;
        printf("BENCH ours decode model=%s batch=%d tok_s=%.1f frac=%.3f ms_step=%.3f roofline_ms=%.3f "
               "gb_step=%.2f (logits stay on the device)\n",
               model, B, (double)B * GEN / t, roof / t, 1e3 * t / GEN, 1e3 * roof / GEN, bytes / GEN / 1e9);
    }
    fflush(stdout);
    for (int i = 0; i < B; i++) skpo_kv_seq_free(kv, seq[i]);
    skpo_kv_free(kv);
    free(seq); free(off); free(toks); free(logits);
    return ok;
}

typedef struct sample_run {
    skpo_cuda *cu;
    int32_t *tok;
    float *lp, *logits, *coin;
    int B, V;
} sample_run;
static void sample_once(void *p) {
    sample_run *r = p;
    skpo_err e = {0};
    if (skpo_cuda_sample(r->cu, r->tok, r->lp, r->logits, r->B, r->V, 1.0f, 0, 0.95f, r->coin, &e) != SKPO_OK) {
        fprintf(stderr, "skpo_cuda_sample: %s\n", e.msg);
        exit(1);
    }
    if (skpo_cuda_sync(r->cu, &e) != SKPO_OK) { fprintf(stderr, "sync: %s\n", e.msg); exit(1); }
}
// Time of the device sampler for B rows of random logits (the engine's per-step cost).
static void bench_sampler(int B, int V) {
    sample_run r = {.B = B, .V = V};
    skpo_err e = {0};
    if (skpo_cuda_init(0, &r.cu, &e) != SKPO_OK) { fprintf(stderr, "cuda init: %s\n", e.msg); exit(1); }
    BENCH_CU(cudaMalloc((void **)&r.logits, (size_t)B * V * 4));
    BENCH_CU(cudaMalloc((void **)&r.coin, (size_t)B * 4));
    BENCH_CU(cudaMalloc((void **)&r.tok, (size_t)B * 4));
    BENCH_CU(cudaMalloc((void **)&r.lp, (size_t)B * 4));
    float *h = skpo_xmalloc((size_t)B * V * 4);
    uint64_t x = 99;
    for (size_t i = 0; i < (size_t)B * V; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; h[i] = (float)((x >> 40) * (8.0 / 16777216.0)) - 4.f; }
    bench_h2d(r.logits, h, (size_t)B * V * 4);
    for (int i = 0; i < B; i++) h[i] = (float)(i + 0.5) / B;
    bench_h2d(r.coin, h, (size_t)B * 4);
    // the context's stream does not order with stream 0: time on the host around a sync
    double ts[10];
    for (int i = 0; i < 12; i++) {
        double t0 = bench_now();
        sample_once(&r);
        if (i >= 2) ts[i - 2] = bench_now() - t0;
    }
    double t = bench_median(ts, 10);
    printf("INFO sampler batch=%d ms=%.3f (skpo_cuda_sample, T=1, top_p=0.95, V=%d)\n", B, 1e3 * t, V);
    fflush(stdout);
    skpo_cuda_free_ctx(r.cu);
    cudaFree(r.logits); cudaFree(r.coin); cudaFree(r.tok); cudaFree(r.lp);
    free(h);
}

// The whole engine (generate.h) at batch B: one 512-token prompt, B samples
// (shared prefix), 128 tokens each at temperature 1, sampled on the device
// (skpo_gen_dev) or on the host (logits copied back, CPU sampler). Prints
// tokens/s of each: what skpo-sample sees, prefill of the prompt included.
static int bench_engine(skpo_model *m, const skpo_config *c, const char *model, int B, int on_device) {
    skpo_err e = {0};
    skpo_kv *kv = skpo_model_kv_new(m, (size_t)(B + 2) * (PROMPT + GEN + 16), 2 * B + 1, &e);
    skpo_gen_dev *dev = on_device ? skpo_gen_dev_new(m, B, &e) : NULL;
    if (!kv || (on_device && !dev)) {
        printf("FAIL bench engine %s batch=%d: %s\n", model, B, e.msg);
        skpo_kv_free(kv);
        return 0;
    }
    int32_t eos = -1, *prompt = skpo_xmalloc(PROMPT * sizeof *prompt);
    for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    uint64_t *seeds = skpo_xmalloc((size_t)B * sizeof *seeds);
    for (int i = 0; i < B; i++) seeds[i] = 1000 + (uint64_t)i;
    skpo_gen_opts o = {.step = skpo_gen_model_step, .step_ctx = m, .kv = kv, .vocab = c->vocab_size, .max_batch = B,
                       .step_tokens = 4096, .share_prefix = 1, .ctx_limit = c->max_position_embeddings,
                       .sample = {1.0, 1.0, 0}, .eos = &eos, .n_eos = 1, .dev = dev};
    skpo_gen *g = skpo_gen_new(&o);
    skpo_gen_req q = {.prompt = prompt, .n_prompt = PROMPT, .n = B, .max_new = GEN, .seeds = seeds};
    int ok = skpo_gen_submit(g, &q, &e) == SKPO_OK;
    bench_sync();
    double t0 = bench_now();
    ok = ok && skpo_gen_run(g, &e) == SKPO_OK;
    double t = bench_now() - t0;
    skpo_gen_group *gr = ok ? skpo_gen_pop(g) : NULL;
    long ntok = 0;
    for (int i = 0; gr && i < gr->n; i++) ntok += gr->s[i].n;
    if (ok)
        printf("INFO engine model=%s batch=%d sampling=%s tok_s=%.1f (%ld tokens in %.2fs, one %d-token prompt "
               "prefilled once)\n", model, B, on_device ? "device" : "host", ntok / t, ntok, t, PROMPT);
    else
        printf("FAIL bench engine %s batch=%d sampling=%s: %s\n", model, B, on_device ? "device" : "host", e.msg);
    fflush(stdout);
    skpo_gen_group_free(gr);
    skpo_gen_free(g);
    skpo_gen_dev_free(dev);
    skpo_kv_free(kv);
    free(prompt);
    free(seeds);
    return ok;
}

int main(int argc, char **argv) {
    skpo_config c;
    const char *model;
    if (!bench_start("decode", argc, argv, &c, &model)) return 0;
    double copy_bps, gemm_flops;
    bench_peaks(&copy_bps, &gemm_flops);
    skpo_model *m = bench_model("decode", model, &c, 0);
    if (!m) return 0;
    static const int batches[] = {1, 8, 64, 256};
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        ok &= run_batch(m, &c, model, batches[i], copy_bps);
        bench_sampler(batches[i], c.vocab_size);
    }
    for (int dev = 1; dev >= 0; dev--) ok &= bench_engine(m, &c, model, 64, dev);
    skpo_model_free(m);
    return ok ? 0 : 1;
}
#endif
