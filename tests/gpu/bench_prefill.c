/*
 * bench_prefill.c - prefill TFLOP/s of a Qwen2.5-shaped model (random
 * weights) on the GPU, as a fraction of the bf16 GEMM rate measured in the
 * same run (cuBLAS, 8192^3).
 *
 * One call of skpo_model_step appends 16 prompts of 1024 tokens (16384
 * tokens) to fresh KV sequences and returns the last token's logits of each;
 * median of 5 timed calls after 1 warm-up. FLOPs counted: 2 x (linear-layer
 * parameters) per token, 2 x V x C per sequence for the lm_head (only the
 * last position's logits are computed), and causal attention 2 x 2 x L x NH
 * x HS x T(T+1)/2 per sequence. One line per attention path (attn=cudnn,
 * custom: SKPO_ATTN, cuda_dnn.h), the same model and tokens.
 * Usage: bench_prefill [0.5b|1.5b]
 */
#include "gpu_bench.h"
#include "model/kvcache.h"

enum { NSEQ = 16, LEN = 1024, REPS = 5 };

#ifndef SKPO_HAVE_CUDA
int main(int argc, char **argv) {
    skpo_config c;
    const char *model;
    bench_start("prefill", argc, argv, &c, &model);
    return 0;
}
#else
int main(int argc, char **argv) {
    skpo_config c;
    const char *model;
    if (!bench_start("prefill", argc, argv, &c, &model)) return 0;
    double copy_bps, gemm_flops;
    bench_peaks(&copy_bps, &gemm_flops);
    skpo_model *m = bench_model("prefill", model, &c, 0);
    if (!m) return 0;
    skpo_err e = {0};
    int V = c.vocab_size, ok = 1;
    skpo_kv *kv = skpo_model_kv_new(m, (size_t)NSEQ * LEN + 64, NSEQ, &e);
    if (!kv) { printf("FAIL bench prefill %s: KV cache: %s\n", model, e.msg); return 1; }
    int seq[NSEQ], off[NSEQ + 1];
    int32_t *toks = skpo_xmalloc((size_t)NSEQ * LEN * sizeof *toks);
    float *logits = skpo_xmalloc((size_t)NSEQ * V * sizeof *logits);
    uint64_t r = 7;
    for (int i = 0; i < NSEQ * LEN; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; toks[i] = (int32_t)((r >> 33) % (uint64_t)V); }
    for (int i = 0; i <= NSEQ; i++) off[i] = i * LEN;
    int npaths = (int)(sizeof BENCH_ATTN_PREFILL / sizeof *BENCH_ATTN_PREFILL);
    int all_ok = ok;
    for (int pi = 0; all_ok && pi < npaths; pi++, all_ok &= ok) {   // a failing path stops the rest (state unknown)
        const char *path = BENCH_ATTN_PREFILL[pi];
        ok = 1;
        if (bench_attn_skip("prefill", model, path, m, c.head_dim)) continue;
        double t[REPS];
        for (int rep = -1; ok && rep < REPS; rep++) {
            for (int i = 0; i < NSEQ; i++) seq[i] = skpo_kv_seq_new(kv);
            bench_sync();
            double t0 = bench_now();
            ok = skpo_model_step(m, kv, seq, NSEQ, toks, off, logits, &e) == SKPO_OK;
            bench_sync();
            if (rep >= 0) t[rep] = bench_now() - t0;
            for (int i = 0; i < NSEQ; i++) skpo_kv_seq_free(kv, seq[i]);
        }
        if (!ok) {
            printf("FAIL bench prefill %s attn=%s: %s\n", model, path, e.msg);
        } else {
            double tm = bench_median(t, REPS), T = (double)NSEQ * LEN;
            double lin = bench_matmul_params(&c) - (double)V * c.hidden_size;
            double flops = 2 * lin * T + 2.0 * V * c.hidden_size * NSEQ + NSEQ * bench_attn_flops(&c, LEN);
            printf("BENCH ours prefill model=%s tokens=%d attn=%s tflops=%.1f frac=%.3f ms=%.2f tok_s=%.0f (%d x %d "
                   "tokens)\n",
                   model, NSEQ * LEN, path, flops / tm / 1e12, flops / tm / gemm_flops, 1e3 * tm, T / tm, NSEQ, LEN);
        }
        fflush(stdout);
    }
    unsetenv("SKPO_ATTN");
    skpo_kv_free(kv);
    free(toks);
    free(logits);
    skpo_model_free(m);
    return all_ok ? 0 : 1;
}
#endif
