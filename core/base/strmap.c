/*
 * strmap.c - FNV-1a and the open-addressing string map; see strmap.h.
 */
#include "base/strmap.h"

#include "base/common.h"

#include <stdlib.h>
#include <string.h>

uint64_t skpo_hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t skpo_hash_str(const char *s) {
    SKPO_ASSERT(s != NULL);
    return skpo_hash_bytes(SKPO_HASH_INIT, s, strlen(s));
}

void skpo_strmap_init(skpo_strmap *m, int copy) {
    memset(m, 0, sizeof *m);
    m->copy = copy;
}

void skpo_strmap_free(skpo_strmap *m) {
    if (m->copy)
        for (size_t i = 0; i < m->cap; i++) free((char *)m->key[i]);
    free(m->key);
    free(m->val);
    skpo_strmap_init(m, m->copy);
}

// The slot of key in a table of cap (> 0) slots: its own, or the empty one
// where it would go.
static size_t slot_of(const char **key, size_t cap, const char *k) {
    size_t i = skpo_hash_str(k) & (cap - 1);
    while (key[i] && strcmp(key[i], k) != 0) i = (i + 1) & (cap - 1);
    return i;
}

size_t *skpo_strmap_get(const skpo_strmap *m, const char *key) {
    SKPO_ASSERT(key != NULL);
    if (!m->cap) return NULL;
    size_t i = slot_of(m->key, m->cap, key);
    return m->key[i] ? &m->val[i] : NULL;
}

// Double the table (64 slots at first); the keys move, their strings do not.
static void grow(skpo_strmap *m) {
    size_t cap = m->cap ? 2 * m->cap : 64;
    const char **key = skpo_xcalloc(cap, sizeof *key);
    size_t *val = skpo_xcalloc(cap, sizeof *val);
    for (size_t i = 0; i < m->cap; i++)
        if (m->key[i]) {
            size_t j = slot_of(key, cap, m->key[i]);
            key[j] = m->key[i];
            val[j] = m->val[i];
        }
    free(m->key);
    free(m->val);
    m->key = key;
    m->val = val;
    m->cap = cap;
}

size_t *skpo_strmap_add(skpo_strmap *m, const char *key, size_t val, int *added) {
    SKPO_ASSERT(key != NULL);
    if (2 * (m->n + 1) >= m->cap) grow(m);
    size_t i = slot_of(m->key, m->cap, key);
    if (added) *added = !m->key[i];
    if (!m->key[i]) {
        m->key[i] = m->copy ? skpo_xstrdup(key) : key;
        m->val[i] = val;
        m->n++;
    }
    return &m->val[i];
}
