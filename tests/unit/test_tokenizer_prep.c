// test_tokenizer_prep.c - skpo-prep run as a black box on fixture rows of every
// benchmark format; its prompt records are compared with
// tests/fixtures/tokenizer/prep/expected.jsonl (tests/ref/make_prep_fixtures.py:
// transformers' chat template + HF tokenizers + the field rules in Python).
#include "harness.h"
#include "record/record.h"

#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char top[4096];
static char tmp[] = "/tmp/skpo-prep-XXXXXX";

// Fixture input files in sorted order (as the Python reference), space-separated.
static char *inputs(void) {
    char pat[4200];
    snprintf(pat, sizeof pat, "%s/tests/fixtures/tokenizer/prep/*.jsonl", top);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0) return skpo_xstrdup("");
    size_t cap = 1;
    for (size_t i = 0; i < g.gl_pathc; i++) cap += strlen(g.gl_pathv[i]) + 3;
    char *s = skpo_xcalloc(cap, 1);
    for (size_t i = 0; i < g.gl_pathc; i++)
        if (!strstr(g.gl_pathv[i], "/expected.jsonl")) strcat(strcat(strcat(s, "'"), g.gl_pathv[i]), "' ");
    globfree(&g);
    return s;
}

// Runs skpo-prep with args (relative paths are under the repository root);
// returns the exit status, the stdout records in *recs.
static int run_args(const char *args, skpo_rec **recs, size_t *n) {
    size_t len = strlen(args) + strlen(top) * 2 + 512;
    char *cmd = skpo_xmalloc(len);
    snprintf(cmd, len, "cd '%s' && bin/skpo-prep %s >%s/out.zst 2>%s/err", top, args, tmp, tmp);
    int rc = system(cmd);
    free(cmd);
    char path[256];
    snprintf(path, sizeof path, "%s/out.zst", tmp);
    skpo_err e = {0};
    *recs = NULL, *n = 0;
    struct stat st;
    if (rc == 0 && stat(path, &st) == 0 && st.st_size > 0 && skpo_read_all(path, recs, n, &e) != SKPO_OK)
        fprintf(stderr, "  read: %s\n", e.msg);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// skpo-prep on every fixture file with the Qwen2.5 tokenizer and template.
static int run_prep(const char *flags, skpo_rec **recs, size_t *n) {
    char *in = inputs();
    size_t len = strlen(in) + strlen(flags) + 256;
    char *args = skpo_xmalloc(len);
    snprintf(args, len, "--tokenizer tests/fixtures/tokenizer/qwen2.5 --template qwen2.5-math %s %s", flags, in);
    int rc = run_args(args, recs, n);
    free(args);
    free(in);
    return rc;
}

static json_t *expected(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/prep/expected.jsonl", top);
    json_t *all = json_array();
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0) json_array_append_new(all, json_loads(line, 0, NULL));
    free(line);
    if (f) fclose(f);
    return all;
}

static int rec_matches(const skpo_rec *r, const json_t *w) {
    static const char *keys[] = {"pid", "source", "problem", "answer", "text"};
    for (int k = 0; k < 5; k++) {
        const char *got = skpo_rec_str(r, keys[k]);
        if (!got || strcmp(got, json_string_value(json_object_get(w, keys[k])))) {
            fprintf(stderr, "  %s: got '%.80s' want '%.80s'\n", keys[k], got ? got : "(none)",
                    json_string_value(json_object_get(w, keys[k])));
            return 0;
        }
    }
    size_t n;
    const int32_t *ids = skpo_rec_i32s(r, "prompt", &n);
    json_t *wi = json_object_get(w, "ids");
    if (!ids || n != json_array_size(wi)) return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(wi, i))) return 0;
    return skpo_rec_is_kind(r, "prompt");
}

static void prep_matches_reference_for_every_benchmark_format(void) {
    skpo_rec *recs;
    size_t n;
    json_t *want = expected();
    CHECK(run_prep("", &recs, &n) == 0);
    CHECK(json_array_size(want) >= 20);
    CHECK(n == json_array_size(want) + 1);
    CHECK(n > 0 && skpo_rec_is_kind(&recs[0], "meta"));
    int with_subject = 0;
    for (size_t i = 1; i < n && i <= json_array_size(want); i++) {
        CHECK_MSG(rec_matches(&recs[i], json_array_get(want, i - 1)), "record %zu", i);
        // other row fields come along (MATH-500's subject and level)
        if (!strcmp(skpo_rec_str(&recs[i], "source"), "math500")) {
            CHECK(skpo_rec_str(&recs[i], "subject") && skpo_rec_get(&recs[i], "level"));
            CHECK(!skpo_rec_get(&recs[i], "unique_id"));
            with_subject++;
        }
    }
    CHECK(with_subject == 2);
    skpo_recs_free(recs, n);
    json_decref(want);
}

static void overlong_prompts_are_skipped_and_reported(void) {
    skpo_rec *recs;
    size_t n, keep = 0, skip = 0;
    json_t *want = expected(), *w;
    size_t i;
    json_array_foreach(want, i, w) {
        if (json_array_size(json_object_get(w, "ids")) <= 150) keep++;
        else skip++;
    }
    CHECK(keep > 0 && skip > 0);
    CHECK(run_prep("--max-prompt-tokens 150", &recs, &n) == 0);
    CHECK(n == keep + 1);
    for (size_t k = 1; k < n; k++) {
        size_t len;
        CHECK(skpo_rec_i32s(&recs[k], "prompt", &len) && len <= 150);
    }
    char path[256], *err = NULL, line[64];
    snprintf(path, sizeof path, "%s/err", tmp);
    skpo_err e = {0};
    CHECK(skpo_read_file(path, &err, NULL, &e) == SKPO_OK);
    snprintf(line, sizeof line, "skipped %zu prompts longer than 150 tokens (", skip);
    CHECK_MSG(err && strstr(err, line), "stderr: %s", err ? err : "");
    free(err);
    skpo_recs_free(recs, n);
    json_decref(want);
}

static void out_flag_writes_the_same_records_to_a_file(void) {
    skpo_rec *recs, *recs2;
    size_t n, n2;
    char flags[300], path[256];
    snprintf(path, sizeof path, "%s/file.msgpack.zst", tmp);
    snprintf(flags, sizeof flags, "--out %s --source S --wording raw --no-extra", path);
    CHECK(run_prep(flags, &recs, &n) == 0);
    CHECK(n == 0); // nothing on stdout
    skpo_err e = {0};
    CHECK(skpo_read_all(path, &recs2, &n2, &e) == SKPO_OK);
    CHECK(n2 > 20);
    int dapo_worded = 0;
    for (size_t i = 1; i < n2; i++) {
        CHECK(!strcmp(skpo_rec_str(&recs2[i], "source"), "S"));
        const char *text = skpo_rec_str(&recs2[i], "text"), *problem = skpo_rec_str(&recs2[i], "problem");
        CHECK(text && problem && strstr(text, problem));
        // raw wording everywhere except the DAPO-Math-17k row, which keeps its own
        dapo_worded += text && strstr(text, "Answer:\".") != NULL;
        CHECK(recs2[i].n == 7); // kind pid source problem answer text prompt: nothing extra
    }
    CHECK(dapo_worded == 1);
    skpo_recs_free(recs, n);
    skpo_recs_free(recs2, n2);
}

// A tokenizer whose post-processor adds BOS (Llama 3 style) gets exactly one
// BOS in front, whether or not the template writes it.
static void prompts_start_with_one_bos_when_the_tokenizer_adds_one(void) {
    const char *tmpls[] = {"plain", "llama3"};
    for (int k = 0; k < 2; k++) {
        char args[512];
        snprintf(args, sizeof args, "--tokenizer tests/fixtures/tokenizer/tiny/llama-like --template %s --wording raw "
                 "tests/fixtures/tokenizer/prep/custom.jsonl", tmpls[k]);
        skpo_rec *recs;
        size_t n;
        CHECK(run_args(args, &recs, &n) == 0);
        CHECK(n == 4);
        for (size_t i = 1; i < n; i++) {
            size_t len;
            const int32_t *ids = skpo_rec_i32s(&recs[i], "prompt", &len);
            const char *text = skpo_rec_str(&recs[i], "text");
            CHECK(ids && len > 2 && ids[0] == 282 && ids[1] != 282); // 282: <|begin_of_text|> in this vocab
            CHECK(text && !strncmp(text, "<|begin_of_text|>", 17) && strncmp(text + 17, "<|begin_of_text|>", 17));
        }
        skpo_recs_free(recs, n);
    }
}

int main(void) {
    const char *t = getenv("SKPO_TOP");
    snprintf(top, sizeof top, "%s", t ? t : ".");
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/bin/skpo-prep", top);
    if (access(bin, X_OK) != 0 || !mkdtemp(tmp)) {
        printf("SKIP prep_tests: bin/skpo-prep not built\n");
        return 0;
    }
    RUN(prep_matches_reference_for_every_benchmark_format);
    RUN(overlong_prompts_are_skipped_and_reported);
    RUN(out_flag_writes_the_same_records_to_a_file);
    RUN(prompts_start_with_one_bos_when_the_tokenizer_adds_one);
    skpo_err e = {0};
    skpo_rm_rf(tmp, &e);
    return TEST_SUMMARY();
}
