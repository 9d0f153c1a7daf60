/*
 * strmap.h - the project's one string hash and its one string -> size_t map.
 *
 * The hash is 64-bit FNV-1a. It is not a defence against chosen keys; it is
 * short, has no alignment needs, and feeds the seeds of skpo_seed_derive
 * (rng.h), so its values are part of what a run draws: never change it.
 *
 * The map is open addressing with linear probing in a power-of-two table kept
 * at most half full (a miss ends at the first empty slot after a few probes).
 * Keys are NUL-terminated strings, borrowed by default (the caller keeps them
 * alive and unchanged while the map lives) or copied into the map when it is
 * initialised with SKPO_STRMAP_COPY. A zeroed struct is an empty map of
 * borrowed keys. There is no delete: every user builds a map, reads it and
 * frees it. The table's order depends on the hash, so a caller that needs
 * input order keeps its own array and maps keys to indices into it.
 *
 * Not here: the tokenizer's maps (tokenizer_impl.h), which key byte spans
 * that are not NUL-terminated, keep the hash in the slot and hash 8 bytes at a
 * time on the encode path.
 */
#ifndef SKPO_STRMAP_H
#define SKPO_STRMAP_H

#include <stddef.h>
#include <stdint.h>

// --- hash -------------------------------------------------------------------------

#define SKPO_HASH_INIT 0xcbf29ce484222325ULL // FNV-1a offset basis: the h of no bytes

// FNV-1a of n bytes at p, continuing from h (SKPO_HASH_INIT to start).
uint64_t skpo_hash_bytes(uint64_t h, const void *p, size_t n);
// FNV-1a of the bytes of s before its NUL.
uint64_t skpo_hash_str(const char *s);

// --- map --------------------------------------------------------------------------

enum { SKPO_STRMAP_BORROW = 0, SKPO_STRMAP_COPY = 1 };

typedef struct skpo_strmap {
    const char **key; // (cap) NULL = empty slot
    size_t *val;      // (cap)
    size_t cap, n;    // cap 0 or a power of two, always > 2 n
    int copy;         // SKPO_STRMAP_COPY: keys are the map's copies
} skpo_strmap;

// An empty map; the same as zeroing it, with the key ownership spelled out.
void skpo_strmap_init(skpo_strmap *m, int copy);
// Frees the table (and copied keys); the map is empty and usable again.
void skpo_strmap_free(skpo_strmap *m);

// The value of key, NULL when absent. The pointer lasts until the next add.
size_t *skpo_strmap_get(const skpo_strmap *m, const char *key);
// The value of key, added as val when absent (*added, nullable, says which).
// Assign through the pointer to overwrite; it lasts until the next add.
size_t *skpo_strmap_add(skpo_strmap *m, const char *key, size_t val, int *added);

#endif
