// fuzz_tokenizer.c - the tokenizer on arbitrary bytes: input that looks like a
// JSON object is loaded as a tokenizer.json (error paths); valid UTF-8 is
// encoded by fixed tokenizers and must decode back exactly where the tokenizer
// is lossless; the bytes read as ids must give the same text through
// skpo_tok_decode and the stream decoder.
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Loaded once per fuzzing process (harness state, not library state).
static skpo_tok *lossless, *rich;
static char tmpdir[] = "/tmp/skpo-fuzz-tok-XXXXXX";

static void setup(void) {
    skpo_err e = {0};
    if (skpo_tok_load("tests/fixtures/tokenizer/tiny/bytelevel-min", &lossless, &e) != SKPO_OK ||
        skpo_tok_load("tests/fixtures/tokenizer/tiny/prefix-space", &rich, &e) != SKPO_OK || !mkdtemp(tmpdir)) {
        fprintf(stderr, "fuzz_tokenizer: setup: %s (run from the repository root)\n", e.msg);
        abort();
    }
}

static void try_load(const uint8_t *data, size_t size) {
    char *p = skpo_path_join(tmpdir, "tokenizer.json");
    skpo_err e = {0};
    skpo_tok *t = NULL;
    FILE *f = fopen(p, "wb"); // not skpo_write_file_atomic: its fsync would dominate each run
    if (!f) abort();
    fwrite(data, 1, size, f);
    fclose(f);
    if (skpo_tok_load(tmpdir, &t, &e) == SKPO_OK) {
        int32_t *ids;
        size_t n, dn;
        if (skpo_tok_encode(t, "Hello <|im_end|> world 12", 24, 1, &ids, &n, &e) == SKPO_OK) {
            free(skpo_tok_decode(t, ids, n, 0, &dn));
            free(ids);
        }
        skpo_tok_free(t);
    }
    free(p);
}

static void ids_decode_like_stream(const skpo_tok *t, const uint8_t *data, size_t size) {
    size_t n = size / 4, dn, len = 0, cap = 0;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    memcpy(ids, data, n * 4);
    for (size_t i = 0; i < n; i++) ids[i] %= skpo_tok_vocab_size(t) + 8;
    char *d = skpo_tok_decode(t, ids, n, ids[0] & 1, &dn), *out = NULL;
    skpo_tok_stream s;
    skpo_tok_stream_init(&s, t, ids[0] & 1);
    for (size_t i = 0; i < n; i++) skpo_tok_stream_feed(&s, ids[i], &out, &len, &cap);
    skpo_tok_stream_finish(&s, &out, &len, &cap);
    if (len != dn || (dn && memcmp(out, d, dn))) abort();
    free(out);
    free(d);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!lossless) setup();
    if (size > 0 && data[0] == '{') try_load(data, size);
    const skpo_tok *ts[2] = {lossless, rich};
    for (int k = 0; k < 2; k++) {
        int32_t *ids;
        size_t n, dn;
        skpo_err e = {0};
        if (skpo_tok_encode(ts[k], (const char *)data, size, size & 1, &ids, &n, &e) != SKPO_OK) continue;
        char *d = skpo_tok_decode(ts[k], ids, n, 0, &dn);
        if (k == 0 && (dn != size || (size && memcmp(d, data, size)))) abort(); // no normalizer: lossless
        free(d);
        free(ids);
    }
    if (size >= 4) ids_decode_like_stream(rich, data, size);
    return 0;
}
