// fuzz_tokenizer.c - encoding and decoding arbitrary bytes with a real
// tokenizer (tests/fixtures/demo/tokenizer, or $SKPO_FUZZ_TOKENIZER).
// Byte 0 picks the mode; the rest is the text. Encoding must succeed or fail
// cleanly on any bytes (invalid UTF-8 included); valid UTF-8 without special
// tokens must decode to text that encodes to the same ids; the same bytes read as int32 ids
// (any value, out-of-range included) must decode, in one call and streamed.
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

int skpo_tok_utf8_valid(const char *s, size_t n);  // tokenizer_impl.h

static skpo_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("SKPO_FUZZ_TOKENIZER");
    skpo_err e = {0};
    if (skpo_tok_load(dir ? dir : "tests/fixtures/demo/tokenizer", &tok, &e) != SKPO_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    int32_t *ids = NULL;
    size_t nids = 0;
    skpo_err e = {0};
    if (skpo_tok_encode(tok, text, n, mode & 1, &ids, &nids, &e) == SKPO_OK) {
        int vocab = skpo_tok_vocab_size(tok);
        for (size_t i = 0; i < nids; i++)
            if (ids[i] < 0 || ids[i] >= vocab) abort();
        size_t dl = 0;
        char *d = skpo_tok_decode(tok, ids, nids, 0, &dl);
        // Valid UTF-8 encoded without specials decodes to its NFC form, which
        // must encode to the same ids again.
        if (!(mode & 1) && skpo_tok_utf8_valid(text, n)) {
            int32_t *again = NULL;
            size_t nagain = 0;
            if (skpo_tok_encode(tok, d, dl, 0, &again, &nagain, &e) != SKPO_OK || nagain != nids ||
                (nids && memcmp(again, ids, nids * sizeof *ids) != 0))
                abort();
            free(again);
        }
        free(d);
    }
    free(ids);
    // The input as raw ids: decode must skip unknown ids, never read past the vocab.
    size_t m = n / 4;
    int32_t *raw = malloc((m ? m : 1) * sizeof *raw);
    memcpy(raw, text, m * 4);
    size_t dl = 0;
    free(skpo_tok_decode(tok, raw, m, mode & 2, &dl));
    skpo_tok_stream s;
    skpo_tok_stream_init(&s, tok, mode & 2);
    char *out = NULL;
    size_t len = 0, cap = 0;
    for (size_t i = 0; i < m; i++) skpo_tok_stream_feed(&s, raw[i], &out, &len, &cap);
    skpo_tok_stream_finish(&s, &out, &len, &cap);
    free(out);
    free(raw);
    return 0;
}
