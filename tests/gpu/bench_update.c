/*
 * bench_update.c - training tokens/s and MFU of a Qwen2.5-shaped model
 * (random weights) on the GPU through the training path: one step =
 * skpo_model_train_forward (log-probs of every token after the first) +
 * skpo_model_train_backward (dL/dlogp = -1/N: mean NLL) + the optimizer.
 *
 * Batch: 8 sequences x 1024 tokens (8192 tokens); median of 5 timed steps
 * after 1 warm-up. MFU = model FLOPs / time / bf16 GEMM rate measured in the
 * same run: 6 x (linear-layer parameters) per token, 6 x V x C per scored
 * token (lm_head), 3 x the causal attention forward FLOPs per sequence.
 * Recomputation (if any) is not counted as model FLOPs. One line per
 * attention path (attn=cudnn, flash, custom: SKPO_ATTN, cuda_dnn.h), the same
 * model, batch and optimizer (the weights move a little between paths).
 * Usage: bench_update [0.5b|1.5b]
 */
#include "gpu_bench.h"
#include "train/optim.h"

enum { NSEQ = 8, LEN = 1024, REPS = 5 };

#ifndef SKPO_HAVE_CUDA
int main(int argc, char **argv) {
    skpo_config c;
    const char *model;
    bench_start("update", argc, argv, &c, &model);
    return 0;
}
#else
#include "gpu_update_step.h"

int main(int argc, char **argv) {
    skpo_config c;
    const char *model;
    if (!bench_start("update", argc, argv, &c, &model)) return 0;
    double copy_bps, gemm_flops;
    bench_peaks(&copy_bps, &gemm_flops);
    skpo_model *m = bench_model("update", model, &c, 1);
    if (!m) return 0;
    skpo_err e = {0};
    int V = c.vocab_size, ok = 1, nscored = NSEQ * (LEN - 1);
    int32_t *ids = skpo_xmalloc((size_t)NSEQ * LEN * sizeof *ids);
    uint64_t r = 9;
    for (int i = 0; i < NSEQ * LEN; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((r >> 33) % (uint64_t)V); }
    skpo_seq seqs[NSEQ];
    for (int i = 0; i < NSEQ; i++) seqs[i] = (skpo_seq){.ids = ids + (size_t)i * LEN, .n = LEN, .start = 1};
    float *logp = skpo_xmalloc((size_t)nscored * sizeof *logp), *dlogp = skpo_xmalloc((size_t)nscored * sizeof *dlogp);
    for (int i = 0; i < nscored; i++) dlogp[i] = -1.0f / nscored;
    bench_opt opt;
    const char *opt_what = NULL;
    ok = bench_opt_new(m, &opt, &opt_what, &e);
    int npaths = (int)(sizeof BENCH_ATTN_TRAIN / sizeof *BENCH_ATTN_TRAIN);
    int all_ok = ok;
    for (int pi = 0; all_ok && pi < npaths; pi++, all_ok &= ok) {   // a failing path stops the rest (state unknown)
        const char *path = BENCH_ATTN_TRAIN[pi];
        ok = 1;
        if (bench_attn_skip("update", model, path, m, c.head_dim)) continue;
        double t[REPS], tf[REPS], tb[REPS];
        for (int rep = -1; ok && rep < REPS; rep++) {
            bench_sync();
            double t0 = bench_now();
            skpo_model_zero_grad(m);
            ok = skpo_model_train_forward(m, seqs, NSEQ, 1.0f, logp, NULL, &e) == SKPO_OK;
            bench_sync();
            double t1 = bench_now();
            ok = ok && skpo_model_train_backward(m, dlogp, NULL, &e) == SKPO_OK;
            bench_sync();
            double t2 = bench_now();
            ok = ok && bench_opt_step(m, &opt, &e);
            bench_sync();
            if (rep >= 0) { t[rep] = bench_now() - t0; tf[rep] = t1 - t0; tb[rep] = t2 - t1; }
        }
        if (ok) {
            for (int i = 0; i < nscored; i++) ok &= isfinite(logp[i]);
            if (!ok) snprintf(e.msg, sizeof e.msg, "non-finite log-prob");
        }
        if (!ok) {
            printf("FAIL bench update %s attn=%s: %s\n", model, path, e.msg);
        } else {
            double tm = bench_median(t, REPS), tfm = bench_median(tf, REPS), tbm = bench_median(tb, REPS);
            double T = (double)NSEQ * LEN;
            double lin = bench_matmul_params(&c) - (double)V * c.hidden_size;
            double flops = 6 * lin * T + 6.0 * V * c.hidden_size * nscored + 3 * NSEQ * bench_attn_flops(&c, LEN);
            printf("BENCH ours update model=%s tokens=%d attn=%s tok_s=%.0f mfu=%.3f ms=%.1f fwd_ms=%.1f bwd_ms=%.1f "
                   "tflops=%.1f (%d x %d tokens; optimizer: %s)\n",
                   model, NSEQ * LEN, path, T / tm, flops / tm / gemm_flops, 1e3 * tm, 1e3 * tfm, 1e3 * tbm,
                   flops / tm / 1e12, NSEQ, LEN, opt_what);
        }
        fflush(stdout);
    }
    unsetenv("SKPO_ATTN");
    bench_opt_free(&opt);
    free(ids); free(logp); free(dlogp);
    skpo_model_free(m);
    return all_ok ? 0 : 1;
}
#endif
