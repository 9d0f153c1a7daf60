/*
 * test_sampler_tools.c - skpo-sample and skpo-splice end to end on the tiny
 * checkpoint + tokenizer fixture (tests/fixtures/sample): the records they
 * write, seeds that replay a sequence, shards, the SKPO segment and splice
 * contracts. The tools run as subprocesses; their output is read back with
 * the record reader. Error exits and overlap are in tests/sh/t_sample.sh.
 */
#include "harness.h"
#include "record/record.h"
#include "gen/rollout.h"
#include "tokenizer/tokenizer.h"
#include "rl/tracker.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char TOP[2048], TMPD[256], MODEL[2400], PROMPTS[2400];

// Run a shell command line (formatted); returns its exit status.
static int sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "  command failed (%d): %s\n", rc, cmd);
    return rc;
}

typedef struct recs {
    skpo_rec *r;
    size_t n;
} recs;

static recs load_path(const char *p) {
    recs x = {0};
    skpo_err err = {0};
    if (skpo_read_all(p, &x.r, &x.n, &err) != SKPO_OK) fprintf(stderr, "  %s\n", err.msg);
    return x;
}

static recs load(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", TMPD, name);
    return load_path(p);
}

static void drop(recs *x) { skpo_recs_free(x->r, x->n); memset(x, 0, sizeof *x); }

static int count_kind(const recs *x, const char *kind) {
    int n = 0;
    for (size_t i = 0; i < x->n; i++) n += skpo_rec_is_kind(&x->r[i], kind);
    return n;
}

static int same_i32s(const skpo_rec *a, const char *ka, const skpo_rec *b, const char *kb) {
    size_t na, nb;
    const int32_t *x = skpo_rec_i32s(a, ka, &na), *y = skpo_rec_i32s(b, kb, &nb);
    return x && y && na == nb && !memcmp(x, y, na * sizeof *x);
}

#define SAMPLE "%s/bin/skpo-sample --model %s --prompts %s"

static void full_records_carry_prompt_fields_and_response(void) {
    if (sh("%s/bin/skpo-sample --model %s --prompts %s --n 3 --max-tokens 12 --batch 4 --step 7 > %s/full.zst", TOP,
           MODEL, PROMPTS, TMPD)) { CHECK(0); return; }
    recs p = load_path(PROMPTS), o = load("full.zst");
    CHECK(o.n == 1 + 6 * 3 && skpo_rec_is_kind(&o.r[0], SKPO_KIND_META));
    for (size_t i = 1; i < o.n; i++) {
        const skpo_rec *r = &o.r[i], *q = &p.r[1 + (i - 1) / 3];
        char uid[64];
        snprintf(uid, sizeof uid, "%s:7:%zu", skpo_rec_str(q, F_PID), (i - 1) % 3);
        CHECK(skpo_rec_is_kind(r, SKPO_KIND_FULL));
        CHECK(!strcmp(skpo_rec_str(r, F_PID), skpo_rec_str(q, F_PID)));
        CHECK(!strcmp(skpo_rec_str(r, F_UID), uid));
        CHECK(!strncmp(skpo_rec_str(r, F_GID), uid, strlen(uid) - 2));
        CHECK(same_i32s(r, F_PROMPT, q, F_PROMPT));
        CHECK(!strcmp(skpo_rec_str(r, F_ANSWER), skpo_rec_str(q, F_ANSWER)));
        CHECK(!strcmp(skpo_rec_str(r, F_SOURCE), "fixture") && !strcmp(skpo_rec_str(r, "x_custom"), "kept"));
        CHECK(!strcmp(skpo_rec_str(r, F_POLICY), MODEL));
        int64_t step = -1, seed;
        CHECK(skpo_rec_int(r, F_STEP, &step) && step == 7 && skpo_rec_int(r, F_SEED, &seed));
        size_t nt = 0, nl = 0;
        const int32_t *t = skpo_rec_i32s(r, F_TOKENS, &nt);
        const float *lp = skpo_rec_f32s(r, F_LOGP, &nl);
        CHECK(t && lp && nt == nl && nt >= 1 && nt <= 12);
        for (size_t k = 0; k < nl; k++) CHECK(isfinite(lp[k]) && lp[k] <= 0);
        const char *fin = skpo_rec_str(r, F_FINISH);
        CHECK(fin && (!strcmp(fin, "stop") ? t[nt - 1] == 2 || t[nt - 1] == 0 : nt == 12));
        CHECK(skpo_rec_str(r, F_TEXT) != NULL);
    }
    drop(&p);
    drop(&o);
}

// The seed stored in a record regenerates that sequence alone.
static void record_seed_replays_the_sequence(void) {
    recs o = load("full.zst"), p = load_path(PROMPTS);
    if (o.n < 6) { CHECK(0); return; }
    skpo_rollout_opts ro = {.model_dir = MODEL, .batch = 1, .max_tokens = 12, .share_prefix = 1,
                            .sample = {1.0, 1.0, 0}};
    skpo_rollout r;
    skpo_err err = {0};
    CHECK_MSG(skpo_rollout_open(&ro, &r, &err) == SKPO_OK, "%s", err.msg);
    const skpo_rec *x = &o.r[5]; // p2, sample 1
    int64_t seed;
    size_t np, nt;
    skpo_rec_int(x, F_SEED, &seed);
    const int32_t *q = skpo_rec_i32s(x, F_PROMPT, &np), *t = skpo_rec_i32s(x, F_TOKENS, &nt);
    uint64_t s = (uint64_t)seed;
    skpo_gen_req req = {.prompt = q, .n_prompt = (int)np, .n = 1, .max_new = 12, .seeds = &s};
    CHECK(skpo_gen_submit(r.gen, &req, NULL) == SKPO_OK && skpo_gen_run(r.gen, NULL) == SKPO_OK);
    skpo_gen_group *g = skpo_gen_pop(r.gen);
    CHECK(g && g->s[0].n == (int)nt && !memcmp(g->s[0].tokens, t, nt * sizeof *t));
    CHECK(s == skpo_rollout_seed(0, 7, "full", "p2", 1));
    skpo_gen_group_free(g);
    skpo_rollout_close(&r);
    drop(&o);
    drop(&p);
}

static void shards_concatenate_to_the_whole_and_seed_changes_tokens(void) {
    const char *f = "--n 2 --max-tokens 8 --batch 3";
    CHECK(!sh(SAMPLE " %s > %s/all.zst", TOP, MODEL, PROMPTS, f, TMPD));
    CHECK(!sh(SAMPLE " %s --shard 0/2 > %s/s0.zst", TOP, MODEL, PROMPTS, f, TMPD));
    CHECK(!sh(SAMPLE " %s --shard 1/2 > %s/s1.zst", TOP, MODEL, PROMPTS, f, TMPD));
    CHECK(!sh(SAMPLE " %s --seed 9 > %s/seed9.zst", TOP, MODEL, PROMPTS, f, TMPD));
    recs a = load("all.zst"), s0 = load("s0.zst"), s1 = load("s1.zst"), s9 = load("seed9.zst");
    CHECK(a.n == 13 && s0.n + s1.n == 14 && s9.n == 13);
    int same = 1, differs = 0;
    for (size_t i = 1; i < a.n && s0.n + s1.n == 14 && s9.n == a.n; i++) {
        const skpo_rec *x = i < s0.n ? &s0.r[i] : &s1.r[i - s0.n + 1];
        same &= same_i32s(&a.r[i], F_TOKENS, x, F_TOKENS) && !strcmp(skpo_rec_str(&a.r[i], F_UID), skpo_rec_str(x, F_UID));
        differs |= !same_i32s(&a.r[i], F_TOKENS, &s9.r[i], F_TOKENS);
    }
    CHECK(same);
    CHECK(differs);
    drop(&a);
    drop(&s0);
    drop(&s1);
    drop(&s9);
}

// Tracker state with L_q = 40 for every prompt: t_q in [7, 20].
static void make_state(void) {
    skpo_tracker *t = skpo_tracker_new(NULL);
    const char *pids[6] = {"p1", "p2", "p3", "p4", "p5", "p6"};
    for (int i = 0; i < 6; i++) CHECK(skpo_tracker_update(t, pids[i], i < 2 ? 1.0 : 0.0, 40, 0.9, NULL, NULL) == SKPO_OK);
    skpo_tracker_set_step(t, 3);
    char d[512];
    snprintf(d, sizeof d, "%s/state", TMPD);
    CHECK(skpo_tracker_save(t, d, NULL) == SKPO_OK);
    skpo_tracker_free(t);
}

static void segment_mode_writes_one_cut_segment_per_drawn_prompt(void) {
    make_state();
    CHECK(!sh(SAMPLE " --segment --state %s/state --prompts-per-step 4 --group 4 --batch 8 > %s/up.zst", TOP, MODEL,
              PROMPTS, TMPD, TMPD));
    CHECK(!sh(SAMPLE " --segment --state %s/state --prompts-per-step 4 --group 4 --batch 3 --no-share --shard 1/2 "
              "> %s/up1.zst", TOP, MODEL, PROMPTS, TMPD, TMPD));
    recs u = load("up.zst"), u1 = load("up1.zst");
    CHECK(u.n == 5 && count_kind(&u, SKPO_KIND_UP) == 4);
    for (size_t i = 1; i < u.n; i++) {
        const skpo_rec *r = &u.r[i];
        int64_t cut = 0, step = 0;
        double nll = -1;
        size_t nt = 0, nl = 0;
        const int32_t *t = skpo_rec_i32s(r, F_TOKENS, &nt);
        const float *lp = skpo_rec_f32s(r, F_LOGP, &nl);
        CHECK(skpo_rec_int(r, F_CUT, &cut) && cut >= 7 && cut <= 20);
        CHECK(skpo_rec_int(r, F_STEP, &step) && step == 3); // the tracker's step
        CHECK(nt == nl && (t || nt == 0) && (int64_t)nt <= cut);
        if (!strcmp(skpo_rec_str(r, F_FINISH), "stop")) CHECK((int64_t)nt <= cut / 2);
        else CHECK((int64_t)nt == cut);
        double s = 0;
        for (size_t k = 0; k < nl; k++) s -= lp[k];
        CHECK(skpo_rec_float(r, F_NLL, &nll) && fabs(nll - (nl ? s / nl : 0)) < 1e-6);
        for (size_t j = 1; j < i; j++) CHECK(strcmp(skpo_rec_str(r, F_PID), skpo_rec_str(&u.r[j], F_PID)));
    }
    // Shard 1/2 holds draws 3 and 4; no sharing and another batch size give the same segments.
    CHECK(u1.n == 3);
    for (size_t i = 1; i < u1.n && u.n == 5; i++) {
        CHECK(!strcmp(skpo_rec_str(&u1.r[i], F_PID), skpo_rec_str(&u.r[i + 2], F_PID)));
        CHECK(same_i32s(&u1.r[i], F_TOKENS, &u.r[i + 2], F_TOKENS));
    }
    drop(&u);
    drop(&u1);
}

static void splice_writes_up_then_g_downs_from_skip_prefix(void) {
    CHECK(!sh("%s/bin/skpo-splice --model %s --group 3 --max-tokens 10 --batch 4 < %s/up.zst > %s/down.zst", TOP,
              MODEL, TMPD, TMPD));
    CHECK(!sh("%s/bin/skpo-splice --model %s --group 2 --max-tokens 6 --layout continual --temperature 0 "
              "< %s/up.zst > %s/cont.zst", TOP, MODEL, TMPD, TMPD));
    recs u = load("up.zst"), d = load("down.zst"), c = load("cont.zst");
    // splice meta, sample meta (passed through), then per up: up + 3 downs
    CHECK(d.n == 2 + 4 * 4 && skpo_rec_is_kind(&d.r[0], SKPO_KIND_META) && skpo_rec_is_kind(&d.r[1], SKPO_KIND_META));
    for (int k = 0; k < 4 && d.n == 18 && u.n == 5; k++) {
        const skpo_rec *up = &d.r[2 + 4 * k];
        CHECK(skpo_rec_is_kind(up, SKPO_KIND_UP) && !strcmp(skpo_rec_str(up, F_UID), skpo_rec_str(&u.r[1 + k], F_UID)));
        size_t ns, nq, np;
        const int32_t *s = skpo_rec_i32s(up, F_TOKENS, &ns), *q = skpo_rec_i32s(up, F_PROMPT, &nq);
        for (int i = 0; i < 3; i++) {
            const skpo_rec *dn = &d.r[3 + 4 * k + i];
            char uid[256];
            snprintf(uid, sizeof uid, "%s:%d", skpo_rec_str(up, F_UID), i);
            CHECK(skpo_rec_is_kind(dn, SKPO_KIND_DOWN));
            CHECK(!strcmp(skpo_rec_str(dn, F_GID), skpo_rec_str(up, F_UID)) && !strcmp(skpo_rec_str(dn, F_UID), uid));
            const int32_t *p = skpo_rec_i32s(dn, F_PROMPT, &np);
            CHECK(np == ns + nq && (ns == 0 || !memcmp(p, s, ns * 4)) && !memcmp(p + ns, q, nq * 4));
            CHECK(!skpo_rec_get(dn, F_CUT) && !skpo_rec_get(dn, F_NLL));
            CHECK(!strcmp(skpo_rec_str(dn, F_ANSWER), skpo_rec_str(up, F_ANSWER)));
            size_t nt, nl;
            CHECK(skpo_rec_i32s(dn, F_TOKENS, &nt) && skpo_rec_f32s(dn, F_LOGP, &nl) && nt == nl && nt <= 10);
        }
    }
    // continual = [q, s]; greedy: both downs of a group are the same
    CHECK(c.n == 2 + 4 * 3);
    for (int k = 0; k < 4 && c.n == 14; k++) {
        const skpo_rec *up = &c.r[2 + 3 * k], *d0 = &c.r[3 + 3 * k], *d1 = &c.r[4 + 3 * k];
        size_t ns, nq, np;
        const int32_t *s = skpo_rec_i32s(up, F_TOKENS, &ns), *q = skpo_rec_i32s(up, F_PROMPT, &nq);
        const int32_t *p = skpo_rec_i32s(d0, F_PROMPT, &np);
        CHECK(np == nq + ns && !memcmp(p, q, nq * 4) && (ns == 0 || !memcmp(p + nq, s, ns * 4)));
        CHECK(same_i32s(d0, F_TOKENS, d1, F_TOKENS));
    }
    drop(&u);
    drop(&d);
    drop(&c);
}

// A stop string ends a response at the token that completes it, never later.
static void stop_string_ends_response_at_completing_token(void) {
    CHECK(!sh(SAMPLE " --n 4 --max-tokens 40 --stop th --stop 'Answer' > %s/stop.zst", TOP, MODEL, PROMPTS, TMPD));
    recs o = load("stop.zst");
    skpo_tok *tok = NULL;
    CHECK(skpo_tok_load(MODEL, &tok, NULL) == SKPO_OK);
    int by_string = 0;
    for (size_t i = 1; i < o.n && tok; i++) {
        size_t nt, len;
        const int32_t *t = skpo_rec_i32s(&o.r[i], F_TOKENS, &nt);
        char *before = skpo_tok_decode(tok, t, nt - 1, 1, &len);
        CHECK(!strstr(before, "th") && !strstr(before, "Answer"));
        const char *text = skpo_rec_str(&o.r[i], F_TEXT);
        int hit = strstr(text, "th") || strstr(text, "Answer");
        if (!strcmp(skpo_rec_str(&o.r[i], F_FINISH), "stop")) by_string += hit;
        else CHECK(!hit && nt == 40);
        free(before);
    }
    CHECK(by_string > 0);
    skpo_tok_free(tok);
    drop(&o);
}

// --n with --prompts-per-step draws distinct prompts (GRPO baselines); --lq-init
// sets L_q of unseen prompts: 12 -> t_q in [2, 6].
static void full_mode_draws_prompts_and_lq_init_sets_the_cut(void) {
    CHECK(!sh(SAMPLE " --n 2 --max-tokens 4 --prompts-per-step 3 --state %s/state --prio-eps 0.1 > %s/drawn.zst", TOP,
              MODEL, PROMPTS, TMPD, TMPD));
    CHECK(!sh(SAMPLE " --segment --all --lq-init 12 --group 2 > %s/lq.zst", TOP, MODEL, PROMPTS, TMPD));
    recs d = load("drawn.zst"), l = load("lq.zst");
    CHECK(d.n == 1 + 3 * 2);
    for (size_t i = 1; i + 1 < d.n; i += 2) {
        CHECK(!strcmp(skpo_rec_str(&d.r[i], F_PID), skpo_rec_str(&d.r[i + 1], F_PID)));
        for (size_t j = 1; j < i; j += 2) CHECK(strcmp(skpo_rec_str(&d.r[i], F_PID), skpo_rec_str(&d.r[j], F_PID)));
    }
    CHECK(l.n == 7);
    for (size_t i = 1; i < l.n; i++) {
        int64_t cut = 0;
        CHECK(skpo_rec_int(&l.r[i], F_CUT, &cut) && cut >= 2 && cut <= 6);
    }
    drop(&d);
    drop(&l);
}

int main(void) {
    const char *top = getenv("SKPO_TOP");
    snprintf(TOP, sizeof TOP, "%s", top ? top : ".");
    snprintf(TMPD, sizeof TMPD, "/tmp/skpo-sample-test.XXXXXX");
    if (!mkdtemp(TMPD)) return 1;
    snprintf(MODEL, sizeof MODEL, "%s/tests/fixtures/sample/tiny-qwen2", TOP);
    snprintf(PROMPTS, sizeof PROMPTS, "%s/tests/fixtures/sample/prompts.msgpack.zst", TOP);
    char link[512];
    snprintf(link, sizeof link, "%s/../prompts", TMPD); // load_path(PROMPTS) reads the fixture
    (void)link;
    RUN(full_records_carry_prompt_fields_and_response);
    RUN(record_seed_replays_the_sequence);
    RUN(shards_concatenate_to_the_whole_and_seed_changes_tokens);
    RUN(segment_mode_writes_one_cut_segment_per_drawn_prompt);
    RUN(splice_writes_up_then_g_downs_from_skip_prefix);
    RUN(stop_string_ends_response_at_completing_token);
    RUN(full_mode_draws_prompts_and_lq_init_sets_the_cut);
    sh("rm -rf %s", TMPD);
    return TEST_SUMMARY();
}
