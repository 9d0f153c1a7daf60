// test_tokenizer_tiny.c - small tokenizer.json files covering the loader's
// options (tests/fixtures/tokenizer/tiny/*, made by
// tests/ref/make_tiny_tokenizers.py) against Hugging Face `tokenizers` ids and
// decodes: a minimal ByteLevel-only file, Llama-3-style Split + ignore_merges +
// array merges, add_prefix_space with lstrip/rstrip/normalized added tokens,
// byte_fallback + unk, and every Split behaviour.
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int check_dir(const char *dir, int *ncase) {
    skpo_tok *t = NULL;
    skpo_err e = {0};
    if (skpo_tok_load(dir, &t, &e) != SKPO_OK) {
        fprintf(stderr, "  %s: %s\n", dir, e.msg);
        return 1;
    }
    char *path = skpo_path_join(dir, "cases.jsonl");
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int bad = 0, k = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_t *c = json_loads(line, 0, NULL);
        json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
        int32_t *ids = NULL;
        size_t n = 0, dn;
        k++;
        int ok = skpo_tok_encode(t, json_string_value(text), json_string_length(text), 1, &ids, &n, &e) == SKPO_OK &&
                 n == json_array_size(want);
        for (size_t i = 0; ok && i < n; i++) ok = ids[i] == json_integer_value(json_array_get(want, i));
        char *d = skpo_tok_decode(t, ids, n, 0, &dn);
        const char *wd = json_string_value(json_object_get(c, "decoded"));
        if (!ok || strcmp(d, wd)) {
            if (bad++ < 3) {
                fprintf(stderr, "  %s case %d '%s': %s; ids", dir, k, json_string_value(text), ok ? "decode differs" : "ids differ");
                for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "; decoded '%s' want '%s'\n", d, wd);
            }
        }
        free(d);
        free(ids);
        json_decref(c);
    }
    *ncase += k;
    free(line);
    if (f) fclose(f);
    free(path);
    skpo_tok_free(t);
    return bad;
}

static void tiny_tokenizers_match_hf_ids_and_decodes(void) {
    const char *top = getenv("SKPO_TOP");
    char pat[4096];
    snprintf(pat, sizeof pat, "%s/tests/fixtures/tokenizer/tiny/*", top ? top : ".");
    glob_t g;
    CHECK(glob(pat, GLOB_ONLYDIR, NULL, &g) == 0);
    int bad = 0, ncase = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) bad += check_dir(g.gl_pathv[i], &ncase);
    CHECK(g.gl_pathc >= 9 && ncase >= 9 * 20);
    CHECK_MSG(bad == 0, "%d of %d cases differ", bad, ncase);
    globfree(&g);
}

static skpo_tok *load_tiny(const char *name) {
    const char *top = getenv("SKPO_TOP");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizer/tiny/%s", top ? top : ".", name);
    skpo_tok *t = NULL;
    skpo_err e = {0};
    if (skpo_tok_load(dir, &t, &e) != SKPO_OK) fprintf(stderr, "  %s\n", e.msg);
    return t;
}

static void eos_and_bos_come_from_config_and_turn_tokens(void) {
    skpo_tok *t = load_tiny("llama-like");
    CHECK(t != NULL);
    if (!t) return;
    int32_t eos[8];
    int n = skpo_tok_eos_ids(t, eos, 8);
    CHECK(n == 2 && eos[0] == skpo_tok_id(t, "<|eot_id|>") && eos[1] == skpo_tok_id(t, "<|end_of_text|>"));
    CHECK(skpo_tok_bos_id(t) >= 0 && skpo_tok_bos_id(t) == skpo_tok_id(t, "<|begin_of_text|>"));
    CHECK(skpo_tok_is_special(t, skpo_tok_bos_id(t)));
    CHECK(skpo_tok_bos_to_add(t) == skpo_tok_id(t, "<|begin_of_text|>"));
    skpo_tok_free(t);
    t = load_tiny("bytelevel-min");
    CHECK(t != NULL);
    if (!t) return;
    n = skpo_tok_eos_ids(t, eos, 8);
    CHECK(n == 2 && eos[0] == skpo_tok_id(t, "<|im_end|>") && eos[1] == skpo_tok_id(t, "<|endoftext|>"));
    CHECK(skpo_tok_bos_id(t) == -1 && skpo_tok_bos_to_add(t) == -1);
    CHECK(skpo_tok_vocab_size(t) == skpo_tok_id(t, "<|im_end|>") + 1);
    skpo_tok_free(t);
}

// Threads share the tokenizer (and race for its word cache); every thread must
// get the ids a single thread gets.
static void concurrent_encodes_agree_with_serial(void) {
    skpo_tok *t = load_tiny("llama-like");
    if (!t) SKIP("no tokenizer");
    const char *text = "Hello world, hello world! 12345 abcabc zzzz <|eot_id|> again and again";
    int32_t *want;
    size_t nw;
    skpo_err e = {0};
    CHECK(skpo_tok_encode(t, text, strlen(text), 1, &want, &nw, &e) == SKPO_OK);
    int bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (int i = 0; i < 400; i++) {
        int32_t *ids;
        size_t n;
        skpo_err le = {0};
        if (skpo_tok_encode(t, text, strlen(text) - (size_t)(i % 3), 1, &ids, &n, &le) != SKPO_OK) { bad++; continue; }
        if (i % 3 == 0 && (n != nw || memcmp(ids, want, n * sizeof *ids))) bad++;
        free(ids);
    }
    CHECK(bad == 0);
    free(want);
    skpo_tok_free(t);
}

int main(void) {
    RUN(tiny_tokenizers_match_hf_ids_and_decodes);
    RUN(eos_and_bos_come_from_config_and_turn_tokens);
    RUN(concurrent_encodes_agree_with_serial);
    return TEST_SUMMARY();
}
