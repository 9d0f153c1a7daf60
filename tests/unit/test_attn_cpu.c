// The CPU forward attention (core/cpu/attn_cpu.h): several query rows at once
// (the whole-sequence pass of scoring and training) give the bits of one row
// at a time (decode), for every head size the AVX-512 path takes and one it
// does not, with and without a prefix span, at every count of rows and at key
// counts on and off the 16-key groups; and both are close to a double
// reference (rel. 1e-5).
#include "harness.h"
#include "cpu/attn_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *rnd(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    srand(seed);
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * ((float)rand() / RAND_MAX - 0.5f);
    return x;
}

// Row o of head size HS over the keys of sp[], in double.
static void reference(double *o, const float *q, const skpo_kv_span *sp, int nsp, int HS, double scale) {
    double mx = -INFINITY, sum = 0, *z = malloc(4096 * sizeof *z);
    int n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++) {
            double d = 0;
            for (int i = 0; i < HS; i++) d += (double)q[i] * sp[s].k[(size_t)j * sp[s].stride + i];
            z[n] = d * scale;
            if (z[n] > mx) mx = z[n];
        }
    for (int j = 0; j < n; j++) sum += (z[j] = exp(z[j] - mx));
    memset(o, 0, (size_t)HS * sizeof *o);
    n = 0;
    for (int s = 0; s < nsp; s++)
        for (int j = 0; j < sp[s].n; j++, n++)
            for (int i = 0; i < HS; i++) o[i] += z[n] / sum * sp[s].v[(size_t)j * sp[s].stride + i];
    free(z);
}

static void rows_at_once_equal_one_row_at_a_time_bit_for_bit(void) {
    static const int HSS[] = {16, 32, 48, 64, 80, 96, 128, 144, 256, 24};
    static const int PRE[] = {0, 5, 19, 37}, OWN[] = {1, 3, 16, 17, 40};
    enum { NKV = 2, T = 128, NH = 3 };
    int checked = 0, bad = 0, far = 0;
    for (size_t h = 0; h < sizeof HSS / sizeof *HSS; h++) {
        int HS = HSS[h], Rmax = skpo_attn_rows_max(HS);
        size_t ks = (size_t)NKV * HS, qs = (size_t)NH * HS;
        float *k = rnd((size_t)T * ks, 10 + h), *v = rnd((size_t)T * ks, 20 + h), *q = rnd((size_t)T * qs, 30 + h);
        memset(q + 52 * qs + HS, 0, (size_t)HS * sizeof(float)); // scores of +0 and -0 alike: ties for the max
        float *o1 = malloc(4 * HS * sizeof(float)), *o2 = malloc(4 * qs * sizeof(float)), *p = malloc(4 * T * sizeof(float));
        double *ref = malloc((size_t)HS * sizeof *ref), scale = 1.0 / sqrt((double)HS);
        for (size_t a = 0; a < sizeof PRE / sizeof *PRE; a++)
            for (size_t b = 0; b < sizeof OWN / sizeof *OWN; b++)
                for (int R = 1; R <= Rmax; R++) {
                    int pre = PRE[a], own = OWN[b], o0 = 50; // own run starts at key row 50, prefix at 0
                    skpo_kv_span sp[2];
                    int nsp = 0;
                    if (pre) sp[nsp++] = (skpo_kv_span){k + ks, v + ks, ks, pre}; // kv head 1
                    sp[nsp++] = (skpo_kv_span){k + (size_t)o0 * ks + ks, v + (size_t)o0 * ks + ks, ks, own};
                    const float *qr = q + (size_t)(o0 + own - 1) * qs + HS; // query head 1 of row o0 + own - 1
                    float lse[4];
                    skpo_attn_rows(o2, qs, qr, qs, sp, nsp, R, HS, (float)scale, p, T, lse);
                    for (int u = 0; u < R; u++, sp[nsp - 1].n++) {
                        float l = skpo_attn_row(o1, qr + (size_t)u * qs, sp, nsp, HS, (float)scale, p);
                        bad += memcmp(o1, o2 + (size_t)u * qs, (size_t)HS * sizeof(float)) != 0 ||
                               memcmp(&l, &lse[u], sizeof l) != 0;
                        reference(ref, qr + (size_t)u * qs, sp, nsp, HS, scale);
                        for (int i = 0; i < HS; i++) far += fabs(o1[i] - ref[i]) > 1e-5 * (1 + fabs(ref[i]));
                        checked++;
                    }
                    sp[nsp - 1].n = own;
                }
        free(k), free(v), free(q), free(o1), free(o2), free(p), free(ref);
    }
    printf("# %d rows checked (rows at once on this CPU: %d at head size 64)\n", checked, skpo_attn_rows_max(64));
    CHECK_MSG(bad == 0, "%d rows differ from one-row-at-a-time", bad);
    CHECK_MSG(far == 0, "%d elements off the double reference", far);
}

int main(void) {
    RUN(rows_at_once_equal_one_row_at_a_time_bit_for_bit);
    return TEST_SUMMARY();
}
