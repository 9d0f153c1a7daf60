/*
 * tokenizer.h - Hugging Face tokenizer.json (byte-level BPE, as used by Qwen2.5
 * and Llama 3) and chat templates. Encoding gives exactly the ids HF gives.
 */
#ifndef SKPO_TOKENIZER_H
#define SKPO_TOKENIZER_H

#include "base/common.h"

#include <stddef.h>
#include <stdint.h>

typedef struct skpo_tok skpo_tok;

// Load dir/tokenizer.json (+ dir/tokenizer_config.json if present).
skpo_status skpo_tok_load(const char *dir, skpo_tok **out, skpo_err *err);
void skpo_tok_free(skpo_tok *t);

// Encode UTF-8 text; added/special tokens in the text are matched when
// allow_special. *ids is malloc'd. Invalid UTF-8 is SKPO_EFORMAT. Safe to call
// from several threads on one tokenizer. Never adds BOS (skpo_tok_bos_to_add).
skpo_status skpo_tok_encode(const skpo_tok *t, const char *text, size_t len, int allow_special,
                            int32_t **ids, size_t *n, skpo_err *err);
// Decode to a malloc'd NUL-terminated string (invalid UTF-8 from partial
// byte tokens is replaced by U+FFFD). skip_special drops special tokens; ids
// outside the vocab are skipped.
char *skpo_tok_decode(const skpo_tok *t, const int32_t *ids, size_t n, int skip_special, size_t *len);

int skpo_tok_vocab_size(const skpo_tok *t);        // including added tokens
int skpo_tok_id(const skpo_tok *t, const char *token);   // -1 if unknown
const char *skpo_tok_str(const skpo_tok *t, int id);     // token string or NULL
int skpo_tok_is_special(const skpo_tok *t, int id);
// End-of-sequence ids from tokenizer_config.json (eos_token) and the template's
// end-of-turn token; n returned.
int skpo_tok_eos_ids(const skpo_tok *t, int32_t *out, int max);
int skpo_tok_bos_id(const skpo_tok *t);                  // -1 if none
// The id HF's post-processor puts before a single sequence (a TemplateProcessing
// that starts with a special token: Llama 3's <|begin_of_text|>); -1 if none
// (Qwen). skpo_tok_encode never adds it; callers that want HF's
// add_special_tokens=True prepend it.
int skpo_tok_bos_to_add(const skpo_tok *t);

// Incremental decoder: feed ids one at a time; returns only complete UTF-8
// characters (never half a character). Text is appended to the caller's buffer.
typedef struct skpo_tok_stream {
    const skpo_tok *tok;
    char pending[8];
    int npending;
    int skip_special;
} skpo_tok_stream;
void skpo_tok_stream_init(skpo_tok_stream *s, const skpo_tok *t, int skip_special);
// Appends decoded bytes of id to out (grown with skpo_xgrow); returns bytes added.
size_t skpo_tok_stream_feed(skpo_tok_stream *s, int32_t id, char **out, size_t *len, size_t *cap);
size_t skpo_tok_stream_finish(skpo_tok_stream *s, char **out, size_t *len, size_t *cap);

// --- chat templates (declarative, see chat.c) ---
typedef struct skpo_chat_msg {
    const char *role;     // "system" | "user" | "assistant"
    const char *content;
} skpo_chat_msg;

// Template names: "qwen2.5", "qwen2", "qwen2.5-math", "llama3", "plain"
// (docs/tokenizer.md gives each one's text).
// Render messages and, if add_generation_prompt, the assistant opener.
// Returns malloc'd text, NULL with err set for an unknown template.
char *skpo_chat_render(const char *tmpl, const skpo_chat_msg *msgs, int n, int add_generation_prompt, skpo_err *err);
// Prompt wordings for a problem: "dapo" (docs/algorithm.md section 5), "boxed", "raw".
char *skpo_prompt_wording(const char *wording, const char *problem, skpo_err *err);

#endif
