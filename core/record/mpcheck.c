/*
 * mpcheck.c - see mpcheck.h. A value is walked with an explicit stack of
 * "values still to read" per nesting level.
 */
#include "record/mpcheck.h"

#include <stdint.h>

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

// Header of the value at p: its header size, payload bytes to skip, and how
// many child values follow (containers). Returns 0 on a bad type byte.
static int header(const unsigned char *p, size_t avail, size_t *hsize, uint64_t *skip, uint64_t *kids, int *need) {
    unsigned b = p[0];
    *skip = 0;
    *kids = 0;
    *need = 0;
    size_t lenbytes = 0;  // size of the length field after the type byte
    int kind = 0;         // 1 = payload of that length, 2 = array, 3 = map, 4 = ext (length + 1 type byte)
    if (b <= 0x7f || b >= 0xe0 || (b >= 0xc0 && b <= 0xc3 && b != 0xc1)) { *hsize = 1; return 1; }
    if (b >= 0x80 && b <= 0x8f) { *hsize = 1; *kids = 2u * (b & 0x0f); return 1; }
    if (b >= 0x90 && b <= 0x9f) { *hsize = 1; *kids = b & 0x0f; return 1; }
    if (b >= 0xa0 && b <= 0xbf) { *hsize = 1; *skip = b & 0x1f; return 1; }
    switch (b) {
    case 0xc4: case 0xd9: lenbytes = 1; kind = 1; break;
    case 0xc5: case 0xda: lenbytes = 2; kind = 1; break;
    case 0xc6: case 0xdb: lenbytes = 4; kind = 1; break;
    case 0xc7: lenbytes = 1; kind = 4; break;
    case 0xc8: lenbytes = 2; kind = 4; break;
    case 0xc9: lenbytes = 4; kind = 4; break;
    case 0xca: *hsize = 1; *skip = 4; return 1;
    case 0xcb: *hsize = 1; *skip = 8; return 1;
    case 0xcc: case 0xd0: *hsize = 1; *skip = 1; return 1;
    case 0xcd: case 0xd1: *hsize = 1; *skip = 2; return 1;
    case 0xce: case 0xd2: *hsize = 1; *skip = 4; return 1;
    case 0xcf: case 0xd3: *hsize = 1; *skip = 8; return 1;
    case 0xd4: *hsize = 1; *skip = 2; return 1;
    case 0xd5: *hsize = 1; *skip = 3; return 1;
    case 0xd6: *hsize = 1; *skip = 5; return 1;
    case 0xd7: *hsize = 1; *skip = 9; return 1;
    case 0xd8: *hsize = 1; *skip = 17; return 1;
    case 0xdc: lenbytes = 2; kind = 2; break;
    case 0xdd: lenbytes = 4; kind = 2; break;
    case 0xde: lenbytes = 2; kind = 3; break;
    case 0xdf: lenbytes = 4; kind = 3; break;
    default: return 0;  // 0xc1 is never used
    }
    *hsize = 1 + lenbytes;
    if (avail < *hsize) { *need = 1; return 1; }
    uint64_t n = be(p + 1, (int)lenbytes);
    if (kind == 1) *skip = n;
    else if (kind == 4) *skip = n + 1;
    else if (kind == 2) *kids = n;
    else *kids = 2 * n;
    return 1;
}

skpo_status skpo_mp_check(const char *buf, size_t len, int complete, size_t *used, skpo_err *err) {
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t stack[SKPO_MP_MAX_DEPTH + 1];
    int depth = 0;
    stack[0] = 1;  // one value to read at the top level
    size_t off = 0;
    while (depth >= 0) {
        if (stack[depth] == 0) { depth--; continue; }
        if (off >= len) goto more;
        size_t hs;
        uint64_t skip, kids;
        int need;
        if (!header(p + off, len - off, &hs, &skip, &kids, &need))
            return skpo_err_set(err, SKPO_EFORMAT, "invalid msgpack type byte 0x%02x at offset %zu", p[off], off);
        if (need) goto more;
        stack[depth]--;
        size_t left = len - off - hs;
        if (skip) {
            if (skip > left) {
                if (complete || skip > SKPO_MP_MAX_BYTES)
                    return skpo_err_set(err, SKPO_EFORMAT, "msgpack value of %llu bytes runs past the end (offset %zu)",
                                        (unsigned long long)skip, off);
                goto more;
            }
        }
        // Each child takes at least one byte. With complete input the bound is
        // exact; while streaming, no value may exceed the record cap.
        if (kids && (complete ? kids > left : kids > SKPO_MP_MAX_BYTES))
            return skpo_err_set(err, SKPO_EFORMAT, "msgpack container declares %llu elements in %zu bytes (offset %zu)",
                                (unsigned long long)kids, left, off);
        off += hs + (size_t)skip;
        if (kids) {
            if (depth + 1 > SKPO_MP_MAX_DEPTH)
                return skpo_err_set(err, SKPO_EFORMAT, "msgpack nesting deeper than %d (offset %zu)", SKPO_MP_MAX_DEPTH, off);
            stack[++depth] = kids;
        }
    }
    *used = off;
    return SKPO_OK;
more:
    if (complete) return skpo_err_set(err, SKPO_EFORMAT, "msgpack value truncated after %zu bytes", len);
    return SKPO_EOF;
}
