// test_tokenizer_chat.c - chat templates against transformers' apply_chat_template
// renderings (tests/fixtures/tokenizer/chat.jsonl from tests/ref/make_chat_fixtures.py)
// and the prompt wordings.
#include "harness.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char *fixture(const char *rel) {
    const char *t = getenv("SKPO_TOP");
    return skpo_path_join(t ? t : ".", rel);
}

static void templates_render_like_transformers(void) {
    char *dir = fixture("tests/fixtures/tokenizer/qwen2.5");
    char *path = fixture("tests/fixtures/tokenizer/chat.jsonl");
    skpo_tok *tok = NULL;
    skpo_err e = {0};
    CHECK(skpo_tok_load(dir, &tok, &e) == SKPO_OK);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int ncase = 0, bad = 0, nids = 0, seen_llama = 0;
    while (f && tok && getline(&line, &cap, f) > 0) {
        json_t *c = json_loads(line, 0, NULL);
        CHECK(c != NULL);
        if (!c) continue;
        json_t *msgs = json_object_get(c, "messages"), *m;
        size_t i, n = json_array_size(msgs);
        skpo_chat_msg *cm = skpo_xcalloc(n + 1, sizeof *cm);
        json_array_foreach(msgs, i, m) {
            cm[i].role = json_string_value(json_object_get(m, "role"));
            cm[i].content = json_string_value(json_object_get(m, "content"));
        }
        const char *tmpl = json_string_value(json_object_get(c, "template"));
        seen_llama |= !strcmp(tmpl, "llama3");
        char *text = skpo_chat_render(tmpl, cm, (int)n, json_is_true(json_object_get(c, "add_generation_prompt")), &e);
        const char *want = json_string_value(json_object_get(c, "text"));
        ncase++;
        if (!text || strcmp(text, want)) {
            if (bad++ < 3) fprintf(stderr, "  case %d (%s): got\n%s\n  want\n%s\n", ncase, tmpl, text ? text : e.msg, want);
        } else if (json_object_get(c, "ids")) {
            int32_t *ids;
            size_t nid;
            json_t *w = json_object_get(c, "ids");
            CHECK(skpo_tok_encode(tok, text, strlen(text), 1, &ids, &nid, &e) == SKPO_OK);
            int same = nid == json_array_size(w);
            for (size_t k = 0; same && k < nid; k++) same = ids[k] == json_integer_value(json_array_get(w, k));
            if (!same && bad++ < 3) fprintf(stderr, "  case %d (%s): ids differ\n", ncase, tmpl);
            nids++;
            free(ids);
        }
        free(text);
        free(cm);
        json_decref(c);
    }
    free(line);
    if (f) fclose(f);
    skpo_tok_free(tok);
    free(dir);
    free(path);
    CHECK(ncase >= 40 && nids >= 20 && seen_llama);
    CHECK_MSG(bad == 0, "%d of %d renderings differ", bad, ncase);
}

static void plain_template_is_contents_only(void) {
    skpo_chat_msg m[2] = {{"system", "S "}, {"user", "What is 1+1?"}};
    skpo_err e = {0};
    char *t = skpo_chat_render("plain", m + 1, 1, 1, &e);
    CHECK(t && !strcmp(t, "What is 1+1?"));
    free(t);
    t = skpo_chat_render("plain", m, 2, 0, &e);
    CHECK(t && !strcmp(t, "S What is 1+1?"));
    free(t);
}

static void unknown_template_or_role_is_an_error(void) {
    skpo_chat_msg m = {"user", "x"};
    skpo_err e = {0};
    CHECK(skpo_chat_render("chatml-9", &m, 1, 1, &e) == NULL);
    CHECK(strstr(e.msg, "unknown chat template 'chatml-9'") != NULL);
    skpo_chat_msg bad = {"tool", "x"};
    CHECK(skpo_chat_render("qwen2.5", &bad, 1, 1, &e) == NULL);
    CHECK(strstr(e.msg, "role") != NULL);
}

static void dapo_wording_matches_the_dataset_text(void) {
    skpo_err e = {0};
    char *p = skpo_prompt_wording("dapo", "What is $2+2$?", &e);
    CHECK(p && !strcmp(p, "Solve the following math problem step by step. The last line of your response should be of the "
                          "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
                          "What is $2+2$?\n\nRemember to put your answer on its own line after \"Answer:\"."));
    free(p);
    p = skpo_prompt_wording("boxed", "What is $2+2$?", &e);
    CHECK(p && !strcmp(p, "What is $2+2$?\nPlease reason step by step, and put your final answer within \\boxed{}."));
    free(p);
    p = skpo_prompt_wording("raw", "What is $2+2$?", &e);
    CHECK(p && !strcmp(p, "What is $2+2$?"));
    free(p);
    CHECK(skpo_prompt_wording("fancy", "x", &e) == NULL && strstr(e.msg, "fancy"));
}

int main(void) {
    RUN(templates_render_like_transformers);
    RUN(plain_template_is_contents_only);
    RUN(unknown_template_or_role_is_an_error);
    RUN(dapo_wording_matches_the_dataset_text);
    return TEST_SUMMARY();
}
