// test_pack.c - the packed layout (model/pack.h): its plan, the masked
// attention against a brute-force reference of base/attn_mask.h, log-probs
// bit-identical to the unpacked pass, and skpo-update's gradient with packing
// equal to the unpacked one to 1e-6 relative for every loss form and
// aggregation (KL and entropy terms on and off), with groups split across
// micro-batches, and with pi_old recomputed through packed scoring. Two tiny
// models: head size 16 (the AVX-512 attention where the CPU has it) and 6
// (the portable loops).
#include "harness.h"
#include "base/attn_mask.h"
#include "cpu/ops.h"
#include "model/pack.h"
#include "train/checkpoint.h"
#include "train/update.h"

#include <stdint.h>

static const char *CFG16 = "{\"model_type\":\"qwen2\",\"vocab_size\":23,\"hidden_size\":32,\"intermediate_size\":40,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
                           "\"rope_theta\":100.0}";
static const char *CFG6 = "{\"model_type\":\"llama\",\"vocab_size\":19,\"hidden_size\":12,\"intermediate_size\":16,"
                          "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":6,"
                          "\"attention_bias\":true,\"rope_theta\":50.0}";

static skpo_model *tiny(const char *json) {
    skpo_config c;
    skpo_err e = {0};
    skpo_model *m = NULL;
    skpo_model_opts o = {.trainable = 1};
    if (skpo_config_parse(json, strlen(json), &c, &e) || skpo_model_init_random(&c, &o, 7, 0.4, &m, &e)) {
        fprintf(stderr, "  %s\n", e.msg);
        return NULL;
    }
    return m;
}

// --- the plan ------------------------------------------------------------------------------

static void plan_puts_each_prefix_once_and_keeps_scored_order(void) {
    int32_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 3, 4, 7}, c[] = {9, 9, 8}, d[] = {1, 2, 3, 4, 5, 8, 8};
    // a, b, d share the prompt 1 2 3 (start 3); a and d share 1 2 3 4 5, b only 1 2 3 4: P = 4.
    // c is alone; d joins a's group although c sits between them.
    skpo_seq s[4] = {{a, 6, 3}, {b, 5, 3}, {c, 3, 1}, {d, 7, 3}};
    skpo_pack p;
    skpo_pack_plan(s, 4, 1, &p);
    CHECK(p.nrows == 2 && p.packed && p.raw == 21);
    CHECK(p.N == 4 + 2 + 1 + 3 + 3);   // prefix 1 2 3 4, then 5 6 | 7 | 5 8 8; then c's row
    CHECK(p.row_off[0] == 0 && p.row_off[1] == 10 && p.row_off[2] == 13);
    int seg[] = {0, 0, 0, 0, 1, 1, 2, 3, 3, 3, 0, 0, 0}, pos[] = {0, 1, 2, 3, 4, 5, 4, 4, 5, 6, 0, 1, 2};
    int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 5, 8, 8, 9, 9, 8};
    for (int t = 0; t < 13; t++) CHECK(p.seg[t] == seg[t] && p.pos[t] == pos[t] && p.ids[t] == ids[t]);
    // scored tokens in sequence order: a: 4 5 6 from rows 2, 3, 4; b: 4 7 from 2, 3; c: 9 8 from 10, 11; d: 4 5 8 8
    int srow[] = {2, 3, 4, 2, 3, 10, 11, 2, 3, 7, 8};
    int32_t tgt[] = {4, 5, 6, 4, 7, 9, 8, 4, 5, 8, 8};
    CHECK(p.S == 11);
    for (int k = 0; k < 11; k++) CHECK_MSG(p.srow[k] == srow[k] && p.stgt[k] == tgt[k], "k %d: row %d", k, p.srow[k]);
    long raw, packed;
    skpo_pack_count(s, 4, 1, &raw, &packed);
    CHECK(raw == 21 && packed == 13);
    skpo_pack_free(&p);
    skpo_pack_plan(s, 4, 0, &p);   // off: today's layout
    CHECK(p.nrows == 4 && !p.packed && p.N == 21 && p.row_off[1] == 6 && p.srow[3] == 8);
    skpo_pack_free(&p);
}

static void plan_keeps_a_token_in_every_continuation(void) {
    int32_t a[] = {1, 2, 3, 4}, b[] = {1, 2, 3, 4, 5};   // a is a prefix of b
    skpo_seq s[2] = {{a, 4, 2}, {b, 5, 2}};
    skpo_pack p;
    skpo_pack_plan(s, 2, 1, &p);
    CHECK(p.nrows == 1 && p.N == 3 + 1 + 2);   // P = 3 (a keeps its last token)
    CHECK(p.seg[3] == 1 && p.seg[4] == 2 && p.pos[4] == 3 && p.pos[5] == 4);
    skpo_pack_free(&p);
}

// The update budgets a micro-batch by the tally, the pass computes the plan:
// after every sequence added, the tally's counts are the plan's (random
// batches of a few prompts, answers that sometimes start alike, prompts that
// are a prefix of another prompt, one-token continuations).
static void tally_counts_what_the_plan_computes(void) {
    srand(17);
    for (int trial = 0; trial < 200; trial++) {
        int32_t ids[16][12];
        skpo_seq s[16];
        int n = 1 + rand() % 16, pack = trial % 5 != 0;
        int32_t pr[3][6];
        for (int p = 0; p < 3; p++)
            for (int t = 0; t < 6; t++) pr[p][t] = p == 2 ? pr[0][t] : 1 + rand() % 3;   // prompt 2 runs like prompt 0
        skpo_pack_tally t;
        skpo_pack_tally_init(&t, pack);
        for (int i = 0; i < n; i++) {
            int p = rand() % 3, start = p == 2 ? 4 : 2 + p, len = start + 1 + rand() % 6;
            for (int k = 0; k < len; k++) ids[i][k] = k < start ? pr[p][k] : 1 + rand() % 2;
            s[i] = (skpo_seq){ids[i], len, start};
            skpo_pack_tally_add(&t, &s[i]);
            skpo_pack plan;
            skpo_pack_plan(s, i + 1, pack, &plan);
            CHECK_MSG(t.raw == plan.raw && t.packed == plan.N, "trial %d, %d sequences: tally %ld/%ld, plan %ld/%d", trial,
                      i + 1, t.raw, t.packed, plan.raw, plan.N);
            skpo_pack_free(&plan);
        }
        skpo_pack_tally_free(&t);
    }
}

// --- the kernels against the mask ------------------------------------------------------------

// out (NH, HS) of query r by brute force over the keys skpo_may_attend allows.
static void ref_attention(double *o, const float *q, const float *k, const float *v, const int *off, int nrows,
                          const int *seg, int r, int h, int NH, int NKV, int HS) {
    int s = 0;
    while (off[s + 1] <= r) s++;
    double sc[64], mx = -1e300, sum = 0;
    const float *qr = q + ((size_t)r * NH + h) * HS;
    int g = h / (NH / NKV), n = 0;
    for (int j = off[s]; j <= r; j++, n++) {
        sc[n] = -1e300;
        if (!skpo_may_attend(seg ? seg[r] : 0, r - off[s], seg ? seg[j] : 0, j - off[s])) continue;
        double z = 0;
        for (int d = 0; d < HS; d++) z += (double)qr[d] * k[((size_t)j * NKV + g) * HS + d];
        sc[n] = z / sqrt((double)HS);
        if (sc[n] > mx) mx = sc[n];
    }
    for (int d = 0; d < HS; d++) o[d] = 0;
    for (int j = off[s], i = 0; j <= r; j++, i++) {
        if (sc[i] < -1e299) continue;
        double w = exp(sc[i] - mx);
        sum += w;
        for (int d = 0; d < HS; d++) o[d] += w * v[((size_t)j * NKV + g) * HS + d];
    }
    for (int d = 0; d < HS; d++) o[d] /= sum;
}

// loss = sum(out * W) for a fixed random W: dq, dk, dv by central differences
// of the double reference, against the kernel's backward.
static void check_attention(int HS) {
    const skpo_ops *op = skpo_ops_cpu();
    enum { N = 87, NH = 2, NKV = 1 };
    // row 0: prefix 19, continuations 4, 33, 3 (segments and 16-key blocks cut each other at every
    // offset: blocks within one segment, one segment over several blocks); row 1: prefix 2,
    // continuation 6; row 2: a plain sequence of 20
    int off[] = {0, 59, 67, 87}, seg[N];
    int lay[][2] = {{0, 19}, {1, 4}, {2, 33}, {3, 3}, {0, 2}, {1, 6}, {0, 20}};
    for (int i = 0, t = 0; i < 7; i++)
        for (int u = 0; u < lay[i][1]; u++) seg[t++] = lay[i][0];
    size_t nq = (size_t)N * NH * HS, nk = (size_t)N * NKV * HS;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *out = malloc(nq * 4), *lse = malloc(N * NH * 4);
    float *W = malloc(nq * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    srand(11);
    for (size_t i = 0; i < nq; i++) q[i] = (float)rand() / RAND_MAX - 0.5f, W[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < nk; i++) k[i] = (float)rand() / RAND_MAX - 0.5f, v[i] = (float)rand() / RAND_MAX - 0.5f;
    op->attention(out, lse, q, k, v, off, 3, seg, NH, NKV, HS);
    double worst = 0, o[64];
    for (int r = 0; r < N; r++)
        for (int h = 0; h < NH; h++) {
            ref_attention(o, q, k, v, off, 3, seg, r, h, NH, NKV, HS);
            for (int d = 0; d < HS; d++) worst = fmax(worst, fabs(o[d] - out[((size_t)r * NH + h) * HS + d]));
        }
    CHECK_MSG(worst < 1e-5, "HS %d: forward max err %g", HS, worst);
    op->attention_backward(dq, dk, dv, W, out, lse, q, k, v, off, 3, seg, NH, NKV, HS);
    float *xs[3] = {q, k, v}, *gs[3] = {dq, dk, dv};
    size_t ns[3] = {nq, nk, nk};
    double gworst = 0, gmax = 0;
    for (int x = 0; x < 3; x++)
        for (size_t i = 0; i < ns[x]; i += 3) {   // every third element: enough to catch a wrong mask
            float save = xs[x][i];
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                xs[x][i] = save + (sgn ? -1e-2f : 1e-2f);
                l[sgn] = 0;
                for (int r = 0; r < N; r++)
                    for (int h = 0; h < NH; h++) {
                        ref_attention(o, q, k, v, off, 3, seg, r, h, NH, NKV, HS);
                        for (int d = 0; d < HS; d++) l[sgn] += o[d] * W[((size_t)r * NH + h) * HS + d];
                    }
            }
            xs[x][i] = save;
            double fd = (l[0] - l[1]) / (double)((save + 1e-2f) - (save - 1e-2f));
            gworst = fmax(gworst, fabs(fd - gs[x][i]));
            gmax = fmax(gmax, fabs(fd));
        }
    CHECK_MSG(gworst <= 1e-3 * gmax, "HS %d: backward max err %g of %g", HS, gworst, gmax);
    free(q); free(k); free(v); free(out); free(lse); free(W); free(dq); free(dk); free(dv);
}

static void masked_attention_matches_the_mask_head_size_16(void) { check_attention(16); }
static void masked_attention_matches_the_mask_head_size_6(void) { check_attention(6); }

// --- log-probs ---------------------------------------------------------------------------------

typedef struct batch {
    int32_t ids[24][40];
    skpo_seq s[24];
    int n, S;
} batch;

// G = 3 groups as a step writes them: each prompt's 3 ups share q; each up's
// 3 downs share [s, q] (some responses also start alike: P beyond the prompt).
static void make_batch(batch *b, int V) {
    memset(b, 0, sizeof *b);
    srand(5);
    for (int pr = 0; pr < 2; pr++) {
        int qn = 4 + pr;
        int32_t q[8];
        for (int t = 0; t < qn; t++) q[t] = 1 + rand() % (V - 1);
        for (int g = 0; g < 3; g++) {
            skpo_seq *u = &b->s[b->n];
            int32_t *x = b->ids[b->n++];
            int sn = 3 + rand() % 4;
            memcpy(x, q, qn * 4);
            for (int t = 0; t < sn; t++) x[qn + t] = 1 + rand() % (V - 1);
            *u = (skpo_seq){x, qn + sn, qn};
            for (int d = 0; d < 3; d++) {
                int32_t *y = b->ids[b->n];
                int pn = sn + qn, an = 2 + rand() % 6;
                memcpy(y, x + qn, sn * 4);
                memcpy(y + sn, q, qn * 4);
                for (int t = 0; t < an; t++) y[pn + t] = d == 2 && t == 0 ? y[pn] : 1 + rand() % (V - 1);
                if (d == 1) y[pn] = b->ids[b->n - 1][pn];   // two downs begin with the same token
                b->s[b->n++] = (skpo_seq){y, pn + an, pn};
            }
        }
    }
    b->S = 0;
    for (int i = 0; i < b->n; i++) b->S += b->s[i].n - b->s[i].start;
}

static void check_logprobs(const char *cfg) {
    skpo_model *m = tiny(cfg);
    if (!m) { CHECK(0); return; }
    batch b;
    make_batch(&b, skpo_model_config(m)->vocab_size);
    float *lp[2], *en[2];
    skpo_err e = {0};
    long raw, packed;
    for (int k = 0; k < 2; k++) {
        lp[k] = malloc(b.S * 4), en[k] = malloc(b.S * 4);
        skpo_model_set_pack(m, k == 0);
        CHECK(skpo_model_packs(m) == (k == 0));
        CHECK(skpo_model_logprobs(m, b.s, b.n, 0.9f, lp[k], en[k], &e) == SKPO_OK);
        skpo_model_pass_tokens(m, &raw, &packed);
        CHECK(k == 0 ? packed < raw : packed == raw);
        if (k == 0) printf("# %d sequences: %ld tokens packed into %ld\n", b.n, raw, packed);
    }
    CHECK_MSG(!memcmp(lp[0], lp[1], b.S * 4u), "packed log-probs differ from unpacked");
    CHECK_MSG(!memcmp(en[0], en[1], b.S * 4u), "packed entropies differ from unpacked");
    for (int k = 0; k < 2; k++) free(lp[k]), free(en[k]);
    skpo_model_free(m);
}

static void packed_logprobs_are_the_unpacked_bits_head_size_16(void) { check_logprobs(CFG16); }
static void packed_logprobs_are_the_unpacked_bits_head_size_6(void) { check_logprobs(CFG6); }

// --- the update ------------------------------------------------------------------------------

// Records of make_batch's sequences: ups and downs of two prompts, rollout
// log-probs near the model's (so some ratios clip), advantages of both signs,
// ref_logp, correct, and one refinement.
static skpo_rec *make_records(skpo_model *m, const batch *b, size_t *nrec) {
    float *lp = malloc(b->S * 4);
    skpo_err e = {0};
    skpo_model_set_pack(m, 0);
    CHECK(skpo_model_logprobs(m, b->s, b->n, 1.0f, lp, NULL, &e) == SKPO_OK);
    skpo_rec *r = calloc(b->n, sizeof *r);
    srand(9);
    for (int i = 0, off = 0; i < b->n; i++) {
        const skpo_seq *s = &b->s[i];
        int nt = s->n - s->start, up = i % 4 == 0;
        float roll[40], ref[40];
        for (int t = 0; t < nt; t++) {
            roll[t] = lp[off + t] + 0.5f * ((float)rand() / RAND_MAX - 0.5f);
            ref[t] = lp[off + t] + 0.2f * ((float)rand() / RAND_MAX - 0.5f);
        }
        off += nt;
        char uid[16], pid[16];
        snprintf(uid, sizeof uid, "r%d", i);
        snprintf(pid, sizeof pid, "p%d", i / 12);
        skpo_rec_init(&r[i]);
        skpo_rec_set_str(&r[i], F_KIND, up ? SKPO_KIND_UP : SKPO_KIND_DOWN);
        skpo_rec_set_str(&r[i], F_UID, uid);
        skpo_rec_set_str(&r[i], F_PID, pid);
        skpo_rec_set_i32s(&r[i], F_PROMPT, s->ids, (size_t)s->start);
        skpo_rec_set_i32s(&r[i], F_TOKENS, s->ids + s->start, (size_t)nt);
        skpo_rec_set_f32s(&r[i], F_LOGP, roll, (size_t)nt);
        skpo_rec_set_f32s(&r[i], F_REF_LOGP, ref, (size_t)nt);
        skpo_rec_set_float(&r[i], F_ADV, (i % 3 - 1) * 0.7 + 0.1 * (i % 5));
        skpo_rec_set_bool(&r[i], F_CORRECT, i % 2);
        if (i == 7) skpo_rec_set_bool(&r[i], F_REFINE, true);
    }
    free(lp);
    *nrec = (size_t)b->n;
    return r;
}

typedef struct run_out {
    float *grad;
    double loss;
    skpo_update_metrics met;
} run_out;

static int grad_run(skpo_model *m, skpo_rec *r, size_t n, const skpo_update_opts *o, int pack, run_out *out) {
    skpo_err e = {0};
    skpo_batch *b = NULL;
    skpo_comm *c = NULL;
    skpo_model_set_pack(m, pack);
    skpo_policy pol = skpo_policy_of_model(m);
    int ok = skpo_batch_new(r, n, o, 0, 1, &b, &e) == SKPO_OK && skpo_comm_init(SKPO_COMM_LOCAL, &c, &e) == SKPO_OK &&
             skpo_update_grad(&pol, c, b, 0, o, &out->met, &e) == SKPO_OK;
    if (!ok) fprintf(stderr, "  %s\n", e.msg);
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    size_t tot = 0;
    for (int i = 0; i < np; i++) tot += p[i].numel;
    out->grad = malloc(tot * 4);
    for (int i = 0, at = 0; i < np; at += (int)p[i].numel, i++) memcpy(out->grad + at, p[i].grad, p[i].numel * 4);
    out->loss = out->met.loss;
    skpo_batch_free(b);
    skpo_comm_free(c);
    return ok;
}

// |packed - unpacked|_2 / |unpacked|_2 over the whole gradient (the
// return) and the worst such ratio of a single tensor (*tensor_rel, its name
// in *worst_name). The per-tensor ratio is looser by nature: k_proj.bias has
// a near-zero gradient (softmax ignores a shift shared by all keys; only
// RoPE breaks the symmetry), a sum of cancelling terms whose rounding is
// relatively large in any summation order.
static double grad_rel_diff(skpo_model *m, const float *a, const float *b, double *tensor_rel, const char **worst_name) {
    skpo_param *p;
    int np = skpo_model_params(m, &p);
    double D2 = 0, B2 = 0;
    *tensor_rel = 0;
    for (int i = 0, at = 0; i < np; at += (int)p[i].numel, i++) {
        double d2 = 0, b2 = 0;
        for (size_t j = 0; j < p[i].numel; j++) {
            double x = (double)a[at + j] - b[at + j];
            d2 += x * x, b2 += (double)b[at + j] * b[at + j];
        }
        double rel = b2 > 0 ? sqrt(d2 / b2) : (d2 > 0 ? INFINITY : 0);
        if (rel > *tensor_rel) *tensor_rel = rel, *worst_name = p[i].name;
        D2 += d2, B2 += b2;
    }
    return B2 > 0 ? sqrt(D2 / B2) : INFINITY;
}

// The packed run against the unpacked one; *pm and *um (nullable) get their metrics.
static void check_update_met(const char *cfg, int kind, int agg, int sft, double kl, double ent, long micro,
                             skpo_old_logp old, skpo_update_metrics *pm, skpo_update_metrics *um) {
    skpo_model *m = tiny(cfg);
    if (!m) { CHECK(0); return; }
    batch bt;
    make_batch(&bt, skpo_model_config(m)->vocab_size);
    size_t n;
    skpo_rec *r = make_records(m, &bt, &n);
    skpo_update_opts o;
    skpo_update_opts_default(&o);
    o.minibatch = 2;
    o.micro_tokens = micro;
    o.sft = sft;
    o.old_logp = old;
    o.loss.kl_coef = kl;
    o.loss.entropy_coef = ent;
    for (int p = 0; p < SKPO_NPHASE; p++) o.loss.phase[p].kind = kind, o.loss.agg[p] = agg;
    o.loss.agg_norm = 16;
    run_out a, b;
    CHECK(grad_run(m, r, n, &o, 1, &a));
    CHECK(grad_run(m, r, n, &o, 0, &b));
    double trel;
    const char *wn = "";
    double rel = grad_rel_diff(m, a.grad, b.grad, &trel, &wn);
    CHECK_MSG(rel <= 1e-6 && trel <= 1e-5, "kind %d agg %d sft %d kl %g ent %g micro %ld: gradient rel diff %g, %g at %s",
              kind, agg, sft, kl, ent, micro, rel, trel, wn);
    printf("# %s kind %s agg %s%s kl %g ent %g micro %ld: rel diff %.1e (worst tensor %.1e, %s)\n",
           skpo_model_config(m)->model_type, skpo_loss_kind_name(kind), skpo_loss_agg_name(agg), sft ? " sft" : "", kl,
           ent, micro, rel, trel, wn);
    // the same per-record terms (packed log-probs are the unpacked bits); micro-batches cut
    // differently (the packed budget) add them in another order
    if (a.met.micro_batches == 1 && b.met.micro_batches == 1) CHECK_MSG(a.loss == b.loss, "loss %.17g vs %.17g", a.loss, b.loss);
    else CHECK_MSG(fabs(a.loss - b.loss) <= 1e-12 * fabs(b.loss), "loss %.17g vs %.17g", a.loss, b.loss);
    CHECK(a.met.raw_tokens == b.met.raw_tokens && b.met.packed_tokens == b.met.raw_tokens);
    CHECK(a.met.packed_tokens < a.met.raw_tokens && a.met.packed_tokens > 0);
    if (pm) *pm = a.met;
    if (um) *um = b.met;
    free(a.grad);
    free(b.grad);
    for (size_t i = 0; i < n; i++) skpo_rec_free(&r[i]);
    free(r);
    skpo_model_free(m);
}

static void check_update(const char *cfg, int kind, int agg, int sft, double kl, double ent, long micro,
                         skpo_old_logp old) {
    check_update_met(cfg, kind, agg, sft, kl, ent, micro, old, NULL, NULL);
}

static void packed_gradient_equals_unpacked_for_every_loss_form_and_aggregation(void) {
    static const int kinds[] = {SKPO_LOSS_PPO, SKPO_LOSS_CISPO, SKPO_LOSS_GSPO, SKPO_LOSS_SAPO, SKPO_LOSS_PRM_CE};
    for (int k = 0; k < 5; k++)
        for (int a = 0; a < 3; a++) check_update(CFG16, kinds[k], a, 0, 0, 0, 1 << 20, SKPO_OLD_ROLLOUT);
    for (int a = 0; a < 3; a++) check_update(CFG16, SKPO_LOSS_PPO, a, 1, 0, 0, 1 << 20, SKPO_OLD_ROLLOUT);   // SFT
}

static void packed_gradient_equals_unpacked_with_kl_and_entropy_terms(void) {
    check_update(CFG16, SKPO_LOSS_PPO, SKPO_AGG_TOKEN_MEAN, 0, 0.1, 0.05, 1 << 20, SKPO_OLD_ROLLOUT);
    check_update(CFG6, SKPO_LOSS_CISPO, SKPO_AGG_SEQ_MEAN_TOKEN_MEAN, 0, 0.1, 0.05, 1 << 20, SKPO_OLD_ROLLOUT);
}

// Packed size of make_batch's groups for vocabulary V (all in one
// mini-batch): the whole batch's, and the largest group's raw and packed sizes.
static long group_sizes(int V, long *max_raw, long *max_packed) {
    batch bt;
    make_batch(&bt, V);
    skpo_pack_tally t;
    skpo_pack_tally_init(&t, 1);
    for (int i = 0; i < bt.n; i++) skpo_pack_tally_add(&t, &bt.s[i]);
    *max_raw = *max_packed = 0;
    for (int k = 0; k < t.ngroups; k++) {
        if (t.sum[k] > *max_raw) *max_raw = t.sum[k];
        if (skpo_pack_tally_group(&t, k) > *max_packed) *max_packed = skpo_pack_tally_group(&t, k);
    }
    long whole = t.packed;
    skpo_pack_tally_free(&t);
    return whole;
}

// A budget under the largest packed group cuts groups across micro-batches:
// each part is packed on its own, the sum is still the whole mini-batch's
// gradient.
static void packed_gradient_is_exact_when_micro_batches_split_a_group(void) {
    long max_raw, max_packed, whole = group_sizes(23, &max_raw, &max_packed);   // CFG16's vocabulary
    skpo_update_metrics pm;
    check_update_met(CFG16, SKPO_LOSS_PPO, SKPO_AGG_SEQ_MEAN_TOKEN_MEAN, 0, 0, 0.05, max_packed - 5, SKPO_OLD_ROLLOUT, &pm, NULL);
    CHECK_MSG(pm.packed_tokens > whole, "packed %g, no group was cut (whole %ld)", pm.packed_tokens, whole);
    whole = group_sizes(19, &max_raw, &max_packed);   // CFG6's
    check_update_met(CFG6, SKPO_LOSS_GSPO, SKPO_AGG_TOKEN_MEAN, 0, 0, 0, 16, SKPO_OLD_ROLLOUT, &pm, NULL);
    CHECK_MSG(pm.packed_tokens > whole, "packed %g, no group was cut (whole %ld)", pm.packed_tokens, whole);
}

// --micro-tokens counts what a packed pass computes: a group whose records
// hold more tokens than the budget but whose packed size fits (here every
// group: the budget is the largest packed group) is trained in one
// micro-batch, so the step computes exactly the whole batch's packed tokens,
// in fewer passes than the unpacked run, and its gradient is the unpacked
// one. Counting tokens as given, the groups were cut and each part computed
// its prefix again.
static void a_group_whose_packed_size_fits_the_budget_is_one_micro_batch(void) {
    skpo_update_metrics pm, um;
    for (int c = 0; c < 2; c++) {
        long max_raw, max_packed, whole = group_sizes(c ? 19 : 23, &max_raw, &max_packed);
        CHECK_MSG(max_raw > max_packed, "raw %ld packed %ld: no group to keep whole", max_raw, max_packed);
        check_update_met(c ? CFG6 : CFG16, SKPO_LOSS_PPO, SKPO_AGG_TOKEN_MEAN, 0, 0, 0, max_packed,
                         c ? SKPO_OLD_RECOMPUTE : SKPO_OLD_ROLLOUT, &pm, &um);
        CHECK_MSG(pm.packed_tokens == (double)whole, "packed %g, whole groups %ld", pm.packed_tokens, whole);
        CHECK_MSG(pm.micro_batches < um.micro_batches, "%g packed micro-batches, %g unpacked", pm.micro_batches,
                  um.micro_batches);
        printf("# budget %ld (largest group: %ld raw, %ld packed): %g micro-batches packed, %g unpacked; %g of %g tokens\n",
               max_packed, max_raw, max_packed, pm.micro_batches, um.micro_batches, pm.packed_tokens, pm.raw_tokens);
    }
}

static void packed_gradient_equals_unpacked_with_pi_old_recomputed(void) {
    check_update(CFG16, SKPO_LOSS_PPO, SKPO_AGG_TOKEN_MEAN, 0, 0, 0, 1 << 20, SKPO_OLD_RECOMPUTE);
    check_update(CFG6, SKPO_LOSS_SAPO, SKPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM, 0, 0, 0, 64, SKPO_OLD_RECOMPUTE);
}

// A policy that watches the model's passes: every forward and score of more
// than one record must compute at most the budget (packed tokens).
typedef struct watch {
    skpo_policy in;
    long budget, worst;
    int passes, over;
} watch;

static void watch_pass(watch *w, int nseq) {
    long raw, packed;
    w->in.pass_tokens(w->in.ctx, &raw, &packed);
    w->passes++;
    if (nseq > 1 && packed > w->budget) w->over++;
    if (packed > w->worst) w->worst = packed;
}
static skpo_status w_forward(void *ctx, const skpo_seq *s, int n, float t, float *lp, float *ent, skpo_err *err) {
    watch *w = ctx;
    skpo_status st = w->in.forward(w->in.ctx, s, n, t, lp, ent, err);
    watch_pass(w, n);
    return st;
}
static skpo_status w_score(void *ctx, const skpo_seq *s, int n, float t, float *lp, skpo_err *err) {
    watch *w = ctx;
    skpo_status st = w->in.score(w->in.ctx, s, n, t, lp, err);
    watch_pass(w, n);
    return st;
}
static skpo_status w_backward(void *ctx, const float *d, const float *de, skpo_err *err) {
    watch *w = ctx;
    return w->in.backward(w->in.ctx, d, de, err);
}
static void w_zero(void *ctx) { ((watch *)ctx)->in.zero_grad(((watch *)ctx)->in.ctx); }
static int w_params(void *ctx, skpo_param **p) { return ((watch *)ctx)->in.params(((watch *)ctx)->in.ctx, p); }
static void w_tokens(void *ctx, long *raw, long *packed) { ((watch *)ctx)->in.pass_tokens(((watch *)ctx)->in.ctx, raw, packed); }
static int w_packs(void *ctx) { return ((watch *)ctx)->in.packs(((watch *)ctx)->in.ctx); }

// Whatever the budget (groups whole, cut, several per pass), no packed pass
// of pi_old's recompute or of the update holds more tokens than
// --micro-tokens; a pass over it is a single record longer than the budget.
static void no_packed_pass_computes_more_than_the_budget(void) {
    skpo_model *m = tiny(CFG16);
    if (!m) { CHECK(0); return; }
    batch bt;
    make_batch(&bt, skpo_model_config(m)->vocab_size);
    size_t n;
    skpo_rec *r = make_records(m, &bt, &n);
    skpo_model_set_pack(m, 1);
    static const long budgets[] = {1, 9, 16, 20, 25, 30, 40, 64, 1 << 20};
    for (int k = 0; k < (int)(sizeof budgets / sizeof budgets[0]); k++) {
        skpo_update_opts o;
        skpo_update_opts_default(&o);
        o.minibatch = 1;   // two mini-batches: the plan is per mini-batch
        o.micro_tokens = budgets[k];
        watch w = {.in = skpo_policy_of_model(m), .budget = budgets[k]};
        skpo_policy pol = {&w, w_forward, w_backward, w_score, w_zero, w_params, NULL, w_tokens, w_packs};
        skpo_err e = {0};
        skpo_batch *b = NULL;
        skpo_comm *c = NULL;
        skpo_update_metrics met[2];
        CHECK(skpo_batch_new(r, n, &o, 0, 1, &b, &e) == SKPO_OK && skpo_comm_init(SKPO_COMM_LOCAL, &c, &e) == SKPO_OK);
        for (int mb = 0; mb < 2 && b; mb++) CHECK_MSG(skpo_update_grad(&pol, c, b, mb, &o, &met[mb], &e) == SKPO_OK, "%s", e.msg);
        CHECK_MSG(w.over == 0, "budget %ld: %d of %d passes over it (largest %ld)", budgets[k], w.over, w.passes, w.worst);
        CHECK(w.passes == 2 * (int)(met[0].micro_batches + met[1].micro_batches));   // recompute + update, same cut
        printf("# budget %ld: %d passes, largest %ld tokens\n", budgets[k], w.passes, w.worst);
        skpo_batch_free(b);
        skpo_comm_free(c);
    }
    for (size_t i = 0; i < n; i++) skpo_rec_free(&r[i]);
    free(r);
    skpo_model_free(m);
}

int main(void) {
    RUN(plan_puts_each_prefix_once_and_keeps_scored_order);
    RUN(plan_keeps_a_token_in_every_continuation);
    RUN(tally_counts_what_the_plan_computes);
    RUN(masked_attention_matches_the_mask_head_size_16);
    RUN(masked_attention_matches_the_mask_head_size_6);
    RUN(packed_logprobs_are_the_unpacked_bits_head_size_16);
    RUN(packed_logprobs_are_the_unpacked_bits_head_size_6);
    RUN(packed_gradient_equals_unpacked_for_every_loss_form_and_aggregation);
    RUN(packed_gradient_equals_unpacked_with_kl_and_entropy_terms);
    RUN(packed_gradient_is_exact_when_micro_batches_split_a_group);
    RUN(a_group_whose_packed_size_fits_the_budget_is_one_micro_batch);
    RUN(no_packed_pass_computes_more_than_the_budget);
    RUN(packed_gradient_equals_unpacked_with_pi_old_recomputed);
    return TEST_SUMMARY();
}
