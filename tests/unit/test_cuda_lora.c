// test_cuda_lora.c - LoRA training on the GPU (core/lora_cuda.c through
// model_cuda_train.c's hooks) against the CPU path (itself checked against
// PEFT and finite differences in test_lora.c): log-probs of a frozen base
// with an attached adapter, and the gradient of every adapter tensor.
// Tolerances as test_cuda_train.c (bf16 weights and activations): log-probs
// |gpu - cpu| <= 5e-2 (1 + |cpu|); per adapter tensor cosine > 0.99 and
// relative L2 error < 8e-2. Also: no base gradients exist on either device.
// Without nvcc or a GPU every test prints a visible SKIP line; tests/emu/run.sh
// test_cuda_lora runs it on the CPU emulator of the CUDA runtime. Not run on
// a real GPU yet.
#include "harness.h"
#include "model/lora.h"

#include <string.h>

#ifndef SKPO_HAVE_CUDA
static void cuda_lora_training_matches_cpu(void) { SKIP("skipped: built without CUDA (no nvcc)"); }
#else
#include "cuda/cuda.h"

static const char *CFG =
    "{\"model_type\":\"qwen2\",\"vocab_size\":300,\"hidden_size\":128,\"intermediate_size\":256,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":256,"
    "\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,\"tie_word_embeddings\":false}";

static void round_bf16(float *x, size_t n) {
    skpo_bf16 *b = skpo_xmalloc(n * 2);
    skpo_f32_to_bf16_host(b, x, n);
    skpo_bf16_to_f32_host(x, b, n);
    free(b);
}

// The same frozen random base on dev (weights bf16-rounded so both devices see the same numbers).
static skpo_model *base(skpo_device dev) {
    skpo_config c;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_config_parse(CFG, strlen(CFG), &c, &e) == SKPO_OK);
    skpo_model *m = NULL;
    skpo_model_opts o = {SKPO_DEV_CPU, 0, 0};
    if (skpo_model_init_random(&c, &o, 7, 0.1, &m, &e)) return NULL;
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    for (int i = 0; i < np; i++) round_bf16(p[i].data, p[i].numel);
    if (dev == SKPO_DEV_CPU) return m;
    // Same weights on the device: save and reload on cuda.
    char d[] = "/tmp/skpo_cuda_lora_XXXXXX";
    if (!mkdtemp(d) || skpo_model_save(m, d, SKPO_DT_F32, 0, &e)) return NULL;
    skpo_model_free(m);
    o.device = SKPO_DEV_CUDA;
    skpo_status s = skpo_model_load(d, &o, &m, &e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) || s) {
        fprintf(stderr, "  load on cuda: %s\n", e.msg);
        return NULL;
    }
    return m;
}

static skpo_lora *adapter(skpo_model *m) {
    skpo_lora_cfg c;
    skpo_lora_cfg_default(&c);
    c.rank = 4;
    c.alpha = 8;
    c.seed = 3;
    skpo_lora *lo = NULL;
    skpo_err e = {0};
    if (skpo_lora_new(skpo_model_config(m), &c, 1, &lo, &e)) return NULL;
    skpo_param *p;
    int np = skpo_lora_params(lo, &p);
    for (int i = 1; i < np; i += 2)   // B != 0: A's gradients and the path's output matter
        for (size_t k = 0; k < p[i].numel; k++) p[i].data[k] = (float)(0.05 * sin(0.37 * (double)(k + 11 * i)));
    return lo;
}

static void cuda_lora_training_matches_cpu(void) {
    if (skpo_cuda_device_count() <= 0) SKIP("skipped: no GPU");
    skpo_model *mc = base(SKPO_DEV_CPU), *mg = base(SKPO_DEV_CUDA);
    CHECK(mc && mg);
    if (!mc || !mg) return;
    skpo_lora *lc = adapter(mc), *lg = adapter(mg);
    skpo_err e = {0};
    CHECK(skpo_lora_attach(mc, lc, &e) == SKPO_OK);
    CHECK_MSG(skpo_lora_attach(mg, lg, &e) == SKPO_OK, "%s", e.msg);
    int32_t ids[2][40];
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 40; t++) ids[i][t] = (int32_t)((37 * t + 101 * i + 5) % 300);
    skpo_seq s[2] = {{ids[0], 40, 10}, {ids[1], 27, 6}};
    int S = 30 + 21;
    float lpc[64], lpg[64], w[64];
    for (int i = 0; i < S; i++) w[i] = (float)(0.5 + 0.3 * cos(i));
    skpo_lora_zero_grad(lc);
    skpo_lora_zero_grad(lg);
    CHECK(skpo_model_train_forward(mc, s, 2, 1.0f, lpc, NULL, &e) == SKPO_OK);
    CHECK(skpo_model_train_backward(mc, w, NULL, &e) == SKPO_OK);
    CHECK_MSG(skpo_model_train_forward(mg, s, 2, 1.0f, lpg, NULL, &e) == SKPO_OK, "%s", e.msg);
    CHECK_MSG(skpo_model_train_backward(mg, w, NULL, &e) == SKPO_OK, "%s", e.msg);
    double worst = 0;
    for (int i = 0; i < S; i++) worst = fmax(worst, fabs(lpg[i] - lpc[i]) / (1 + fabs(lpc[i])));
    CHECK_MSG(worst <= 5e-2, "log-prob worst relative error %g", worst);
    skpo_param *pc, *pg;
    int n = skpo_lora_params(lc, &pc);
    CHECK(skpo_lora_params(lg, &pg) == n);
    double cmin = 1, rmax = 0;
    for (int i = 0; i < n; i++) {
        double dot = 0, a2 = 0, b2 = 0, d2 = 0;
        for (size_t k = 0; k < pc[i].numel; k++) {
            double a = pc[i].grad[k], b = pg[i].grad[k];
            dot += a * b, a2 += a * a, b2 += b * b, d2 += (a - b) * (a - b);
        }
        double cs = dot / sqrt(a2 * b2 + 1e-300), rel = sqrt(d2 / (a2 + 1e-300));
        if (cs < 0.99 || rel >= 8e-2) fprintf(stderr, "  %s: cosine %.5f relative %.4f\n", pc[i].name, cs, rel);
        cmin = fmin(cmin, cs), rmax = fmax(rmax, rel);
    }
    CHECK_MSG(cmin > 0.99 && rmax < 8e-2, "adapter gradients: worst cosine %g, worst relative L2 %g", cmin, rmax);
    skpo_dev_params d;
    CHECK(skpo_model_dev_params(mg, &d, &e) != SKPO_OK);   // the frozen base has no device gradients
    skpo_model_free(mc);
    skpo_model_free(mg);
    skpo_lora_free(lc);
    skpo_lora_free(lg);
}
#endif

int main(void) {
    RUN(cuda_lora_training_matches_cpu);
    return TEST_SUMMARY();
}
