// b_pack.c - the update (skpo_update_grad: forward, loss, backward of one
// mini-batch) on a GRPO step's and an SKPO step's records, packed against
// unpacked (model/pack.h), same model, same records, same thread count, CPU.
// Prints per step kind: raw and packed tokens, their ratio, the time of each
// (best of REPS, wall and process CPU time), the time ratios and how far they are from the token ratio, and
// the ratio a FLOP count predicts (projections and MLP per computed token,
// attention per visible key, the lm_head per scored token: packing shrinks
// the first, shrinks attention less, and leaves the head alone).
//
// GRPO: P prompts x G responses of the prompt q (shared prefix q).
// SKPO: P prompts x (1 up record [q] + s, and G downs [s, q] + a): the downs
// share [s, q] (docs/algorithm.md; at the paper's cut s is about a third of
// a trace). Usage: b_pack [threads]
#include "model/model.h"
#include "model/pack.h"
#include "train/checkpoint.h"
#include "train/update.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { L = 4, C = 384, NH = 6, NKV = 2, F = 1024, V = 2048, P = 2, G = 8, REPS = 5 };
static const char *CFG = "{\"model_type\":\"qwen2\",\"vocab_size\":2048,\"hidden_size\":384,\"intermediate_size\":1024,"
                         "\"num_hidden_layers\":4,\"num_attention_heads\":6,\"num_key_value_heads\":2,"
                         "\"max_position_embeddings\":4096,\"rope_theta\":10000.0}";

// CPU seconds of the whole process (all threads): less disturbed than wall
// time by other tenants of a shared machine, and equal to it x threads when
// the threads are kept busy.
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rs = 88172645463325252ull;
static int rnd(int n) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (int)((rs >> 33) % (uint64_t)n);
}

static void rec(skpo_rec *r, const char *kind, const char *pid, int i, const int32_t *pr, int np, int nt) {
    int32_t tk[1024];
    float lp[1024];
    for (int t = 0; t < nt; t++) tk[t] = rnd(V), lp[t] = -7.6f + 0.01f * (float)rnd(100);
    char uid[32];
    snprintf(uid, sizeof uid, "%s-%d", pid, i);
    skpo_rec_init(r);
    skpo_rec_set_str(r, F_KIND, kind);
    skpo_rec_set_str(r, F_UID, uid);
    skpo_rec_set_str(r, F_PID, pid);
    skpo_rec_set_i32s(r, F_PROMPT, pr, (size_t)np);
    skpo_rec_set_i32s(r, F_TOKENS, tk, (size_t)nt);
    skpo_rec_set_f32s(r, F_LOGP, lp, (size_t)nt);
    skpo_rec_set_float(r, F_ADV, rnd(2) ? 0.8 : -0.8);
}

// GRPO: q of 160, responses of 150..350. SKPO: q of 160, s of 100..140 (the
// up record), downs [s, q] then a of 150..350.
static size_t make_step(int skpo, skpo_rec *r) {
    size_t n = 0;
    for (int p = 0; p < P; p++) {
        char pid[16];
        snprintf(pid, sizeof pid, "q%d", p);
        int32_t q[160], sq[400];
        for (int t = 0; t < 160; t++) q[t] = rnd(V);
        if (!skpo) {
            for (int g = 0; g < G; g++) rec(&r[n++], SKPO_KIND_FULL, pid, g, q, 160, 150 + rnd(200));
            continue;
        }
        int ns = 100 + rnd(40);
        rec(&r[n], SKPO_KIND_UP, pid, 0, q, 160, ns);
        size_t nt;
        const int32_t *s = skpo_rec_i32s(&r[n++], F_TOKENS, &nt);
        memcpy(sq, s, (size_t)ns * 4);
        memcpy(sq + ns, q, sizeof q);
        for (int g = 0; g < G; g++) rec(&r[n++], SKPO_KIND_DOWN, pid, g + 1, sq, ns + 160, 150 + rnd(200));
    }
    return n;
}

// Multiply-adds of one pass over seqs (packed or not): projections and MLP
// per computed token, QK^T and PV per visible (query, key) pair, the lm_head
// per scored token. A packed continuation token sees the keys it sees
// unpacked; only the prefix's own rows, G - 1 of the G copies, go away.
static double flops(const skpo_seq *s, int n, int pack) {
    skpo_pack pk;
    skpo_pack_plan(s, n, pack, &pk);
    double KVD = (double)C / NH * NKV, tok = L * (2.0 * C * C + 2.0 * C * KVD + 3.0 * C * F), pairs = 0, scored = pk.S;
    for (int i = 0; i < n; i++) pairs += 0.5 * s[i].n * (s[i].n + 1.0);
    for (int r = 0; r < pk.nrows; r++) {
        int a = pk.row_off[r], b = pk.row_off[r + 1], pre = 0, g = 0;
        for (int t = a; t < b; t++) {
            if (pk.seg[t] == 0 && t - a == pre) pre++;
            if (pk.seg[t] > g) g = pk.seg[t];
        }
        if (g > 1) pairs -= (g - 1) * 0.5 * pre * (pre + 1.0);
    }
    double f = (double)pk.N * tok + pairs * 2.0 * C * L + scored * (double)C * V;
    skpo_pack_free(&pk);
    return f;
}

int main(int argc, char **argv) {
    if (argc > 1) omp_set_num_threads(atoi(argv[1]));
    skpo_config cfg;
    skpo_err e = {0};
    skpo_model *m;
    skpo_model_opts mo = {.trainable = 1};
    if (skpo_config_parse(CFG, strlen(CFG), &cfg, &e) || skpo_model_init_random(&cfg, &mo, 1, 0.02, &m, &e)) {
        fprintf(stderr, "b_pack: %s\n", e.msg);
        return 1;
    }
    skpo_policy pol = skpo_policy_of_model(m);
    skpo_comm *comm;
    skpo_comm_init(SKPO_COMM_LOCAL, &comm, &e);
    printf("model: L%d C%d heads %d/%d F%d V%d; %d prompts x G=%d; threads %d\n", L, C, NH, NKV, F, V, P, G,
           omp_get_max_threads());
    for (int kind = 0; kind < 2; kind++) {
        skpo_rec r[P * (G + 1)];
        size_t n = make_step(kind, r);
        skpo_update_opts o;
        skpo_update_opts_default(&o);
        o.minibatch = P;                 // one mini-batch
        o.micro_tokens = 1L << 20;       // one micro-batch: every group whole
        o.old_logp = SKPO_OLD_ROLLOUT;   // time the update's pass, not pi_old's
        double best[2] = {1e30, 1e30}, cpu[2] = {1e30, 1e30}, raw = 0, packed = 0;
        for (int rep = 0; rep < REPS; rep++)
            for (int pack = 1; pack >= 0; pack--) {
                skpo_batch *b;
                skpo_update_metrics met;
                skpo_model_set_pack(m, pack);
                if (skpo_batch_new(r, n, &o, 0, 1, &b, &e)) return fprintf(stderr, "b_pack: %s\n", e.msg), 1;
                double t0 = skpo_now(), c0 = cpu_s();
                if (skpo_update_grad(&pol, comm, b, 0, &o, &met, &e)) return fprintf(stderr, "b_pack: %s\n", e.msg), 1;
                double dt = skpo_now() - t0, dc = cpu_s() - c0;
                if (dt < best[pack]) best[pack] = dt;
                if (dc < cpu[pack]) cpu[pack] = dc;
                if (pack) raw = met.raw_tokens, packed = met.packed_tokens;
                skpo_batch_free(b);
            }
        skpo_seq s[P * (G + 1)];
        int32_t *ids[P * (G + 1)];
        for (size_t i = 0; i < n; i++) {
            size_t np, nt;
            const int32_t *pr = skpo_rec_i32s(&r[i], F_PROMPT, &np), *tk = skpo_rec_i32s(&r[i], F_TOKENS, &nt);
            ids[i] = malloc((np + nt) * 4);
            memcpy(ids[i], pr, np * 4), memcpy(ids[i] + np, tk, nt * 4);
            s[i] = (skpo_seq){ids[i], (int)(np + nt), (int)np};
        }
        double tr = best[1] / best[0], cr = cpu[1] / cpu[0], kr = packed / raw, fr = flops(s, (int)n, 1) / flops(s, (int)n, 0);
        printf("%s: raw_tokens %.0f packed_tokens %.0f token_ratio %.3f | unpacked %.2f s packed %.2f s time_ratio %.3f "
               "(%+.1f%% of the token ratio) | cpu_time_ratio %.3f (%+.1f%%) | flop_ratio %.3f\n",
               kind ? "skpo" : "grpo", raw, packed, kr, best[0], best[1], tr, 100 * (tr / kr - 1), cr, 100 * (cr / kr - 1), fr);
        for (size_t i = 0; i < n; i++) free(ids[i]), skpo_rec_free(&r[i]);
    }
    skpo_comm_free(comm);
    skpo_model_free(m);
    return 0;
}
