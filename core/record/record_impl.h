/*
 * record_impl.h - internals shared by record.c and recstream.c; not part of
 * the public API (tools use record.h only).
 */
#ifndef SKPO_RECORD_IMPL_H
#define SKPO_RECORD_IMPL_H

#include "record/record.h"

#include <msgpack.h>

// A growable byte buffer for msgpack_packer; allocation failure dies (xrealloc).
typedef struct skpo_pbuf {
    char *p;
    size_t n, cap;
} skpo_pbuf;

// msgpack_packer write callback appending to a skpo_pbuf.
int skpo_pbuf_write(void *data, const char *buf, size_t len);
// Append the msgpack map of r to b.
void skpo_rec_pack_into(skpo_pbuf *b, const skpo_rec *r);
// Decode one complete msgpack map (already walked by skpo_mp_check, exactly
// len bytes) into r (cleared first) and validate it against the schema. The
// message has no "at record N" suffix.
skpo_status skpo_rec_decode(const char *buf, size_t len, skpo_rec *r, skpo_err *err);

#endif
