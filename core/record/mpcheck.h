/*
 * mpcheck.h - validate the structure of one msgpack value before any decoder
 * allocates for it. msgpack-c sizes arrays and maps from their declared counts,
 * so a 5-byte header claiming 2^32 elements would make it allocate gigabytes;
 * this walker rejects any count larger than the bytes left (every element takes
 * at least one byte) and any nesting deeper than max_depth, iteratively (no
 * recursion), in O(bytes).
 */
#ifndef SKPO_MPCHECK_H
#define SKPO_MPCHECK_H

#include "base/common.h"

#include <stddef.h>
#include <stdint.h>

#define SKPO_MP_MAX_DEPTH 64
// No value may claim more bytes or elements than this (the record size cap).
#define SKPO_MP_MAX_BYTES ((uint64_t)1 << 31)

// Check one complete msgpack value at buf[0..len).
//   SKPO_OK:      *used = its size in bytes
//   SKPO_EOF:     the bytes so far are a valid prefix; more are needed
//                 (only when `complete` is 0; with complete = 1 this is SKPO_EFORMAT)
//   SKPO_EFORMAT: malformed (bad type byte, impossible count, too deep); err says why
skpo_status skpo_mp_check(const char *buf, size_t len, int complete, size_t *used, skpo_err *err);

#endif
