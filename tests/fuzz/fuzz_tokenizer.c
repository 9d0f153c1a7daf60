// fuzz_tokenizer.c - encoding and decoding arbitrary bytes with real
// tokenizers: the demo tokenizer (tests/fixtures/demo/tokenizer, NFC, the
// Qwen2 split regex, special tokens), the lossless tiny byte-level one and the
// prefix-space one (tests/fixtures/tokenizer/tiny). Byte 0 picks the mode; the
// rest is the text. Run from the repository root.
//   - encoding never fails on valid UTF-8 and gives ids inside the vocabulary;
//   - demo: valid UTF-8 encoded without specials decodes to its NFC form,
//     which encodes to the same ids again;
//   - bytelevel-min (no normalizer): any text decodes back byte for byte;
//   - the bytes read as ids (any value, unknown ids included) decode to the
//     same text in one call and through the stream decoder.
// Loading arbitrary tokenizer.json bytes is fuzz_tokjson.c.
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int skpo_tok_utf8_valid(const char *s, size_t n);  // tokenizer_impl.h

// Loaded once per fuzzing process (harness state, not library state).
static skpo_tok *demo, *lossless, *rich;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    skpo_err e = {0};
    if (skpo_tok_load("tests/fixtures/demo/tokenizer", &demo, &e) != SKPO_OK ||
        skpo_tok_load("tests/fixtures/tokenizer/tiny/bytelevel-min", &lossless, &e) != SKPO_OK ||
        skpo_tok_load("tests/fixtures/tokenizer/tiny/prefix-space", &rich, &e) != SKPO_OK) {
        fprintf(stderr, "fuzz_tokenizer: setup: %s (run from the repository root)\n", e.msg);
        abort();
    }
    return 0;
}

static int32_t *encode(const skpo_tok *t, const char *text, size_t n, int special, size_t *nids) {
    int32_t *ids = NULL;
    skpo_err e = {0};
    if (skpo_tok_encode(t, text, n, special, &ids, nids, &e) != SKPO_OK) {
        if (skpo_tok_utf8_valid(text, n) || !e.msg[0]) abort();  // only bad UTF-8 may fail, with a message
        return NULL;
    }
    for (size_t i = 0; i < *nids; i++)
        if (ids[i] < 0 || ids[i] >= skpo_tok_vocab_size(t)) abort();
    return ids;
}

static void demo_round_trip(const char *text, size_t n, int special) {
    size_t nids, dl, nagain;
    int32_t *ids = encode(demo, text, n, special, &nids);
    if (!ids) return;
    char *d = skpo_tok_decode(demo, ids, nids, 0, &dl);
    if (!special && skpo_tok_utf8_valid(text, n)) {
        int32_t *again = encode(demo, d, dl, 0, &nagain);
        if (!again || nagain != nids || (nids && memcmp(again, ids, nids * sizeof *ids) != 0)) abort();
        free(again);
    }
    free(d);
    free(ids);
}

static void lossless_round_trip(const char *text, size_t n, int special) {
    size_t nids, dl;
    int32_t *ids = encode(lossless, text, n, special, &nids);
    if (!ids) return;
    char *d = skpo_tok_decode(lossless, ids, nids, 0, &dl);
    if (dl != n || (n && memcmp(d, text, n) != 0)) abort();
    free(d);
    free(ids);
}

static void ids_decode_like_stream(const skpo_tok *t, const char *data, size_t size, int skip, int raw) {
    size_t n = size / 4, dn, len = 0, cap = 0;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    memcpy(ids, data, n * 4);
    if (!raw)  // mostly known ids, a few just past the vocabulary
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((uint32_t)ids[i] % (uint32_t)(skpo_tok_vocab_size(t) + 8));
    char *d = skpo_tok_decode(t, ids, n, skip, &dn), *out = NULL;
    skpo_tok_stream s;
    skpo_tok_stream_init(&s, t, skip);
    for (size_t i = 0; i < n; i++) skpo_tok_stream_feed(&s, ids[i], &out, &len, &cap);
    skpo_tok_stream_finish(&s, &out, &len, &cap);
    if (len != dn || (dn && memcmp(out, d, dn))) abort();
    free(out);
    free(d);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    demo_round_trip(text, n, mode & 1);
    lossless_round_trip(text, n, mode & 1);
    size_t nr;
    free(encode(rich, text, n, mode & 1, &nr));
    ids_decode_like_stream((mode & 4) ? rich : demo, text, n, mode & 2, mode & 8);
    return 0;
}
