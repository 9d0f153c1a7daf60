// The CPU backend's batch-invariant product (core/cpu/gemm_cpu.h) and its
// packed-weight entry points in ops.h: bit-identical whatever the batch, the
// row's place in it, the thread count or packing; close to a double reference.
#include "harness.h"
#include "cpu/ops.h"
#include "cpu/gemm_cpu.h"
#include "base/bf16.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *rnd(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    srand(seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    return x;
}

// Shapes that hit partial panels (O % 32), odd K and every row-tile remainder.
static const int SHAPES[][3] = {{1, 1, 1}, {3, 7, 5}, {9, 33, 31}, {17, 64, 32}, {19, 100, 77}, {8, 256, 65}, {40, 45, 200}};

static void packed_equals_unpacked_bitwise(void) {
    const skpo_ops *op = skpo_ops_cpu();
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        int N = SHAPES[s][0], K = SHAPES[s][1], O = SHAPES[s][2];
        float *a = rnd((size_t)N * K, 1), *w = rnd((size_t)O * K, 2), *b = rnd((size_t)O, 3);
        float *y1 = rnd((size_t)N * O, 4), *y2 = malloc((size_t)N * O * sizeof(float));
        memcpy(y2, y1, (size_t)N * O * sizeof(float));
        void *pk = op->pack(w, K, O);
        for (int acc = 0; acc < 2; acc++)
            for (int bias = 0; bias < 2; bias++) {
                op->matmul(y1, a, w, bias ? b : NULL, N, K, O, acc);
                op->matmul_packed(y2, a, pk, bias ? b : NULL, N, K, O, acc);
                CHECK_MSG(!memcmp(y1, y2, (size_t)N * O * sizeof(float)), "N=%d K=%d O=%d acc=%d bias=%d", N, K, O,
                          acc, bias);
            }
        op->pack_free(pk);
        free(a), free(w), free(b), free(y1), free(y2);
    }
}

// Each row computed alone (and at another place in a shuffled batch) equals
// its row of the full product, bit for bit.
static void row_does_not_depend_on_batch(void) {
    int N = 21, K = 97, O = 70;
    float *a = rnd((size_t)N * K, 5), *w = rnd((size_t)O * K, 6), *b = rnd((size_t)O, 7);
    float *all = malloc((size_t)N * O * sizeof(float)), *one = malloc((size_t)O * sizeof(float));
    float *rev = malloc((size_t)N * K * sizeof(float)), *yrev = malloc((size_t)N * O * sizeof(float));
    skpo_gemm_packed *pk = skpo_gemm_pack(w, K, O, 1);
    skpo_gemm_invariant(all, a, NULL, pk, b, N, K, O, 0);
    int same = 1;
    for (int r = 0; r < N; r++) {
        skpo_gemm_invariant(one, a + (size_t)r * K, NULL, pk, b, 1, K, O, 0);
        same &= !memcmp(one, all + (size_t)r * O, (size_t)O * sizeof(float));
        memcpy(rev + (size_t)(N - 1 - r) * K, a + (size_t)r * K, (size_t)K * sizeof(float));
    }
    CHECK(same);
    for (int n = 1; n <= N; n += 4) { // a prefix of the reversed batch
        skpo_gemm_invariant(yrev, rev, NULL, pk, b, n, K, O, 0);
        for (int i = 0; i < n; i++)
            same &= !memcmp(yrev + (size_t)i * O, all + (size_t)(N - 1 - i) * O, (size_t)O * sizeof(float));
    }
    CHECK(same);
    skpo_gemm_packed_free(pk);
    free(a), free(w), free(b), free(all), free(one), free(rev), free(yrev);
}

// Long batches go through the driver in row blocks (16 or 128 rows); a row's
// bits still do not depend on which block it lands in.
static void long_batch_rows_equal_single_rows(void) {
    int N = 301, K = 40, O = 45;
    float *a = rnd((size_t)N * K, 30), *w = rnd((size_t)O * K, 31);
    float *all = malloc((size_t)N * O * sizeof(float)), *one = malloc((size_t)O * sizeof(float));
    skpo_gemm_packed *pk = skpo_gemm_pack(w, K, O, 1);
    skpo_gemm_invariant(all, a, NULL, pk, NULL, N, K, O, 0);
    int same = 1;
    for (int r = 0; r < N; r++) {
        skpo_gemm_invariant(one, a + (size_t)r * K, NULL, pk, NULL, 1, K, O, 0);
        same &= !memcmp(one, all + (size_t)r * O, (size_t)O * sizeof(float));
    }
    CHECK(same);
    skpo_gemm_packed_free(pk);
    free(a), free(w), free(all), free(one);
}

static void thread_count_does_not_change_results(void) {
    int N = 11, K = 130, O = 300, nt = omp_get_max_threads();
    float *a = rnd((size_t)N * K, 8), *w = rnd((size_t)O * K, 9);
    float *y1 = malloc((size_t)N * O * sizeof(float)), *y3 = malloc((size_t)N * O * sizeof(float));
    omp_set_num_threads(1);
    skpo_gemm_invariant(y1, a, w, NULL, NULL, N, K, O, 0);
    omp_set_num_threads(3);
    skpo_gemm_invariant(y3, a, w, NULL, NULL, N, K, O, 0);
    omp_set_num_threads(nt);
    CHECK(!memcmp(y1, y3, (size_t)N * O * sizeof(float)));
    free(a), free(w), free(y1), free(y3);
}

// out = (acc ? out : 0) + bias + a w^T within float32 rounding of K-term sums.
static void matches_double_reference(void) {
    int N = 13, K = 515, O = 97;
    float *a = rnd((size_t)N * K, 10), *w = rnd((size_t)O * K, 11), *b = rnd((size_t)O, 12);
    float *y = rnd((size_t)N * O, 13), *y0 = malloc((size_t)N * O * sizeof(float));
    memcpy(y0, y, (size_t)N * O * sizeof(float));
    skpo_gemm_invariant(y, a, w, NULL, b, N, K, O, 1);
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = (double)y0[(size_t)n * O + o] + b[o];
            for (int k = 0; k < K; k++) s += (double)a[(size_t)n * K + k] * w[(size_t)o * K + k];
            double d = fabs(s - y[(size_t)n * O + o]);
            worst = d > worst ? d : worst;
        }
    CHECK_MSG(worst < 1e-4, "worst |err| %g", worst); // terms ~0.08, K = 515: sum error ~1e-6 typical
    free(a), free(w), free(b), free(y), free(y0);
}

static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = skpo_bf16_round(x[i]);
}

// AVX-512, AVX2 and the portable fmaf loop perform the same roundings, with
// float or bf16 panels.
static void every_kernel_gives_the_same_bits(void) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        int N = SHAPES[s][0], K = SHAPES[s][1], O = SHAPES[s][2];
        float *a = rnd((size_t)N * K, 14), *w = rnd((size_t)O * K, 15), *b = rnd((size_t)O, 16);
        float *ref = rnd((size_t)N * O, 17), *y = malloc((size_t)N * O * sizeof(float));
        float *y0 = malloc((size_t)N * O * sizeof(float));
        round_bf16(w, (size_t)O * K);
        memcpy(y0, ref, (size_t)N * O * sizeof(float));
        skpo_gemm_invariant(ref, a, w, NULL, b, N, K, O, 1);
        for (int isa = 0; isa < 3; isa++)
            for (int bf = 0; bf < 2; bf++) {
                memcpy(y, y0, (size_t)N * O * sizeof(float));
                if (!skpo_gemm_invariant_isa(isa, bf, y, a, w, b, N, K, O, 1)) continue;
                CHECK_MSG(!memcmp(y, ref, (size_t)N * O * sizeof(float)), "isa %d bf16 %d, N=%d K=%d O=%d", isa, bf, N,
                          K, O);
            }
        free(a), free(w), free(b), free(ref), free(y), free(y0);
    }
}

// Weights that are bf16 values are packed as bf16 (half the bytes) and give
// the float panels' bits; other weights stay float.
static void bf16_weights_pack_to_bf16_with_the_same_results(void) {
    int N = 37, K = 200, O = 90;
    float *a = rnd((size_t)N * K, 18), *w = rnd((size_t)O * K, 19);
    float *y1 = malloc((size_t)N * O * sizeof(float)), *y2 = malloc((size_t)N * O * sizeof(float));
    skpo_gemm_packed *f = skpo_gemm_pack(w, K, O, 1);
    CHECK(!f->bf16);
    skpo_gemm_packed_free(f);
    round_bf16(w, (size_t)O * K);
    skpo_gemm_packed *p16 = skpo_gemm_pack(w, K, O, 1), *p32 = skpo_gemm_pack(w, K, O, 0);
    CHECK(p16->bf16 && !p32->bf16);
    skpo_gemm_invariant(y1, a, NULL, p16, NULL, N, K, O, 0);
    skpo_gemm_invariant(y2, a, NULL, p32, NULL, N, K, O, 0);
    CHECK(!memcmp(y1, y2, (size_t)N * O * sizeof(float)));
    skpo_gemm_packed_free(p16);
    skpo_gemm_packed_free(p32);
    free(a), free(w), free(y1), free(y2);
}

// The backward's products: din += dout @ w (a transposed packing) and
// dw += dout^T @ in (skpo_gemm_tn, tokens in blocks), against doubles.
static void backward_products_match_double_reference(void) {
    const int SH[][3] = {{5, 33, 17}, {64, 70, 45}, {700, 40, 33}};
    for (size_t s = 0; s < sizeof SH / sizeof *SH; s++) {
        int N = SH[s][0], K = SH[s][1], O = SH[s][2];
        float *in = rnd((size_t)N * K, 20), *w = rnd((size_t)O * K, 21), *dout = rnd((size_t)N * O, 22);
        float *din = rnd((size_t)N * K, 23), *dw = rnd((size_t)O * K, 24);
        float *din0 = malloc((size_t)N * K * sizeof(float)), *dw0 = malloc((size_t)O * K * sizeof(float));
        memcpy(din0, din, (size_t)N * K * sizeof(float));
        memcpy(dw0, dw, (size_t)O * K * sizeof(float));
        skpo_gemm_packed *wt = skpo_gemm_pack_t(w, O, K, 0);
        skpo_gemm_invariant(din, dout, NULL, wt, NULL, N, O, K, 1);
        skpo_gemm_packed_free(wt);
        skpo_gemm_tn(dw, dout, in, N, K, O);
        double e1 = 0, e2 = 0;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double t = din0[(size_t)n * K + k];
                for (int o = 0; o < O; o++) t += (double)dout[(size_t)n * O + o] * w[(size_t)o * K + k];
                e1 = fmax(e1, fabs(t - din[(size_t)n * K + k]));
            }
        for (int o = 0; o < O; o++)
            for (int k = 0; k < K; k++) {
                double t = dw0[(size_t)o * K + k];
                for (int n = 0; n < N; n++) t += (double)dout[(size_t)n * O + o] * in[(size_t)n * K + k];
                e2 = fmax(e2, fabs(t - dw[(size_t)o * K + k]));
            }
        CHECK_MSG(e1 < 1e-4 && e2 < 1e-4, "N=%d K=%d O=%d: din err %g, dw err %g", N, K, O, e1, e2);
        free(in), free(w), free(dout), free(din), free(dw), free(din0), free(dw0);
    }
}

int main(void) {
    RUN(every_kernel_gives_the_same_bits);
    RUN(bf16_weights_pack_to_bf16_with_the_same_results);
    RUN(backward_products_match_double_reference);
    RUN(packed_equals_unpacked_bitwise);
    RUN(row_does_not_depend_on_batch);
    RUN(long_batch_rows_equal_single_rows);
    RUN(thread_count_does_not_change_results);
    RUN(matches_double_reference);
    return TEST_SUMMARY();
}
