/*
 * bench_decode.c - decode tokens/s of a Qwen2.5-shaped model (random weights)
 * on the GPU at batch 1, 8, 64, 256, as a fraction of the HBM roofline.
 *
 * Each batch: B sequences get a 512-token prompt (prefilled, not timed), then
 * 128 decode steps of one token per sequence through skpo_model_step are
 * timed (after 2 warm-up steps). Roofline: every step must read the bf16
 * weights once plus the KV of every sequence at its length; those bytes over
 * the device copy bandwidth measured in the same run (read + write counted)
 * give the fastest possible step. frac = roofline time / measured time.
 * The logits of each step come back to the host (skpo_model_step's contract),
 * which the roofline does not count: at batch 256 that is 156 MB per step.
 * Usage: bench_decode [0.5b|1.5b]
 */
#include "gpu_bench.h"
#include "kvcache.h"

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
    float *logits = skpo_xmalloc((size_t)B * V * sizeof *logits);
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
        ok = skpo_model_step(m, kv, seq, B, toks, off, logits, &e) == SKPO_OK;
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
               "gb_step=%.2f (logits to host)\n",
               model, B, (double)B * GEN / t, roof / t, 1e3 * t / GEN, 1e3 * roof / GEN, bytes / GEN / 1e9);
    }
    fflush(stdout);
    for (int i = 0; i < B; i++) skpo_kv_seq_free(kv, seq[i]);
    skpo_kv_free(kv);
    free(seq); free(off); free(toks); free(logits);
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
    for (int i = 0; i < 4; i++) ok &= run_batch(m, &c, model, batches[i], copy_bps);
    skpo_model_free(m);
    return ok ? 0 : 1;
}
#endif
