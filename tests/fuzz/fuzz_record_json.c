// fuzz_record_json.c - records <-> JSON (core/record/recjson.h) on arbitrary bytes:
// as a JSON line for --pack (whatever parses must print and parse back to the
// same text), and as one msgpack value shown by skpo-cat (whatever passes
// skpo_mp_check must print). Never a crash, leak or hang.
#include "record/mpcheck.h"
#include "record/recjson.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    skpo_err e = {0};
    skpo_rec r, q;
    skpo_rec_init(&r);
    skpo_rec_init(&q);
    skpo_jbuf a = {0}, b = {0};
    if (skpo_rec_from_json((const char *)data, size, &r, &e) == SKPO_OK) {
        skpo_rec_to_json(&r, NULL, 0, &a);
        if (skpo_rec_from_json(a.p, a.n, &q, &e) != SKPO_OK) abort();
        skpo_rec_to_json(&q, NULL, 0, &b);
        if (a.n != b.n || memcmp(a.p, b.p, a.n)) abort();
    }
    size_t used;
    if (size && skpo_mp_check((const char *)data, size, 1, &used, &e) == SKPO_OK) {
        skpo_rec_clear(&r);
        skpo_rec_set_raw(&r, "x", data, used);
        a.n = 0;
        skpo_rec_to_json(&r, NULL, 0, &a);
    }
    skpo_jbuf_free(&a);
    skpo_jbuf_free(&b);
    skpo_rec_free(&r);
    skpo_rec_free(&q);
    return 0;
}
