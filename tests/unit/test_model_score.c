// test_model_score.c - skpo-score end to end: records in, the same records out
// with ref_logp equal to Hugging Face's log-probs (fixture qwen2_untied at
// temperature 0.7, max abs err 1e-4), every other record and field unchanged
// and in order, across several scoring batches.
#include "harness.h"
#include "record/record.h"
#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *top(void) { return getenv("SKPO_TOP") ? getenv("SKPO_TOP") : "."; }

static void scored_records_match_hf_and_everything_else_passes_through(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/model/qwen2_untied/expected.safetensors", top());
    skpo_st *st;
    skpo_err err = {0};
    CHECK(skpo_st_open_file(path, &st, &err) == SKPO_OK);
    float start[3], ids[3][32], logp[64];
    int n[3];
    CHECK(skpo_st_read_f32(st, "start", start, 1, (int64_t[]){3}, &err) == SKPO_OK);
    int S = 0;
    for (int i = 0; i < 3; i++) {
        char k[16];
        snprintf(k, sizeof k, "ids.%d", i);
        n[i] = (int)skpo_st_find(st, k)->numel;
        CHECK(skpo_st_read_f32(st, k, ids[i], 1, (int64_t[]){n[i]}, &err) == SKPO_OK);
        S += n[i] - (int)start[i];
    }
    CHECK(skpo_st_read_f32(st, "logp", logp, 1, (int64_t[]){S}, &err) == SKPO_OK);
    skpo_st_close(st);
    // input: meta, a prompt record (no tokens), 3 full records, an unknown kind
    char in[] = "/tmp/skpo_score_in_XXXXXX", out[] = "/tmp/skpo_score_out_XXXXXX";
    close(mkstemp(in));
    close(mkstemp(out));
    skpo_rec r[6];
    for (int i = 0; i < 6; i++) skpo_rec_init(&r[i]);
    skpo_rec_set_str(&r[0], F_KIND, "meta");
    skpo_rec_set_int(&r[0], F_SCHEMA, SKPO_SCHEMA_VERSION);
    skpo_rec_set_str(&r[1], F_KIND, "prompt");
    skpo_rec_set_i32s(&r[1], F_PROMPT, (int32_t[]){1, 2, 3}, 3);
    for (int i = 0; i < 3; i++) {
        int32_t t[32];
        for (int j = 0; j < n[i]; j++) t[j] = (int32_t)ids[i][j];
        skpo_rec_set_str(&r[2 + i], F_KIND, "full");
        skpo_rec_set_int(&r[2 + i], "custom", 100 + i);
        skpo_rec_set_i32s(&r[2 + i], F_PROMPT, t, (size_t)start[i]);
        skpo_rec_set_i32s(&r[2 + i], F_TOKENS, t + (int)start[i], (size_t)(n[i] - (int)start[i]));
    }
    skpo_rec_set_str(&r[5], F_KIND, "mystery");
    skpo_rec_set_float(&r[5], "x", 2.5);
    CHECK(skpo_write_all(in, r, 6, &err) == SKPO_OK);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/bin/skpo-score --model %s/tests/fixtures/model/qwen2_untied --temperature 0.7 "
             "--batch-tokens 12 <%s >%s", top(), top(), in, out);
    CHECK(system(cmd) == 0);
    if (getenv("KEEP")) fprintf(stderr, "%s\n", cmd);
    skpo_rec *o;
    size_t no = 0;
    CHECK(skpo_read_all(out, &o, &no, &err) == SKPO_OK);
    CHECK_MSG(no == 7, "%zu records", no); // our meta + the 6
    if (no == 7) {
        CHECK(skpo_rec_is_kind(&o[0], "meta") && skpo_rec_is_kind(&o[1], "meta"));
        CHECK(skpo_rec_is_kind(&o[2], "prompt") && !skpo_rec_get(&o[2], F_REF_LOGP));
        double worst = 0;
        for (int i = 0, k = 0; i < 3; i++) {
            size_t m;
            const float *lp = skpo_rec_f32s(&o[3 + i], F_REF_LOGP, &m);
            int64_t c;
            CHECK(skpo_rec_int(&o[3 + i], "custom", &c) && c == 100 + i);
            CHECK(lp && m == (size_t)(n[i] - (int)start[i]));
            for (size_t j = 0; lp && j < m; j++, k++)
                if (!(fabs(lp[j] - logp[k]) <= worst)) worst = fabs(lp[j] - logp[k]);
        }
        CHECK_MSG(worst <= 1e-4, "ref_logp max abs err %g", worst);
        double x;
        CHECK(skpo_rec_is_kind(&o[6], "mystery") && skpo_rec_float(&o[6], "x", &x) && x == 2.5);
    }
    skpo_recs_free(o, no);
    for (int i = 0; i < 6; i++) skpo_rec_free(&r[i]);
    // a missing model is a runtime failure (exit 1) naming the folder
    snprintf(cmd, sizeof cmd, "%s/bin/skpo-score --model /nonexistent <%s >/dev/null 2>%s", top(), in, out);
    CHECK(WEXITSTATUS(system(cmd)) == 1);
    char *msg;
    size_t len;
    CHECK(skpo_read_file(out, &msg, &len, &err) == SKPO_OK);
    CHECK_MSG(strstr(msg, "skpo-score: ") && strstr(msg, "/nonexistent"), "%s", msg);
    free(msg);
    if (!getenv("KEEP")) unlink(in);
    unlink(out);
}

int main(void) {
    RUN(scored_records_match_hf_and_everything_else_passes_through);
    return TEST_SUMMARY();
}
