// test_tokenizer.c - the Qwen2.5 tokenizer against Hugging Face ids
// (tests/fixtures/tokenizer/cases.jsonl), special tokens, incremental decoding
// and malformed tokenizer.json files.
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

static const char *top(void) {
    const char *t = getenv("SKPO_TOP");
    return t ? t : ".";
}

static char *fixture(const char *rel) {
    return skpo_path_join(top(), rel);
}

static skpo_tok *qwen(void) {
    static skpo_tok *t;
    if (!t) {
        char *dir = fixture("tests/fixtures/tokenizer/qwen2.5");
        skpo_err e = {0};
        if (skpo_tok_load(dir, &t, &e) != SKPO_OK) fprintf(stderr, "  load: %s\n", e.msg);
        free(dir);
    }
    return t;
}

static int ids_equal(const int32_t *a, size_t na, const json_t *want) {
    if (na != json_array_size(want)) return 0;
    for (size_t i = 0; i < na; i++)
        if (a[i] != json_integer_value(json_array_get(want, i))) return 0;
    return 1;
}

// Every line {"text", "ids"} of a fixture encodes to ids and decodes to NFC(text).
static void check_cases(const char *rel, int min_cases) {
    skpo_tok *t = qwen();
    CHECK(t != NULL);
    if (!t) return;
    char *path = fixture(rel);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int ncase = 0, bad = 0;
    while (f && getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *c = json_loads(line, JSON_ALLOW_NUL, &je);
        CHECK(c != NULL);
        if (!c) continue;
        json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
        int32_t *ids;
        size_t n;
        skpo_err e = {0};
        skpo_status st = skpo_tok_encode(t, json_string_value(text), json_string_length(text), 1, &ids, &n, &e);
        ncase++;
        if (st != SKPO_OK || !ids_equal(ids, n, want)) {
            if (bad++ < 5) fprintf(stderr, "  case %d: ids differ for %.60s\n", ncase, json_string_value(text));
        } else {
            // decoding gives the NFC form of the text, as HF does
            size_t dn;
            char *back = skpo_tok_decode(t, ids, n, 0, &dn);
            char *nfc = (char *)utf8proc_NFC((const utf8proc_uint8_t *)json_string_value(text));
            if (!nfc || dn != strlen(nfc) || memcmp(back, nfc, dn))
                if (bad++ < 5) fprintf(stderr, "  case %d: decode differs for %.60s\n", ncase, json_string_value(text));
            free(back);
            free(nfc);
        }
        if (st == SKPO_OK) free(ids);
        json_decref(c);
    }
    free(line);
    if (f) fclose(f);
    free(path);
    CHECK(ncase >= min_cases);
    CHECK_MSG(bad == 0, "%d of %d cases wrong", bad, ncase);
}

static void every_case_encodes_to_hf_ids_and_decodes_back(void) {
    check_cases("tests/fixtures/tokenizer/cases.jsonl", 245);
}

// Spaces, letters and digits where PCRE2's and Oniguruma's Unicode tables differ.
static void awkward_unicode_encodes_like_hf(void) {
    check_cases("tests/fixtures/tokenizer/unicode_cases.jsonl", 600);
}

static void special_tokens_match_only_when_allowed(void) {
    skpo_tok *t = qwen();
    if (!t) SKIP("no tokenizer");
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    int32_t *ids;
    size_t n;
    skpo_err e = {0};
    CHECK(skpo_tok_encode(t, s, strlen(s), 1, &ids, &n, &e) == SKPO_OK);
    CHECK(n >= 2 && ids[0] == 151644 && ids[n - 1] == 151645);
    CHECK(skpo_tok_is_special(t, ids[0]) && !skpo_tok_is_special(t, ids[1]));
    size_t dn;
    char *d = skpo_tok_decode(t, ids, n, 1, &dn);
    CHECK(!strcmp(d, "user\nhi"));
    free(d);
    free(ids);
    CHECK(skpo_tok_encode(t, s, strlen(s), 0, &ids, &n, &e) == SKPO_OK);
    for (size_t i = 0; i < n; i++) CHECK(ids[i] < 151643);
    d = skpo_tok_decode(t, ids, n, 0, &dn);
    CHECK(!strcmp(d, s));
    free(d);
    free(ids);
    // non-special added tokens are matched even without allow_special
    CHECK(skpo_tok_encode(t, "<tool_call>", 11, 0, &ids, &n, &e) == SKPO_OK);
    CHECK(n == 1 && ids[0] == skpo_tok_id(t, "<tool_call>") && !skpo_tok_is_special(t, ids[0]));
    free(ids);
}

static void vocab_queries_and_eos_ids(void) {
    skpo_tok *t = qwen();
    if (!t) SKIP("no tokenizer");
    CHECK(skpo_tok_vocab_size(t) == 151665);
    CHECK(skpo_tok_id(t, "<|endoftext|>") == 151643);
    CHECK(skpo_tok_id(t, "Ġthe") == 279);
    CHECK(skpo_tok_id(t, "no such token") == -1);
    CHECK(!strcmp(skpo_tok_str(t, 279), "Ġthe"));
    CHECK(skpo_tok_str(t, -1) == NULL && skpo_tok_str(t, 1 << 20) == NULL);
    int32_t eos[8];
    int n = skpo_tok_eos_ids(t, eos, 8);
    CHECK(n == 2 && eos[0] == 151645 && eos[1] == 151643);
    CHECK(skpo_tok_eos_ids(t, eos, 1) == 1);
    CHECK(skpo_tok_bos_id(t) == -1 && skpo_tok_bos_to_add(t) == -1);
}

// Feed ids one at a time; every chunk must be valid UTF-8 and the chunks must
// add up to the full decode.
static void stream_never_emits_half_a_character(void) {
    skpo_tok *t = qwen();
    if (!t) SKIP("no tokenizer");
    const char *texts[] = {"中文字符测试：数学题", "emoji 🤗👨‍👩‍👧‍👦 split 😊!", "𝕏 ÿþ € ✖️", "plain ascii"};
    for (int k = 0; k < 4; k++) {
        int32_t *ids;
        size_t n;
        skpo_err e = {0};
        CHECK(skpo_tok_encode(t, texts[k], strlen(texts[k]), 0, &ids, &n, &e) == SKPO_OK);
        skpo_tok_stream s;
        skpo_tok_stream_init(&s, t, 0);
        char *out = NULL;
        size_t len = 0, cap = 0;
        int partial_tokens = 0;
        for (size_t i = 0; i < n; i++) {
            size_t before = len;
            size_t added = skpo_tok_stream_feed(&s, ids[i], &out, &len, &cap);
            CHECK(added == len - before);
            if (added == 0) partial_tokens++;
            // each emitted chunk ends on a character boundary
            int ok = 1;
            for (size_t j = before; j < len;) {
                unsigned char c = (unsigned char)out[j];
                size_t cl = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                if (j + cl > len) ok = 0;
                j += cl;
            }
            CHECK(ok);
        }
        skpo_tok_stream_finish(&s, &out, &len, &cap);
        CHECK(len == strlen(texts[k]) && !memcmp(out, texts[k], len));
        if (k == 1) CHECK(partial_tokens > 0); // the emoji are split across byte tokens
        free(out);
        free(ids);
    }
}

static void stream_replaces_invalid_bytes_like_decode(void) {
    skpo_tok *t = qwen();
    if (!t) SKIP("no tokenizer");
    // byte tokens: 0xE4 0xB8 (an unfinished CJK char) then 'a', then a lone 0xFF
    // byte-level chars: U+00E4 is byte 0xE4, U+00B8 byte 0xB8, U+00FF byte 0xFF
    int32_t ids[4] = {skpo_tok_id(t, "\xC3\xA4"), skpo_tok_id(t, "\xC2\xB8"), skpo_tok_id(t, "a"),
                      skpo_tok_id(t, "\xC3\xBF")};
    for (int i = 0; i < 4; i++) CHECK(ids[i] >= 0);
    size_t dn;
    char *d = skpo_tok_decode(t, ids, 4, 0, &dn);
    CHECK(!strcmp(d, "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD"));
    skpo_tok_stream st;
    skpo_tok_stream_init(&st, t, 0);
    char *out = NULL;
    size_t len = 0, cap = 0;
    CHECK(skpo_tok_stream_feed(&st, ids[0], &out, &len, &cap) == 0);
    CHECK(skpo_tok_stream_feed(&st, ids[1], &out, &len, &cap) == 0);
    for (int i = 2; i < 4; i++) skpo_tok_stream_feed(&st, ids[i], &out, &len, &cap);
    skpo_tok_stream_finish(&st, &out, &len, &cap);
    CHECK(len == dn && !memcmp(out, d, dn));
    free(out);
    free(d);
}

static void encode_rejects_invalid_utf8(void) {
    skpo_tok *t = qwen();
    if (!t) SKIP("no tokenizer");
    int32_t *ids;
    size_t n;
    skpo_err e = {0};
    CHECK(skpo_tok_encode(t, "a\xFF", 2, 0, &ids, &n, &e) == SKPO_EFORMAT);
    CHECK(strstr(e.msg, "UTF-8") != NULL);
    CHECK(skpo_tok_encode(t, "", 0, 0, &ids, &n, &e) == SKPO_OK && n == 0);
    free(ids);
}

// Writes text as dir/tokenizer.json and expects loading to fail with a message
// containing want.
static void expect_load_error(const char *json, const char *want) {
    char dir[] = "/tmp/skpo-tok-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *p = skpo_path_join(dir, "tokenizer.json");
    skpo_err e = {0};
    CHECK(skpo_write_file_atomic(p, json, strlen(json), &e) == SKPO_OK);
    skpo_tok *t = NULL;
    skpo_status st = skpo_tok_load(dir, &t, &e);
    CHECK(st != SKPO_OK && t == NULL);
    CHECK_MSG(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
    CHECK(strstr(e.msg, "tokenizer.json") != NULL);
    skpo_rm_rf(dir, &e);
    free(p);
}

static void malformed_tokenizer_json_gives_clear_errors(void) {
    expect_load_error("{\"version\": \"1.0\"", "not JSON");
    expect_load_error("[1, 2]", "not a JSON object");
    expect_load_error("{\"added_tokens\": []}", "missing \"model\"");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                      "merge 1");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a  b\"]}}",
                      "two tokens");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [17]}}", "merge 1");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "no valid id");
    expect_load_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": {}, \"merges\": []}}", "not supported");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", "model vocab is empty");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": "
                      "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                      "regex does not compile");
    expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"NFKC\"}}",
                      "not supported");
    skpo_tok *t = NULL;
    skpo_err e = {0};
    CHECK(skpo_tok_load("/nonexistent-dir", &t, &e) == SKPO_ENOTFOUND);
    CHECK(strstr(e.msg, "/nonexistent-dir/tokenizer.json") != NULL);
}

int main(void) {
    RUN(every_case_encodes_to_hf_ids_and_decodes_back);
    RUN(awkward_unicode_encodes_like_hf);
    RUN(special_tokens_match_only_when_allowed);
    RUN(vocab_queries_and_eos_ids);
    RUN(stream_never_emits_half_a_character);
    RUN(stream_replaces_invalid_bytes_like_decode);
    RUN(encode_rejects_invalid_utf8);
    RUN(malformed_tokenizer_json_gives_clear_errors);
    skpo_tok_free(qwen());
    return TEST_SUMMARY();
}
